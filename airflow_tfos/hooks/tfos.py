"""Submit a training run to Spark and track it: on YARN (cluster mode) or through the local backend.

The driver is ``airflow_tfos.runtime.driver`` (run by a tiny launcher file) with ``--run-dir``; the run
directory's ``spec.json`` says what to train. Everything that decides Spark settings is a pure function
here (:func:`training_conf`, :func:`check_container_fits`, :func:`check_local_master`), tested without Spark.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import io
import json
import math
import os
import re
import shutil
import uuid
import zipfile
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.local import (
    ApplicationAlreadyRunningError,
    LocalBackend,
    check_tag,
    default_tracker_dir,
    tag_lock,
)
from airflow_tfos.hooks.state import AppState

#: The environment variable that carries the WebHDFS settings (JSON) to the driver and executors.
WEBHDFS_ENV = "AIRFLOW_TFOS_WEBHDFS"
#: Memory (MB) of the PySpark worker that feeds a TF node and supervises it, on top of the TF process.
PYSPARK_WORKER_MB = 512
#: Spark's own off-heap overhead of a JVM: max(384 MB, 10 % of its heap) (memoryOverheadFactor, minMemoryOverhead).
MIN_OVERHEAD_MB, OVERHEAD_FACTOR = 384, 0.10
LIVE_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")
LAUNCHER_NAME = "tfos_driver.py"
#: Shipped with the runtime whether or not it imports them (storage plugs WebHDFS in by name).
_SHIPPED = ("__init__.py", "rundir.py", "storage.py", "spec.py", "webhdfs.py")
GPU_SCRIPT_NAME = "tfos_gpu_discovery.sh"

_LAUNCHER = '''"""Start the airflow-tfos driver (written by airflow_tfos.hooks.tfos; spark-submit runs this file)."""
import sys

from airflow_tfos.runtime.driver import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''
_GPU_SCRIPT = """#!/usr/bin/env bash
# Spark resource discovery (airflow-tfos): print the GPUs this container sees, as Spark's JSON.
nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | awk 'BEGIN { ORS = ""; \
printf "{\\"name\\": \\"gpu\\", \\"addresses\\": [" } { printf "%s\\"%s\\"", (NR > 1 ? "," : ""), $1 } \
END { print "]}\\n" }'
"""
_MEMORY = re.compile(r"^\s*(\d+)\s*([kmgtp]?)b?\s*$", re.IGNORECASE)
_YARN_APP_ID = re.compile(r"\bapplication_\d+_\d+\b")
_SUBMITTED = re.compile(r"Submitted application (application_\d+_\d+)")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")
_LOCAL_THREADS = re.compile(r"^local\[(\d+)(?:,\s*\d+)?\]$")
#: Set from arguments of submit(): conf may not set them to something else.
_FROM_ARGUMENTS = {
    "spark.executor.memory": "executor_memory",
    "spark.executor.cores": "executor_cores",
    "spark.task.cpus": "executor_cores",
    "spark.executor.resource.gpu.amount": "gpus_per_node",
    "spark.task.resource.gpu.amount": "gpus_per_node",
}


class TFoSConfigError(ValueError):
    """Spark settings that cannot run a TF cluster (or do not fit the cluster); the message says what to change."""


class TFoSSubmitError(RuntimeError):
    """spark-submit failed or did not say which application it started."""


def memory_mb(value: str | int) -> int:
    """Spark's memory string (``2g``, ``768m``, ``1024``: MiB by default) in MiB."""
    if isinstance(value, int):
        return value
    found = _MEMORY.match(str(value))
    if not found:
        raise TFoSConfigError(f"{value!r} is not a Spark memory size such as 2g, 768m or 1024")
    power = {"k": -1, "": 0, "m": 0, "g": 1, "t": 2, "p": 3}[found.group(2).lower()]
    return math.ceil(int(found.group(1)) * 1024.0**power)


def default_overhead_mb(heap_mb: int) -> int:
    """Spark's default memoryOverhead of a JVM with ``heap_mb`` of heap."""
    return max(MIN_OVERHEAD_MB, math.ceil(OVERHEAD_FACTOR * heap_mb))


