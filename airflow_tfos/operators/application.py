"""What every operator that starts a Spark application on a run directory shares: its connections and
resources, the hooks, and the run's protocol (:mod:`airflow_tfos.operators.run`) driven through Airflow's
:class:`~airflow.sdk.ResumableJobMixin`: wait, defer, finish, kill.

Steps 2 and 3 of an idempotent start (reattach, or submit) run through the mixin (the id kept in
``task_state_store`` under ``tfos_application_id``, its metrics and spans; ``durable=False`` turns it off),
with three differences on purpose: ``submit_job`` first looks for a live application with the run's tag
(which closes the mixin's known window between submitting and storing the id, and finds the application of
a cleared task or of a racing try); ``is_job_succeeded`` is always false, because done means the run's own
"done" (an export of this spec, the output's marker), checked before the mixin runs; and
``poll_until_complete`` returns the task's result, which the mixin returns as is when it reconnects.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, ResumableJobMixin
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.backends.state import LIVE_STATES, AppState
from airflow_tfos.hooks.errors import UserCodeError
from airflow_tfos.hooks.run_dir import PollPacer, RunDirHook, RunWatch, resolve_run_dir, run_tag, templated
from airflow_tfos.hooks.user_code import ShippedCode, code_package, comma_list
from airflow_tfos.links.tfos import (
    REPORT_URL_KEY,
    RUN_DIR_KEY,
    TENSORBOARD_URL_KEY,
    TRACKING_URL_KEY,
    SparkApplicationLink,
    link_url,
    push_tensorboard_url,
)
from airflow_tfos.operators.checks import (
    check_at_parse_time,
    check_paths_reach_the_cluster,
    check_proxy_user,
    check_proxy_user_conf,
    check_rendered,
)
from airflow_tfos.operators.run import ApplicationRun, AppResources
from airflow_tfos.shared.rundir import REPORT_HTML
from airflow_tfos.shared.spec import spec_hash
from airflow_tfos.triggers.tfos import DONE, RESUMED_WITHOUT_EVENT, TFoSApplicationTrigger, watch_arguments

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_tfos.hooks.tfos import TFoSHook
    from airflow_tfos.shared.rundir import RunDir
    from airflow_tfos.shared.spec import RunSpec
    from airflow_tfos.shared.storage import Storage

#: XCom key of the application id (besides the return value).
APPLICATION_ID_KEY = "application_id"
#: Key of the application id in the task's durable state (kept across retries).
STATE_APPLICATION_ID = "tfos_application_id"
#: How long a deferrable task looks for its YARN application's UI address before it defers (the link shows it).
TRACKING_URL_WAIT_SECS = 20.0
#: What :meth:`_TFoSApplicationOperator.get_job_status` answers for an application the cluster no longer knows.
UNKNOWN_STATUS = "UNKNOWN"


def shipped_code(shipped: ShippedCode | None) -> dict[str, Any] | None:
    """The spec's ``code`` field for the shipped user code (None: nothing shipped)."""
    return None if shipped is None else {"packages": list(shipped.packages), "hash": shipped.digest}


