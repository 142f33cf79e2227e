"""Submit a training run to Spark and track it: on YARN (cluster mode) or through the local backend.

The driver is ``airflow_tfos.runtime.driver`` (run by a tiny launcher file) with ``--run-dir``; the run
directory's ``spec.json`` says what to train. The hook prepares what every backend submits (the Spark
settings, from the pure functions of :mod:`airflow_tfos.hooks.spark_conf`; what is shipped; the secrets)
as a :class:`~airflow_tfos.hooks.backends.base.Submission`, and hands it, like every lookup, search and kill,
to the backend its connection's master picks.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path

from airflow.sdk import BaseHook

from airflow_tfos.hooks.backends.base import Backend, Submission, check_tag, default_tracker_dir
from airflow_tfos.hooks.backends.driver_token import DriverTokenMixin
from airflow_tfos.hooks.backends.local_tracker import LocalBackend
from airflow_tfos.hooks.backends.spark_submit import TrainingSubmit
from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.errors import TFoSSubmitError
from airflow_tfos.hooks.spark_conf import (
    _GPU_SCRIPT,
    _LAUNCHER,
    GPU_SCRIPT_NAME,
    LAUNCHER_NAME,
    cached_file,
    env_conf,
    openlineage_parent_conf,
    packed_env_conf,
    spark_defaults,
    training_conf,
)
from airflow_tfos.hooks.user_code import CodePackage, ShippedCode, code_zip
from airflow_tfos.links.tfos import HISTORY_SERVER_CONF, history_server_url
from airflow_tfos.shared.storage.kerberos import SUBMITTED_TOKEN_ENV
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV, env_value

#: The alias the packed environment is unpacked as in the containers (``./environment/bin/python``).
PACKED_ENV_ALIAS = "#environment"


class TFoSHook(DriverTokenMixin, BaseHook):
    """Submit a training run (the driver entrypoint on a run directory) and track, find and kill it.

    The ``spark`` connection's master picks the backend, once: ``yarn`` submits in cluster mode and tracks the
    application through the ResourceManager (:class:`~airflow_tfos.hooks.backends.yarn.YarnBackend`);
    ``local-cluster[...]``, ``local[N]`` and ``spark://host:port`` run the driver as a detached local
    spark-submit in client mode (:class:`~airflow_tfos.hooks.backends.local.LocalSparkBackend`).

    On YARN the runtime is shipped with ``--py-files`` (a zip of ``airflow_tfos.runtime`` and the modules it
    imports, built from this installation). The cluster's Python needs pyspark, TensorFlow and the
    runtime's other packages; to bring your own, pack an environment (``conda pack -o env.tar.gz`` or
    ``venv-pack -o env.tar.gz``) and pass ``packed_env="hdfs:///envs/env.tar.gz"``: it is shipped with
    ``--archives ...#environment`` and used as the driver's and executors' ``PYSPARK_PYTHON``
    (``./environment/bin/python``).

    Secrets (the WebHDFS connection's settings) never go on the command line: they reach the driver and
    executors through a properties file readable only by this user (deleted after submission), and are
    registered with Airflow's secret masker. ``env_vars`` and ``conf`` do go on the command line.

    On a secure YARN (Hadoop's files say ``kerberos``) the driver, whose Python process has no Kerberos login,
    reaches WebHDFS with the application's HDFS delegation token from YARN, which spark-submit obtained and the
    ResourceManager renews and cancels (docs/kerberos.md). Only where Hadoop's files do not say so but the run
    directory's WebHDFS does, this hook obtains a token with its own login before spark-submit and hands it to
    the driver (:class:`~airflow_tfos.hooks.backends.driver_token.DriverTokenMixin`).

    :param spark_conn_id: the ``spark`` connection (host ``yarn``, ``local-cluster[N,C,MB]``, ``local[N]`` or
        ``spark://host:port``; extras ``queue``, ``spark-binary``, ``principal``, ``keytab`` as in the Spark provider).
    :param yarn_conn_id: the ``yarn`` connection of the ResourceManager (YARN backend).
    :param webhdfs_conn_id: a WebHDFS connection whose settings the driver and executors get (``AIRFLOW_TFOS_WEBHDFS``).
    :param conf: Spark settings for every submission (``submit(conf=...)`` adds to them).
    :param spark_binary: the spark-submit command (default: the connection's, else ``spark-submit``, found on
        the PATH or beside pyspark).
    :param tracker_dir: the local backend's tracker directory; also holds the cached launcher and zip.
    :param env_vars: environment variables for the driver and executors (not for secrets).
    :param py_files: more ``--py-files`` (comma-separated), e.g. the module of the training function (the
        operators ship the package of their ``train_fn`` by themselves: :meth:`ship_user_code`).
    :param archives: more ``--archives`` (comma-separated).
    :param files: more ``--files`` (comma-separated).
    :param packed_env: a packed Python environment (tar.gz) to run the driver and executors with.
    :param ship_runtime: ship the runtime zip with ``--py-files`` (YARN; off when the cluster has airflow-tfos).
    :param properties_file: a Spark properties file (the secrets are added to a private copy of it).
    :param load_spark_defaults: add ``--load-spark-defaults`` when a properties file is used (Spark >= 4.0;
        without it Spark skips spark-defaults.conf); set False for older spark-submit.
    :param gpu_discovery_script: the GPU discovery script (default: one shipped that asks ``nvidia-smi``).
    :param heartbeat_secs: how often the driver updates status.json.
    :param proxy_user: the user the YARN application runs as (``spark-submit --proxy-user``); the connection's
        principal impersonates them (Hadoop's ``hadoop.proxyuser.<user>.hosts/groups`` must allow it), logged in
        from the connection's keytab into a private ticket cache (Spark refuses ``--proxy-user`` together with
        ``--principal``/``--keytab``). Applications are searched as this user's.
    :param openlineage_parent: with the OpenLineage provider installed and enabled, hand the Airflow task's
        OpenLineage parent job (namespace, job name, run id, and root) to the application in the
        ``spark.openlineage.parent*`` / ``rootParent*`` settings, as the Spark provider does, so that a
        Spark-side OpenLineage listener links its events to the task (settings already given are kept).
    """

    conn_name_attr = "spark_conn_id"
    default_conn_name = "spark_default"
    hook_name = "TensorFlow on Spark"

    def __init__(
        self,
        *,
        spark_conn_id: str = "spark_default",
        yarn_conn_id: str = "yarn_default",
        webhdfs_conn_id: str | None = None,
        conf: dict[str, str] | None = None,
        spark_binary: str | None = None,
        tracker_dir: str | None = None,
        env_vars: dict[str, str] | None = None,
        py_files: str | None = None,
        archives: str | None = None,
        files: str | None = None,
        packed_env: str | None = None,
        ship_runtime: bool = True,
        properties_file: str | None = None,
        load_spark_defaults: bool = True,
        gpu_discovery_script: str | None = None,
        heartbeat_secs: float = 10.0,
        openlineage_parent: bool = True,
        proxy_user: str | None = None,
    ) -> None:
        super().__init__()
        self.proxy_user = proxy_user or None
        self.spark_conn_id = spark_conn_id
        self.yarn_conn_id = yarn_conn_id
        self.webhdfs_conn_id = webhdfs_conn_id
        self.conf = dict(conf or {})
        self.spark_binary = spark_binary
        self.tracker_dir = tracker_dir
        self.env_vars = dict(env_vars or {})
        self.py_files = py_files
        self.archives = archives
        self.files = files
        self.packed_env = packed_env
        self.ship_runtime = ship_runtime
        self.properties_file = properties_file
        self.load_spark_defaults = load_spark_defaults
        self.gpu_discovery_script = gpu_discovery_script
        self.heartbeat_secs = heartbeat_secs
        self.openlineage_parent = openlineage_parent
        self._user_code: ShippedCode | None = None
        self._driver_token = None  # a TokenKeeper: the delegation token handed to the driver (YARN, Kerberos)

    # --- connections ---------------------------------------------------------------------------------

    @cached_property
    def _spark(self) -> TrainingSubmit:
        return TrainingSubmit(conn_id=self.spark_conn_id, spark_binary=self._binary())

    @property
    def master(self) -> str:
        """The Spark master of the connection."""
        return self._spark.master

    @cached_property
    def _backend(self) -> Backend:
        """Where the driver runs, chosen once from the connection's master: YARN, else the local backend."""
        if self.master.startswith("yarn"):
            from airflow_tfos.hooks.backends.yarn import YarnBackend

            return YarnBackend(
                self.yarn_hook,
                tracker_dir=self._tracker_dir,
                staging_storage=self._hdfs_storage,
                app_user=self.proxy_user,
            )
        from airflow_tfos.hooks.backends.local import LocalSparkBackend
        from airflow_tfos.hooks.backends.standalone import spark_user

        java_options = self.conf.get("spark.driver.extraJavaOptions")
        return LocalSparkBackend(self.local, master=self.master, user=spark_user(java_options))

    @property
    def backend(self) -> str:
        """``yarn`` when the connection's master is YARN, else ``local``."""
        return self._backend.name

    @property
    def lease_owner(self) -> str:
        """This worker as the owner of a run directory's lease (:mod:`airflow_tfos.shared.lease`)."""
        return self._backend.lease_owner

    @cached_property
    def yarn_hook(self):
        from airflow_tfos.hooks.yarn import YarnHook

        return YarnHook(yarn_conn_id=self.yarn_conn_id)

    @cached_property
    def local(self) -> LocalBackend:
        return LocalBackend(self._tracker_dir)

    @property
    def _tracker_dir(self) -> str:
        return self.tracker_dir or default_tracker_dir()

    @property
    def _cache_dir(self) -> Path:
        return Path(self._tracker_dir) / "cache"

    def _binary(self) -> str | None:
        """The spark-submit to run: the given one, else None (the connection's), else the one beside pyspark."""
        if self.spark_binary:
            return self.spark_binary
        if shutil.which("spark-submit"):
            return None
        spec = importlib.util.find_spec("pyspark")
        if spec and spec.submodule_search_locations:
            beside = Path(next(iter(spec.submodule_search_locations))) / "bin" / "spark-submit"
            if beside.exists():
                return str(beside)
        return None

    def _hdfs_storage(self):
        """HDFS as the webhdfs connection, or without one ``AIRFLOW_TFOS_WEBHDFS`` or ``HADOOP_CONF_DIR``, reach it."""
        from airflow_tfos.hooks.webhdfs_connection import config_without_connection, storage_from_connection
        from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage

        if self._webhdfs_conn_id:
            return storage_from_connection(self._webhdfs_conn_id)
        config = config_without_connection()
        if config is None:
            raise ValueError("no webhdfs connection, AIRFLOW_TFOS_WEBHDFS or HADOOP_CONF_DIR names a namenode")
        return WebHDFSStorage(config)

    @cached_property
    def _webhdfs_conn_id(self) -> str | None:
        """The webhdfs connection: the one named, else ``webhdfs_default`` when it exists (as for the run directory,
        the inputs and the registry on the Airflow side), else None (``AIRFLOW_TFOS_WEBHDFS``, ``HADOOP_CONF_DIR``)."""
        from airflow_tfos.hooks.webhdfs_connection import default_conn_id

        return self.webhdfs_conn_id or default_conn_id()

    def _secret_env(self) -> dict[str, str]:
        """The HDFS settings for the driver and executors: from the webhdfs connection (:attr:`_webhdfs_conn_id`);
        without one from ``AIRFLOW_TFOS_WEBHDFS`` or the files of ``HADOOP_CONF_DIR``, which YARN's containers do
        not inherit and the runtime does not read."""
        from airflow.sdk.log import mask_secret

        from airflow_tfos.hooks.webhdfs_connection import config_without_connection, webhdfs_config_from_connection

        if self._webhdfs_conn_id:
            config = webhdfs_config_from_connection(self._webhdfs_conn_id).to_json()
        elif (found := config_without_connection()) is not None:  # the runtime reads no HADOOP_CONF_DIR itself
            config = found.to_json()
        else:
            return {}
        text = config if isinstance(config, str) else json.dumps(config, sort_keys=True)
        encoded = env_value(text)  # YARN's launch script would drop the JSON's quotes
        mask_secret(text)
        mask_secret(encoded)
        return {WEBHDFS_ENV: encoded}

    # --- submit --------------------------------------------------------------------------------------

    def submit(
        self,
        run_dir: str,
        *,
        tag: str,
        name: str,
        num_nodes: int,
        executor_cores: int = 1,
        executor_memory: str = "2g",
        tf_memory_mb: int | None = None,
        gpus_per_node: int = 0,
        conf: dict[str, str] | None = None,
        spec_hash: str | None = None,
    ) -> str:
        """Submit the driver on ``run_dir`` (its spec.json must be written); return the application id.

        Raises :class:`TFoSConfigError` before submitting when the settings cannot run (or do not fit the
        cluster's largest container), and :class:`~airflow_tfos.hooks.backends.base.ApplicationAlreadyRunningError`
        when a live application carries ``tag``.

        :param run_dir: the run directory (a URI the driver can reach).
        :param tag: the run's tag, attached to the application (YARN ``applicationTags``, or the local tracker).
        :param name: the application's name.
        :param num_nodes: TF nodes (one executor each); the spec's ``num_nodes``.
        :param executor_cores: cores of each executor.
        :param executor_memory: heap of each executor JVM (the TF process is not in it).
        :param tf_memory_mb: memory of each TF process in MiB; on YARN it is added to the executor's
            ``spark.executor.memoryOverhead`` (with 512 MiB for the PySpark worker).
        :param gpus_per_node: GPUs for each TF node (the spec's ``gpus_per_node``).
        :param conf: more Spark settings for this submission.
        :param spec_hash: the hash of the spec.json that was written
            (:func:`~airflow_tfos.shared.rundir.spec_digest`, or
            :meth:`RunDir.write_spec`'s shorter answer). It goes
            on the driver's command line (``--spec-hash``), out of the run directory's reach: the driver refuses
            a spec.json changed after submission. None: the driver runs whatever spec.json holds.
        """
        tag = check_tag(tag)
        backend = self._backend
        gpu_script = None
        if gpus_per_node:
            gpu_script = self.gpu_discovery_script or str(
                cached_file(self._cache_dir, GPU_SCRIPT_NAME, _GPU_SCRIPT, 0o755)
            )
        settings = training_conf(
            backend=backend.name,
            tag=tag,
            num_nodes=num_nodes,
            executor_cores=executor_cores,
            executor_memory=executor_memory,
            tf_memory_mb=tf_memory_mb,
            gpus_per_node=gpus_per_node,
            user_conf={**self.conf, **env_conf(self.env_vars, backend=backend.name), **(conf or {})},
            master=self.master,
            gpu_discovery_script=backend.executor_path(gpu_script) if gpu_script else None,
        )
        if self.packed_env:
            settings = {**packed_env_conf(backend=backend.name), **settings}
        if self.openlineage_parent:
            settings = {**settings, **openlineage_parent_conf(settings)}
        args = ["--run-dir", run_dir, "--heartbeat-secs", str(self.heartbeat_secs)]
        if spec_hash:
            args += ["--spec-hash", spec_hash]
        py_files = [p for p in [self.py_files] if p]
        if self._user_code is not None:
            py_files.insert(0, str(self._user_code.path))
        packed = f"{self.packed_env.removesuffix(PACKED_ENV_ALIAS)}{PACKED_ENV_ALIAS}" if self.packed_env else None
        archives = [a for a in [self.archives, packed] if a]
        submission = Submission(
            application=str(cached_file(self._cache_dir, LAUNCHER_NAME, _LAUNCHER)),
            args=tuple(args),
            name=name,
            tag=tag,
            run_dir=run_dir,
            conf=settings,
            spark_conn_id=self.spark_conn_id,
            cache_dir=str(self._cache_dir),
            num_nodes=num_nodes,
            executor_cores=executor_cores,
            executor_memory=executor_memory,
            spark_binary=self._binary(),
            py_files=tuple(py_files),
            archives=",".join(archives) or None,
            files=self.files,
            properties_file=self.properties_file,
            load_spark_defaults=self.load_spark_defaults,
            secret_env=self._secret_env(),
            env_vars=dict(self.env_vars),
            gpu_script=gpu_script if gpu_script and not self.gpu_discovery_script else None,
            ship_runtime=self.ship_runtime,
            proxy_user=self.proxy_user,
        )
        if self.proxy_user and backend.name != "yarn":
            raise TFoSSubmitError(
                f"proxy_user {self.proxy_user!r} needs a YARN master (connection {self.spark_conn_id!r} names "
                f"{self.master!r}): impersonation is Hadoop's, on a secure cluster"
            )
        token = self._obtain_driver_token(run_dir, name) if backend.name == "yarn" else None
        if token:
            submission = dataclasses.replace(submission, driver_secret_env={SUBMITTED_TOKEN_ENV: token})
        try:
            return backend.submit(submission)
        except BaseException:
            self.end_driver_token()  # nothing will use it
            raise

    def ship_user_code(self, packages: Sequence[CodePackage]) -> ShippedCode | None:
        """Zip the user's ``packages`` (content-hashed, cached beside the runtime zip) and ship the zip with
        ``--py-files`` on every later :meth:`submit`, on YARN and locally alike; None when there is nothing
        to ship. Raises :class:`~airflow_tfos.hooks.user_code.UserCodeError` when the code is too large."""
        self._user_code = code_zip(packages, self._cache_dir)
        return self._user_code

    # --- state, search, kill -------------------------------------------------------------------------

    def history_url(self, app: AppState, conf: Mapping[str, str] | None = None) -> str | None:
        """The Spark history server's page of an ended YARN application, when ``conf`` (the operator's), the
        Spark connection's extra or the cluster's ``spark-defaults.conf`` (``SPARK_CONF_DIR``) names the history
        server (``spark.yarn.historyServer.address``); else None.
        A YARN application's own UI (its tracking URL) is gone once it ended: this is where its UI lives on."""
        if not app.is_terminal or not app.app_id.startswith("application_"):
            return None
        address = (conf or {}).get(HISTORY_SERVER_CONF)
        if not address:
            try:
                extra = self.get_connection(self.spark_conn_id).extra_dejson
            except Exception as exc:  # a link is never worth failing the task for
                self.log.warning("cannot read the %s connection for the history server: %s", self.spark_conn_id, exc)
                return None
            address = extra.get(HISTORY_SERVER_CONF) or spark_defaults().get(HISTORY_SERVER_CONF)
        return history_server_url(str(address), app.app_id) if address else None

    def get_state(self, app_id: str) -> AppState:
        """The application's state."""
        return self._backend.get_state(app_id)

    async def aget_state(self, app_id: str) -> AppState:
        """The application's state, without blocking the event loop."""
        return await self._backend.aget_state(app_id)

    def find_by_tag(self, tag: str) -> list[AppState]:
        """The applications carrying ``tag``, live or not."""
        return self._backend.find_by_tag(check_tag(tag))

    async def afind_by_tag(self, tag: str) -> list[AppState]:
        """:meth:`find_by_tag` without blocking the event loop."""
        return await self._backend.afind_by_tag(check_tag(tag))

    def find_live(self, tag: str) -> list[AppState]:
        """The applications carrying ``tag`` that have not ended."""
        return self._backend.find_live(check_tag(tag))

    def kill(self, app_id: str, grace_secs: float = 30) -> AppState:
        """Kill the application; one that has ended, or that the cluster has forgotten, is left alone.

        :param app_id: the application.
        :param grace_secs: locally, seconds between SIGTERM and SIGKILL; on YARN (which kills a container
            with SIGTERM, then SIGKILL after ``yarn.nodemanager.sleep-delay-before-sigkill.ms``) how long to
            wait for the ResourceManager to report it killed (at least 30 s).
        """
        return self._backend.kill(app_id, grace_secs)

    async def akill(self, app_id: str, grace_secs: float = 30) -> AppState:
        """:meth:`kill` without blocking the event loop."""
        return await self._backend.akill(app_id, grace_secs)

    def clean_up(self, app: AppState) -> None:
        """Remove what the cluster left of ``app`` if it ended without succeeding (on YARN: its ``.sparkStaging``
        folder, which Spark removes itself only when its application master ends its last attempt)."""
        self._backend.clean_up(app)