def _is_true(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def training_conf(
    *,
    backend: str,
    tag: str,
    num_nodes: int,
    executor_cores: int = 1,
    executor_memory: str = "2g",
    tf_memory_mb: int | None = None,
    gpus_per_node: int = 0,
    user_conf: Mapping[str, str] | None = None,
    master: str = "yarn",
    gpu_discovery_script: str | None = None,
) -> dict[str, str]:
    """Return the Spark settings of a training application: what barrier-mode TF needs, then ``user_conf``.

    One TF node per executor: ``num_nodes`` executors of ``executor_cores`` cores, one task each
    (``spark.task.cpus`` = ``executor_cores``). On YARN the TF process is outside the JVM: its memory goes
    into ``spark.executor.memoryOverhead`` with :data:`PYSPARK_WORKER_MB` and Spark's own overhead.
    ``spark.executor.pyspark.memory`` is refused: PySpark enforces it as an address-space limit
    (``RLIMIT_AS``) on the Python worker, the TF process inherits it, and TensorFlow, which reserves far
    more address space than it uses, fails under it.

    :param backend: ``yarn`` or ``local``.
    :param tag: the run's tag (``spark.yarn.tags`` on YARN).
    :param tf_memory_mb: memory of each TF process in MiB (YARN only: locally there are no containers).
    :param user_conf: the user's settings; they win, unless they break the above (then this raises).
    :param master: the Spark master (local backend: ``local-cluster[...]``, ``local[...]`` or ``spark://``).
    :param gpu_discovery_script: the discovery script's path as executors see it (with ``gpus_per_node``).
    The other parameters are :meth:`TFoSHook.submit`'s.
    """
    user = {k: str(v) for k, v in (user_conf or {}).items()}
    if num_nodes < 1 or executor_cores < 1 or gpus_per_node < 0:
        raise TFoSConfigError(
            f"num_nodes ({num_nodes}) and executor_cores ({executor_cores}) must be >= 1, gpus_per_node >= 0"
        )
    conf = {
        "spark.dynamicAllocation.enabled": "false",
        "spark.locality.wait": "0",
        "spark.executor.instances": str(num_nodes),
        "spark.executor.cores": str(executor_cores),
        "spark.task.cpus": str(executor_cores),
        "spark.executor.memory": executor_memory,
    }
    executor_mb = memory_mb(executor_memory)
    if backend == "yarn":
        conf.update(
            {
                "spark.yarn.submit.waitAppCompletion": "false",
                "spark.yarn.maxAppAttempts": "1",
                "spark.yarn.tags": ",".join(dict.fromkeys([check_tag(tag), *_tags(user.pop("spark.yarn.tags", ""))])),
            }
        )
        if tf_memory_mb is not None:
            needed = int(tf_memory_mb) + PYSPARK_WORKER_MB
            given = user.get("spark.executor.memoryOverhead")
            if given is not None and memory_mb(given) < needed:
                raise TFoSConfigError(
                    f"spark.executor.memoryOverhead={given} is less than tf_memory_mb={tf_memory_mb} plus "
                    f"{PYSPARK_WORKER_MB} MB for the PySpark worker: set it to at least {needed}m, or leave it out "
                    "and airflow-tfos computes it"
                )
            conf["spark.executor.memoryOverhead"] = f"{default_overhead_mb(executor_mb) + needed}m"
    else:
        if master.startswith("spark://"):
            conf["spark.cores.max"] = str(num_nodes * executor_cores)  # exactly num_nodes executors
        if master.startswith("local"):
            conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    if gpus_per_node:
        conf["spark.executor.resource.gpu.amount"] = str(gpus_per_node)
        conf["spark.task.resource.gpu.amount"] = str(gpus_per_node)
        if gpu_discovery_script and "spark.executor.resource.gpu.discoveryScript" not in user:
            conf["spark.executor.resource.gpu.discoveryScript"] = gpu_discovery_script
    _check_user_conf(user, conf, num_nodes)
    return {**conf, **user}


def _tags(value: str) -> list[str]:
    return [check_tag(t.strip()) for t in value.split(",") if t.strip()]


def _check_user_conf(user: Mapping[str, str], conf: Mapping[str, str], num_nodes: int) -> None:
    if _is_true(user.get("spark.dynamicAllocation.enabled", "false")):
        raise TFoSConfigError("spark.dynamicAllocation.enabled must be false: barrier mode does not support it")
    if "spark.yarn.maxAppAttempts" in user and user["spark.yarn.maxAppAttempts"] != "1":
        raise TFoSConfigError(
            "spark.yarn.maxAppAttempts must be 1: Airflow retries the task, and the barrier stage retries "
            "lost TF nodes (max_attempts in the spec)"
        )
    if "spark.yarn.submit.waitAppCompletion" in user and _is_true(user["spark.yarn.submit.waitAppCompletion"]):
        raise TFoSConfigError("spark.yarn.submit.waitAppCompletion must be false: sensors wait, not spark-submit")
    if "spark.executor.pyspark.memory" in user:
        raise TFoSConfigError(
            "remove spark.executor.pyspark.memory: PySpark applies it as an address-space limit that the TF "
            "process inherits, and TensorFlow fails under it; give the TF process's memory as tf_memory_mb"
        )
    if int(user.get("spark.executor.instances", num_nodes)) < num_nodes:
        raise TFoSConfigError(
            f"spark.executor.instances={user['spark.executor.instances']} is less than num_nodes={num_nodes}: "
            "each TF node needs its own executor; remove the setting"
        )
    for key, argument in _FROM_ARGUMENTS.items():
        if key in user and key in conf and user[key] != conf[key]:
            raise TFoSConfigError(f"{key}={user[key]} in conf contradicts {argument}: set it with {argument} instead")
        if key in user and key not in conf:
            raise TFoSConfigError(f"{key} is set in conf but {argument} is 0: set it with {argument} instead")


def env_conf(env: Mapping[str, str], *, backend: str) -> dict[str, str]:
    """Settings that put ``env`` in the environment of the executors (and of the YARN driver)."""
    conf = {f"spark.executorEnv.{k}": str(v) for k, v in env.items()}
    if backend == "yarn":
        conf.update({f"spark.yarn.appMasterEnv.{k}": str(v) for k, v in env.items()})
    return conf


def _container(conf: Mapping[str, str], role: str, default_memory: str) -> tuple[int, dict[str, int]]:
    heap = memory_mb(conf.get(f"spark.{role}.memory", default_memory))
    parts = {f"spark.{role}.memory": heap}
    overhead = conf.get(f"spark.{role}.memoryOverhead")
    parts[f"spark.{role}.memoryOverhead"] = memory_mb(overhead) if overhead else default_overhead_mb(heap)
    if role == "executor":
        if conf.get("spark.executor.pyspark.memory"):
            parts["spark.executor.pyspark.memory"] = memory_mb(conf["spark.executor.pyspark.memory"])
        if _is_true(conf.get("spark.memory.offHeap.enabled", "false")):
            parts["spark.memory.offHeap.size"] = memory_mb(conf.get("spark.memory.offHeap.size", "0"))
    return sum(parts.values()), parts


def check_container_fits(
    conf: Mapping[str, str], *, max_memory_mb: int, max_vcores: int, cluster_mode: bool = True
) -> None:
    """Raise :class:`TFoSConfigError` unless the executor (and driver) containers fit YARN's largest one.

    :param conf: the application's Spark settings (as :func:`training_conf` returns them).
    :param max_memory_mb: the ResourceManager's maximum allocation (``yarn.scheduler.maximum-allocation-mb``).
    :param max_vcores: ``yarn.scheduler.maximum-allocation-vcores``.
    :param cluster_mode: the driver runs in a YARN container too.
    """
    roles = [("executor", "1g", int(conf.get("spark.executor.cores", "1")))]
    if cluster_mode:
        roles.append(("driver", "1g", int(conf.get("spark.driver.cores", "1"))))
    for role, default, vcores in roles:
        total, parts = _container(conf, role, default)
        article = "an" if role == "executor" else "a"
        if total > max_memory_mb:
            terms = " + ".join(f"{mb} MB ({key})" for key, mb in parts.items())
            hint = "lower executor_memory or tf_memory_mb" if role == "executor" else "lower spark.driver.memory"
            raise TFoSConfigError(
                f"{article} {role} container needs {terms} = {total} MB, but the cluster's largest container "
                f"is {max_memory_mb} MB (yarn.scheduler.maximum-allocation-mb): {hint}, or raise "
                "yarn.scheduler.maximum-allocation-mb"
            )
        if vcores > max_vcores:
            raise TFoSConfigError(
                f"{article} {role} container needs {vcores} vcores (spark.{role}.cores), but the cluster's "
                f"largest container has {max_vcores} (yarn.scheduler.maximum-allocation-vcores): lower "
                f"{'executor_cores' if role == 'executor' else 'spark.driver.cores'}"
            )


def check_local_master(master: str, *, num_nodes: int, executor_cores: int, executor_memory: str) -> None:
    """Raise :class:`TFoSConfigError` when a local master cannot hold ``num_nodes`` such executors."""
    found = _LOCAL_CLUSTER.match(master)
    if found:
        workers, cores, worker_mb = (int(g) for g in found.groups())
        if num_nodes > workers:
            raise TFoSConfigError(
                f"{master} has {workers} workers but num_nodes={num_nodes} needs one executor each: "
                f"raise the first number of local-cluster[...] to {num_nodes}"
            )
        if executor_cores > cores:
            raise TFoSConfigError(
                f"{master} workers have {cores} cores but executor_cores={executor_cores}: lower executor_cores"
            )
        if memory_mb(executor_memory) > worker_mb:
            raise TFoSConfigError(
                f"executor_memory={executor_memory} does not fit the {worker_mb} MB of a {master} worker: "
                "lower executor_memory or raise the third number of local-cluster[...]"
            )
        return
    threads = _LOCAL_THREADS.match(master)
    if threads and int(threads.group(1)) < num_nodes * executor_cores:
        raise TFoSConfigError(
            f"{master} has {threads.group(1)} task slots but num_nodes={num_nodes} x executor_cores="
            f"{executor_cores} are needed at once: use local[{num_nodes * executor_cores}] or local-cluster[...]"
        )
    if not master.startswith(("local", "spark://")):
        raise TFoSConfigError(f"master {master!r} is not supported: use yarn, spark://, local-cluster[...] or local[N]")


def parse_application_id(line: str) -> str | None:
    """The YARN application id in one line of spark-submit's output, if any."""
    submitted = _SUBMITTED.search(line)
    if submitted:
        return submitted.group(1)
    found = _YARN_APP_ID.search(line)
    return found.group(0) if found else None


def escape_property(value: str) -> str:
    """``value`` escaped for a Java properties file (which Spark reads as UTF-8)."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return "\\" + out if out[:1] in (" ", "\f") else out


def properties_text(conf: Mapping[str, str]) -> str:
    return "".join(f"{key}={escape_property(str(value))}\n" for key, value in conf.items())


# --- what is shipped ---------------------------------------------------------------------------------


def runtime_files(package_dir: Path | None = None) -> list[Path]:
    """The package's files the Spark side needs: ``runtime/`` and every module it imports, transitively."""
    import ast

    root = package_dir or Path(importlib.util.find_spec("airflow_tfos").origin).parent
    wanted = {root / name for name in _SHIPPED if (root / name).is_file()}
    wanted.update(p for p in (root / "runtime").rglob("*.py") if "__pycache__" not in p.parts)
    pending = list(wanted)
    while pending:
        tree = ast.parse(pending.pop().read_text())
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                parts = name.split(".")
                if parts[0] != "airflow_tfos" or len(parts) < 2 or parts[1] == "runtime":
                    continue
                module = root.joinpath(*parts[1:]).with_suffix(".py")
                package = root.joinpath(*parts[1:], "__init__.py")
                for found in (module, package):
                    if found.is_file() and found not in wanted:
                        wanted.add(found)
                        pending.append(found)
                        if found is module:  # its packages' __init__ files too
                            wanted.update(p / "__init__.py" for p in found.parents if root in p.parents)
    return sorted(wanted)


def runtime_zip(cache_dir: str | Path, package_dir: Path | None = None) -> Path:
    """A zip of :func:`runtime_files` for ``--py-files``, built once per content (its hash is in the name)."""
    root = package_dir or Path(importlib.util.find_spec("airflow_tfos").origin).parent
    files = [(f"airflow_tfos/{p.relative_to(root).as_posix()}", p.read_bytes()) for p in runtime_files(root)]
    digest = hashlib.sha256()
    for name, data in files:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    target = Path(cache_dir) / f"airflow_tfos-runtime-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in files:
                archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
        _write_atomically(target, buffer.getvalue())
    return target


def _write_atomically(target: Path, data: bytes, mode: int = 0o644) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, target)