class _TFoSApplicationOperator(ResumableJobMixin, BaseOperator):
    """Start (or find again) the Spark application of a run directory and wait for it; the spec and what
    done means come from the subclass (:meth:`build_spec`, :meth:`new_run`).

    :param run_dir: the run directory (templated); default ``<run_dir_base>/<dag>/<task>/<logical date>``. No
        ``..``; a templated one must render to a folder under ``[tfos] run_dir_base``.
    :param allow_run_dir_outside_base: let a templated ``run_dir`` render to a folder outside
        ``[tfos] run_dir_base`` (only when nobody but the DAG's authors decides what it renders to).
    :param env: environment variables for the application's Python processes (templated).
    :param spark_conn_id: the ``spark`` connection (``yarn`` master: YARN; else the local backend).
    :param yarn_conn_id: the ``yarn`` connection (YARN backend).
    :param webhdfs_conn_id: the ``webhdfs`` connection for HDFS run directories.
    :param conf: extra Spark settings (templated).
    :param executor_cores: cores per executor.
    :param executor_memory: JVM heap per executor.
    :param tf_memory_mb: memory of each TF process, off the JVM heap; sets the executor's memory overhead.
    :param driver_memory: the driver's JVM heap (``spark.driver.memory``; on YARN the application master's
        container), as ``SparkSubmitOperator`` spells it. None: Spark's default.
    :param yarn_queue: the YARN queue the application is submitted to (``spark.yarn.queue``). None: the default.
    :param name: the application's name (templated; default ``tfos <dag>.<task> <run>``).
    :param local_paths_shared: with a YARN master, a local path (the run directory, a warm start, a log directory,
        a model or an output) is refused, since the containers run on other hosts; True when every host mounts
        such paths at the same place (NFS). Default ``[tfos] local_paths_shared`` (False).
    :param poll_interval: seconds between state polls.
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    :param durable: keep the application id in the task's durable state (ResumableJobMixin).
    :param py_files: extra ``--py-files``. :param archives: extra ``--archives``. :param files: extra ``--files``.
    :param packed_env: a packed Python environment for the application.
    :param ship_code: zip the user's functions' package and ship it with ``--py-files``.
    :param proxy_user: the user the YARN application runs as (templated; ``--proxy-user``; docs/kerberos.md: the
        ``webhdfs`` connection must read HDFS as them, extra ``doas``; not with Spark's keytab settings).
    """

    template_fields: Sequence[str] = ("run_dir", "env", "conf", "py_files", "archives", "files", "packed_env", "name",
                                      "yarn_queue", "proxy_user")  # fmt: skip
    ui_color = "#f4a460"

    #: Key of the application id in the task's durable state (ResumableJobMixin).
    external_id_key = STATE_APPLICATION_ID
    #: Spec fields that an argument of another name sets (the spec's messages name the argument).
    spec_argument_names: dict[str, str] = {}

    def __init__(
        self,
        *,
        run_dir: str | None = None,
        allow_run_dir_outside_base: bool = False,
        env: dict[str, str] | None = None,
        spark_conn_id: str = "spark_default",
        yarn_conn_id: str = "yarn_default",
        webhdfs_conn_id: str | None = None,
        conf: dict[str, str] | None = None,
        executor_cores: int = 1,
        executor_memory: str = "2g",
        tf_memory_mb: int | None = None,
        driver_memory: str | None = None,
        yarn_queue: str | None = None,
        name: str | None = None,
        local_paths_shared: bool = conf.getboolean("tfos", "local_paths_shared", fallback=False),
        poll_interval: float = 15.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        durable: bool = True,
        py_files: str | list[str] | None = None,
        archives: str | list[str] | None = None,
        files: str | list[str] | None = None,
        packed_env: str | None = None,
        ship_code: bool = True,
        proxy_user: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(durable=durable, **kwargs)
        check_proxy_user_conf(proxy_user, conf)
        self.proxy_user = proxy_user
        self.run_dir = run_dir
        self._run_dir_as_written = run_dir  # before rendering: whether it is templated
        self.allow_run_dir_outside_base = allow_run_dir_outside_base
        self.env = env or {}
        self.spark_conn_id = spark_conn_id
        self.yarn_conn_id = yarn_conn_id
        self.webhdfs_conn_id = webhdfs_conn_id
        self.conf = conf or {}
        self.executor_cores = executor_cores
        self.executor_memory = executor_memory
        self.tf_memory_mb = tf_memory_mb
        self.driver_memory = driver_memory
        self.yarn_queue = yarn_queue
        self.name = name
        self.local_paths_shared = local_paths_shared
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.py_files = py_files
        self.archives = archives
        self.files = files
        self.packed_env = packed_env
        self.ship_code = ship_code
        #: the run's protocol for this try (once the run directory is known), its application, its result
        self._run: ApplicationRun | None = None
        self._app: AppState | None = None
        self._tfos_result: dict[str, Any] | None = None
        self._ti: Any = None
        self._tracking_url: str | None = None
        self._tensorboard_found = ""  # the address tensorboard.json held at the last look
        #: what this try pushed for the extra links (see airflow_tfos.links.tfos)
        self.link_targets: dict[str, str] = {}

    # --- what subclasses say -----------------------------------------------------------------------------

    def build_spec(self, *, code: bool = True) -> RunSpec:
        """The spec this task asks for; ``code``: name the shipped code (False at parse time: no I/O)."""
        raise NotImplementedError

    def new_run(self, spec: RunSpec) -> ApplicationRun:
        """The protocol of this task's request ``spec`` to its (resolved) run directory (see :meth:`run_parts`)."""
        raise NotImplementedError

    def run_parts(self, spec: RunSpec) -> dict[str, Any]:
        """What every run protocol of this task is made of: the run directory, the spec, the hooks, the log."""
        return {
            "run_dir": self.run_dir,
            "spec": spec,
            "hook": self.hook,
            "run_dir_contents": self.run_dir_contents,
            "log": self.log,
            "input_storage": self.input_storage,
        }

    def input_storage(self, uri: str) -> Storage:
        """The storage that lists an input at ``uri`` for its fingerprint (HDFS: the ``webhdfs`` connection)."""
        from airflow_tfos.hooks.run_dir import RunDirHook

        return RunDirHook(uri, webhdfs_conn_id=self.webhdfs_conn_id).storage

    def user_functions(self) -> list[str]:
        """Import paths of the user's functions the application runs (whose package is shipped)."""
        return []

    def num_executors(self) -> int:
        raise NotImplementedError

    def gpus_per_executor(self) -> int:
        return 0

    def defer_timeout(self) -> timedelta | None:
        """How long a deferred wait may take before Airflow fails it (None: no limit)."""
        return None

    def cluster_paths(self) -> dict[str, Any]:
        """The rendered paths the application's driver or nodes read or write, by argument name (what must be
        on storage every host reaches when the containers run elsewhere)."""
        return {"run_dir": self.run_dir}

    def resolve_inputs(self, context: Context) -> None:
        """Resolve what is looked up at run time (after rendering, before the spec is built); nothing here."""

    def check_parameters(self) -> None:
        """What every such operator checks at DAG parse time (no I/O), after its own: the run directory, the
        resources and the spec, each value unless templated (checked after rendering, in :meth:`prepare`);
        errors name the argument (see :mod:`airflow_tfos.operators.checks`)."""
        check_at_parse_time(self)

    def execute(self, context: Context) -> Any:
        """Return the result at once if the run is done; else reattach or submit, then wait (or defer)."""
        done = self.prepare(context)
        if done is not None:
            return done
        try:
            return self.execute_resumable(context)
        finally:  # success or failure; a deferred task handed its driver's token to the trigger already
            self.hook.end_driver_token()

    # --- the run -------------------------------------------------------------------------------------------

    @cached_property
    def user_code(self) -> ShippedCode | None:
        """The zip of the user's code shipped with ``--py-files`` (None: nothing to ship, or ``ship_code=False``)."""
        if not self.ship_code:
            return None
        own_environment = bool(self.py_files or self.packed_env)
        packages = []
        for path in self.user_functions():
            try:
                package = code_package(path)
            except UserCodeError:
                if own_environment:  # the user ships it: py_files or a packed environment
                    continue
                raise
            if package is not None:
                packages.append(package)
        shipped = self.hook.ship_user_code(packages) if packages else None
        if shipped is not None:
            self.log.info("shipping your code with --py-files: %s", shipped.describe())
        return shipped

    def resolve_run_dir(self, context: Context) -> str:
        """The rendered ``run_dir`` (or the default), checked: see :func:`resolve_run_dir`."""
        return resolve_run_dir(
            self.run_dir,
            context,
            as_written=self._run_dir_as_written,
            allow_outside_base=self.allow_run_dir_outside_base,
        )

    def run(self) -> ApplicationRun:
        """This try's run protocol (built once the run directory is resolved)."""
        if self._run is None or self._run.run_dir != self.run_dir:
            self._run = self.new_run(self.build_spec())
        return self._run

    def request_hash(self) -> str:
        """The hash of this task's spec: what an export, a live application or a stored id must match."""
        return spec_hash(self.build_spec().to_json())

    def prepare(self, context: Context) -> dict[str, Any] | None:
        """Resolve the run directory, check the rendered arguments and the spec; return the result if this
        request is done already."""
        self.run_dir = self.resolve_run_dir(context)
        check_rendered(self)  # the templated arguments, now rendered: before anything is written or submitted
        check_paths_reach_the_cluster(self, self.hook.master)  # a lookup of the connection; no call to the cluster
        check_proxy_user(self.proxy_user, self.run_dir, self.webhdfs_conn_id)
        self.resolve_inputs(context)
        context["ti"].xcom_push(key=RUN_DIR_KEY, value=self.run_dir)
        context["ti"].xcom_push(key=REPORT_URL_KEY, value=self.run_dir_contents.path(REPORT_HTML))
        run = self.run()
        run.check()
        done = self._tfos_result = run.already_done()
        if done is not None and done.get("application_id"):  # e.g. a cleared task: name what did the work
            context["ti"].xcom_push(key=APPLICATION_ID_KEY, value=done["application_id"])
        return done

    def app_resources(self, ti: Any) -> AppResources:
        """How this task's application is submitted."""
        submit_conf = {"spark.driver.memory": self.driver_memory, "spark.yarn.queue": self.yarn_queue}
        return AppResources(
            name=self.name or f"tfos {ti.dag_id}.{ti.task_id} {os.path.basename(self.run_dir)}",
            num_nodes=self.num_executors(),
            executor_cores=self.executor_cores,
            executor_memory=self.executor_memory,
            tf_memory_mb=self.tf_memory_mb,
            gpus_per_node=self.gpus_per_executor(),
            conf={**{key: value for key, value in submit_conf.items() if value}, **self.conf},
        )

    def finish(self, app: AppState) -> dict[str, Any]:
        """The result of an application that ended, or an error that says what failed."""
        self.settle_links(app)
        try:
            self.hook.clean_up(app)
        except Exception as exc:  # a leftover is never worth hiding why the application ended
            self.log.warning("cannot clean up after application %s: %s", app.app_id, exc)
        self._tfos_result = self.run().finish(app)
        return self._tfos_result

    def settle_links(self, app: AppState) -> None:
        """What the task's links lead to once ``app`` ended: TensorBoard ended with it (no link); its UI lives on
        at the Spark history server when one is named, or at YARN's tracking URL of the ended application; a
        local application's UI ended with it (no link)."""
        self.link_targets.pop(TENSORBOARD_URL_KEY, None)
        url = None
        try:
            url = self.hook.history_url(app, self.conf) or (app.tracking_url if app.is_terminal else None)
        except Exception as exc:  # a link is never worth failing the task for
            self.log.warning("cannot tell where application %s's UI is now: %s", app.app_id, exc)
        url = link_url(url, f"the UI of application {app.app_id}", self.log)
        if url:
            self.link_targets[TRACKING_URL_KEY] = url
        else:
            self.link_targets.pop(TRACKING_URL_KEY, None)

    # --- hooks ---------------------------------------------------------------------------------------------

    @cached_property
    def hook(self) -> TFoSHook:
        from airflow_tfos.hooks.tfos import TFoSHook

        return TFoSHook(
            spark_conn_id=self.spark_conn_id,
            yarn_conn_id=self.yarn_conn_id,
            webhdfs_conn_id=self.webhdfs_conn_id,
            proxy_user=self.proxy_user or None,
            py_files=comma_list(self.py_files),
            archives=comma_list(self.archives),
            files=comma_list(self.files),
            packed_env=self.packed_env,
        )

    @cached_property
    def run_dir_hook(self) -> RunDirHook:
        return RunDirHook(self.run_dir, webhdfs_conn_id=self.webhdfs_conn_id)

    @property
    def run_dir_contents(self) -> RunDir:
        """The run directory's contents: what ``run_dir`` (its URI) holds, read and written as the contract says."""
        return self.run_dir_hook.run_dir_contents

    # --- ResumableJobMixin ---------------------------------------------------------------------------------

    def submit_job(self, context: Context) -> str:
        self._app = self.run().reattach_or_submit(context["ti"], self.app_resources(context["ti"]))
        return self._app.app_id

    def get_job_status(self, external_id: Any, context: Context) -> str:
        """``RUNNING``, ``FINISHED/FAILED``...; :data:`UNKNOWN_STATUS` when the cluster forgot the application."""
        try:
            app = self.hook.get_state(str(external_id))
        except Exception as exc:
            self.log.warning("cannot look up application %s kept from an earlier try: %s", external_id, exc)
            return UNKNOWN_STATUS
        if not app.is_terminal and not self.run().works_on_spec(app):
            app = self.hook.get_state(app.app_id)  # killed: the mixin submits anew
        self._app = app
        return f"{app.state}/{app.final_status}" if app.is_terminal else app.state

    def is_job_active(self, status: str) -> bool:
        return status.split("/")[0] in LIVE_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return False  # done means the run's own "done" (see prepare), never an application that succeeded

    def poll_until_complete(self, external_id: Any, context: Context) -> dict[str, Any]:
        """Wait for the application (or defer); return the task's result."""
        app = self._app if self._app and self._app.app_id == external_id else self.hook.get_state(str(external_id))
        self._ti = context["ti"]
        self._ti.xcom_push(key=APPLICATION_ID_KEY, value=app.app_id)
        self.push_tracking_url(app.tracking_url)
        return self.wait(app)

    def get_job_result(self, external_id: Any, context: Context) -> dict[str, Any] | None:
        return self._tfos_result

    # --- waiting -------------------------------------------------------------------------------------------

    def push_tracking_url(self, url: str | None) -> None:
        """Push the application's UI address (the Spark application link) once it is known, or when it changes;
        one that is not an http(s) URL is dropped with a warning (once)."""
        if url and url != self._tracking_url and self._ti is not None:
            self._tracking_url = url
            if link_url(url, "the application's UI", self.log) is None:
                return
            self._ti.xcom_push(key=TRACKING_URL_KEY, value=url)
            # under the link's own key too, so that the UI shows the link while the task still runs
            self._ti.xcom_push(key=SparkApplicationLink().xcom_key, value=url)
            self._tracking_url = url
            self.link_targets[TRACKING_URL_KEY] = url

    def push_tensorboard_url(self) -> None:
        """Push where TensorBoard serves the run under the TensorBoard link's key (see :func:`push_tensorboard_url`)."""
        push_tensorboard_url(self)

    def wait(self, app: AppState) -> dict[str, Any]:
        """Wait until the application has done this task's work (or defer); return the result."""
        if self.deferrable:
            self.push_tracking_url(self._tracking_url_soon(app))  # the trigger pushes no link while it waits
            self.defer_until_end(app)
        return self.finish(self.wait_for_end(app))

    def _tracking_url_soon(self, app: AppState) -> str | None:
        """A YARN application's UI address (the ResourceManager's proxy), which the RM gives once it accepted the
        application: looked for up to ``TRACKING_URL_WAIT_SECS`` before the task defers."""
        deadline = time.monotonic() + TRACKING_URL_WAIT_SECS
        while not app.tracking_url and app.app_id.startswith("application_") and not app.is_terminal:
            if time.monotonic() > deadline:
                break
            time.sleep(1.0)
            app = self.hook.get_state(app.app_id)
        return app.tracking_url

    def wait_for_end(self, app: AppState) -> AppState:
        """Poll until the application ends, logging training progress from status.json."""
        watch, pacer = RunWatch(), PollPacer(self.poll_interval)
        while not app.is_terminal:
            for line in self.run_dir_hook.watch_lines(watch):
                self.log.info("%s: %s", app.app_id, line)
            time.sleep(pacer.next_secs(watch.status, time.time()))
            app = self.hook.get_state(app.app_id)
            self.push_tracking_url(app.tracking_url)
            self.push_tensorboard_url()
        self.log.info("application %s ended %s/%s", app.app_id, app.state, app.final_status)
        return app

    def defer_until_end(self, app: AppState) -> None:
        token = self.hook.hand_off_driver_token()  # the trigger renews it, and cancels it when the application ends
        if token is None and self.hook.holds_driver_token:
            self.log.warning(
                "not deferring: the driver's WebHDFS delegation token would be stored in clear with the trigger's "
                "arguments, as no Fernet key is configured ([core] fernet_key); waiting in the worker, which "
                "renews it"
            )
            return
        self.defer(
            trigger=TFoSApplicationTrigger(
                application_id=app.app_id, kill_on_kill=True, webhdfs_token=token, **watch_arguments(self)
            ),
            method_name="execute_complete",
            timeout=self.defer_timeout(),
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        if event is None:  # resumed without the trigger's event: start over, which finds the application again
            self.log.info(RESUMED_WITHOUT_EVENT)
            return self.execute(context)
        self.run_dir = self.resolve_run_dir(context)
        if event.get("status") != DONE:
            raise AirflowException(f"lost track of the application: {event.get('message')}")
        self.resolve_inputs(context)  # the spec finish() checks the export against
        app = AppState.from_json(event["app"])
        self._ti = context["ti"]
        self.push_tracking_url(event.get("tracking_url") or app.tracking_url)
        return self.finish(app)

    def on_kill(self) -> None:
        if "hook" in self.__dict__:  # only a hook this try made can hold a driver's token
            self.hook.end_driver_token()
        app_id = None
        try:
            app_id = self._live_app_id()
        except Exception as exc:
            self.log.warning("cannot find the application to kill: %s", exc)
        if app_id:
            self.log.info("the task was killed: killing application %s", app_id)
            self.hook.kill(app_id)

    def _live_app_id(self) -> str | None:
        if not self.run_dir or templated(self.run_dir):
            return None
        live = self.hook.find_live(run_tag(self.run_dir))
        return live[0].app_id if live else None