def cached_file(cache_dir: str | Path, name: str, text: str, mode: int = 0o644) -> Path:
    """``text`` written once to ``<cache_dir>/<content hash>/<name>``."""
    target = Path(cache_dir) / hashlib.sha256(text.encode()).hexdigest()[:16] / name
    if not target.exists():
        _write_atomically(target, text.encode(), mode)
    return target


class _TrainingSubmit(SparkSubmitHook):
    """SparkSubmitHook that reads the YARN application id strictly and can add ``--load-spark-defaults``."""

    def __init__(self, *, load_spark_defaults: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.load_spark_defaults = load_spark_defaults
        self.application_id: str | None = None

    @property
    def master(self) -> str:
        return self._connection["master"]

    def _build_spark_common_args(self) -> list[str]:
        args = super()._build_spark_common_args()
        if self._properties_file and self.load_spark_defaults:
            args.append("--load-spark-defaults")
        return args

    def _process_spark_submit_log(self, itr) -> None:
        def watch(lines):
            for line in lines:
                found = parse_application_id(line)
                if found and (self.application_id is None or _SUBMITTED.search(line)):
                    self.application_id = found
                yield line

        super()._process_spark_submit_log(watch(itr))

    def command(self, application: str) -> list[str]:
        return self._build_spark_submit_command(application)


class TFoSHook(BaseHook):
    """Submit a training run (the driver entrypoint on a run directory) and track, find and kill it.

    The ``spark`` connection's master picks the backend: ``yarn`` submits in cluster mode and tracks the
    application through the ResourceManager (:class:`~airflow_tfos.hooks.yarn.YarnHook`); ``local-cluster[...]``,
    ``local[N]`` and ``spark://host:port`` run the driver as a detached local spark-submit in client mode
    (:class:`~airflow_tfos.hooks.local.LocalBackend`).

    On YARN the runtime is shipped with ``--py-files`` (a zip of ``airflow_tfos.runtime`` and the modules it
    imports, built from this installation). The cluster's Python needs pyspark, TensorFlow and the
    runtime's other packages; to bring your own, pack an environment (``conda pack -o env.tar.gz`` or
    ``venv-pack -o env.tar.gz``) and pass ``packed_env="hdfs:///envs/env.tar.gz"``: it is shipped with
    ``--archives ...#environment`` and used as the driver's and executors' ``PYSPARK_PYTHON``
    (``./environment/bin/python``).

    Secrets (the WebHDFS connection's settings) never go on the command line: they reach the driver and
    executors through a properties file readable only by this user (deleted after submission), and are
    registered with Airflow's secret masker. ``env_vars`` and ``conf`` do go on the command line.

    :param spark_conn_id: the ``spark`` connection (host ``yarn``, ``local-cluster[N,C,MB]``, ``local[N]`` or
        ``spark://host:port``; extras ``queue``, ``spark-binary``, ``principal``, ``keytab`` as in the Spark provider).
    :param yarn_conn_id: the ``yarn`` connection of the ResourceManager (YARN backend).
    :param webhdfs_conn_id: a WebHDFS connection whose settings the driver and executors get (``AIRFLOW_TFOS_WEBHDFS``).
    :param conf: Spark settings for every submission (``submit(conf=...)`` adds to them).
    :param spark_binary: the spark-submit command (default: the connection's, else ``spark-submit``, found on
        the PATH or beside pyspark).
    :param tracker_dir: the local backend's tracker directory; also holds the cached launcher and zip.
    :param env_vars: environment variables for the driver and executors (not for secrets).
    :param py_files: more ``--py-files`` (comma-separated), e.g. the module of the training function.
    :param archives: more ``--archives`` (comma-separated).
    :param files: more ``--files`` (comma-separated).
    :param packed_env: a packed Python environment (tar.gz) to run the driver and executors with.
    :param ship_runtime: ship the runtime zip with ``--py-files`` (YARN; off when the cluster has airflow-tfos).
    :param properties_file: a Spark properties file (the secrets are added to a private copy of it).
    :param load_spark_defaults: add ``--load-spark-defaults`` when a properties file is used (Spark >= 4.0;
        without it Spark skips spark-defaults.conf); set False for older spark-submit.
    :param gpu_discovery_script: the GPU discovery script (default: one shipped that asks ``nvidia-smi``).
    :param heartbeat_secs: how often the driver updates status.json.
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
    ) -> None:
        super().__init__()
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

    # --- connections ---------------------------------------------------------------------------------

    @cached_property
    def _spark(self) -> _TrainingSubmit:
        return _TrainingSubmit(conn_id=self.spark_conn_id, spark_binary=self._binary())

    @property
    def master(self) -> str:
        """The Spark master of the connection."""
        return self._spark.master

    @property
    def backend(self) -> str:
        """``yarn`` when the connection's master is YARN, else ``local``."""
        return "yarn" if self.master.startswith("yarn") else "local"

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

    def _secret_env(self) -> dict[str, str]:
        if not self.webhdfs_conn_id:
            return {}
        from airflow.sdk.log import mask_secret

        from airflow_tfos.hooks.webhdfs import webhdfs_config_from_connection

        config = webhdfs_config_from_connection(self.webhdfs_conn_id).to_json()
        text = config if isinstance(config, str) else json.dumps(config, sort_keys=True)
        mask_secret(text)
        return {WEBHDFS_ENV: text}

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
    ) -> str:
        """Submit the driver on ``run_dir`` (its spec.json must be written); return the application id.

        Raises :class:`TFoSConfigError` before submitting when the settings cannot run (or do not fit the
        cluster's largest container), and :class:`~airflow_tfos.hooks.local.ApplicationAlreadyRunningError`
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
        """
        tag = check_tag(tag)
        backend = self.backend
        gpu_script = None
        if gpus_per_node:
            gpu_script = self.gpu_discovery_script or str(
                cached_file(self._cache_dir, GPU_SCRIPT_NAME, _GPU_SCRIPT, 0o755)
            )
        settings = training_conf(
            backend=backend,
            tag=tag,
            num_nodes=num_nodes,
            executor_cores=executor_cores,
            executor_memory=executor_memory,
            tf_memory_mb=tf_memory_mb,
            gpus_per_node=gpus_per_node,
            user_conf={**self.conf, **env_conf(self.env_vars, backend=backend), **(conf or {})},
            master=self.master,
            gpu_discovery_script=(f"./{Path(gpu_script).name}" if backend == "yarn" else gpu_script)
            if gpu_script
            else None,
        )
        if self.packed_env:
            settings = {**_packed_env_conf(backend), **settings}
        application = str(cached_file(self._cache_dir, LAUNCHER_NAME, _LAUNCHER))
        args = ["--run-dir", run_dir, "--heartbeat-secs", str(self.heartbeat_secs)]
        secret_env = self._secret_env()
        if backend == "yarn":
            limit = self.yarn_hook.get_max_allocation()
            check_container_fits(settings, max_memory_mb=limit.memory_mb, max_vcores=limit.vcores)
            files = [self.files] if self.files else []
            if gpu_script and not self.gpu_discovery_script:
                files.append(gpu_script)
            with tag_lock(self._tracker_dir, tag):
                live = self.find_live(tag)
                if live:
                    raise ApplicationAlreadyRunningError(tag, [app.app_id for app in live])
                return self._submit_yarn(
                    application, args, settings, env_conf(secret_env, backend="yarn"), ",".join(files), name
                )
        check_local_master(
            self.master, num_nodes=num_nodes, executor_cores=executor_cores, executor_memory=executor_memory
        )
        props = self._properties(env_conf(secret_env, backend="local"))
        hook = self._submit_hook(settings, name, args, props, self.files, deploy_mode="client")
        command = hook.command(application)
        return self.local.submit(
            command,
            tag=tag,
            name=name,
            run_dir=run_dir,
            master=self.master,
            env={**self.env_vars, **secret_env},
            remove_after=[props] if props and props != self.properties_file else [],
        )

    def _submit_hook(self, settings, name, args, props, files, *, deploy_mode) -> _TrainingSubmit:
        py_files = [p for p in [self.py_files] if p]
        if self.ship_runtime and deploy_mode == "cluster":
            py_files.insert(0, str(runtime_zip(self._cache_dir)))
        archives = [a for a in [self.archives, f"{self.packed_env}#environment" if self.packed_env else None] if a]
        return _TrainingSubmit(
            conn_id=self.spark_conn_id,
            conf=settings,
            py_files=",".join(py_files) or None,
            archives=",".join(archives) or None,
            files=files or None,
            name=name,
            application_args=args,
            spark_binary=self._binary(),
            deploy_mode=deploy_mode,
            properties_file=props,
            load_spark_defaults=self.load_spark_defaults,
        )

    def _properties(self, secret_conf: dict[str, str]) -> str | None:
        """A private properties file: the user's properties file plus ``secret_conf`` (None if neither)."""
        if not secret_conf:
            return self.properties_file
        base = Path(self.properties_file).read_text() + "\n" if self.properties_file else ""
        folder = Path(self._tracker_dir) / "secrets"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = folder / f"{uuid.uuid4().hex}.properties"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(base + properties_text(secret_conf))
        return str(path)

    def _submit_yarn(self, application, args, settings, secret_conf, files, name) -> str:
        props = self._properties(secret_conf)
        hook = self._submit_hook(settings, name, args, props, files, deploy_mode="cluster")
        try:
            hook.submit(application)
        except AirflowException as exc:
            raise TFoSSubmitError(str(exc)) from exc
        finally:
            if props and props != self.properties_file:
                Path(props).unlink(missing_ok=True)
        if not hook.application_id:
            raise TFoSSubmitError(
                "spark-submit ended without naming the YARN application it submitted: keep the log level of "
                "org.apache.spark.deploy.yarn.Client at INFO in the Spark log4j2 settings"
            )
        self.log.info("submitted YARN application %s (tag %s)", hook.application_id, settings["spark.yarn.tags"])
        return hook.application_id

    # --- state, search, kill -------------------------------------------------------------------------

    def get_state(self, app_id: str) -> AppState:
        """The application's state."""
        if self.backend == "yarn":
            return self.yarn_hook.get_application(app_id)
        return self.local.get_state(app_id)

    async def aget_state(self, app_id: str) -> AppState:
        """The application's state, without blocking the event loop."""
        if self.backend == "yarn":
            return await self.yarn_hook.aget_application(app_id)
        return await asyncio.to_thread(self.local.get_state, app_id)

    def find_by_tag(self, tag: str) -> list[AppState]:
        """The applications carrying ``tag``, live or not."""
        if self.backend == "yarn":
            return self.yarn_hook.find_applications(tag=check_tag(tag))
        return self.local.find_by_tag(tag)

    def find_live(self, tag: str) -> list[AppState]:
        """The applications carrying ``tag`` that have not ended."""
        if self.backend == "yarn":
            return self.yarn_hook.find_applications(tag=check_tag(tag), states=list(LIVE_STATES))
        return self.local.find_live(tag)

    def kill(self, app_id: str, grace_secs: float = 30) -> AppState:
        """Kill the application; one that has ended, or that the cluster has forgotten, is left alone.

        :param app_id: the application.
        :param grace_secs: locally, seconds between SIGTERM and SIGKILL; on YARN (which kills a container
            with SIGTERM, then SIGKILL after ``yarn.nodemanager.sleep-delay-before-sigkill.ms``) how long to
            wait for the ResourceManager to report it killed (at least 30 s).
        """
        if self.backend == "yarn":
            from airflow_tfos.hooks.yarn import YarnApplicationNotFound

            try:
                return self.yarn_hook.kill_application(app_id, timeout=max(grace_secs, 30))
            except YarnApplicationNotFound as exc:
                return _gone(app_id, exc)
        return self.local.kill(app_id, grace_secs)

    async def akill(self, app_id: str, grace_secs: float = 30) -> AppState:
        """:meth:`kill` without blocking the event loop."""
        if self.backend == "yarn":
            from airflow_tfos.hooks.yarn import YarnApplicationNotFound

            try:
                return await self.yarn_hook.akill_application(app_id, timeout=max(grace_secs, 30))
            except YarnApplicationNotFound as exc:
                return _gone(app_id, exc)
        return await asyncio.to_thread(self.local.kill, app_id, grace_secs)


def _gone(app_id: str, exc: Exception) -> AppState:
    return AppState(app_id=app_id, state="KILLED", final_status="KILLED", diagnostics=f"not killed: {exc}")


def _packed_env_conf(backend: str) -> dict[str, str]:
    python = "./environment/bin/python"
    conf = {"spark.pyspark.python": python, "spark.executorEnv.PYSPARK_PYTHON": python}
    if backend == "yarn":
        conf["spark.yarn.appMasterEnv.PYSPARK_PYTHON"] = python
    return conf
