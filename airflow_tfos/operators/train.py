"""Operators that start (or find again) the Spark application working on a run directory.

``TFoSTrainOperator`` is the one-task path: launch, feed, checkpoint-based recovery, export and
shutdown of one training run. ``TFoSLaunchClusterOperator`` starts the same application in serving
mode, for DAGs that feed it with :class:`~airflow_tfos.operators.lifecycle.TFoSFeedOperator` and stop
it with :class:`~airflow_tfos.operators.lifecycle.TFoSShutdownClusterOperator`.

Both are idempotent:

1. the run directory holds an export for the same spec hash: succeed at once, with the same result;
2. the task's durable state names a live application (kept by an earlier try), or a live application
   carries the run's tag: reattach to it;
3. otherwise write the spec and submit a new application, which resumes from the latest checkpoint.
   Two attempts that race both keep the earliest application and kill the other.

Steps 2 and 3 run through Airflow's :class:`~airflow.sdk.ResumableJobMixin` (the id kept in
``task_state_store`` under ``tfos_application_id``, its metrics and spans; ``durable=False`` turns it off),
with three differences on purpose: ``submit_job`` first looks for a live application with the run's tag
(which closes the mixin's known window between submitting and storing the id, and finds the application of
a cleared task or of a racing try); ``is_job_succeeded`` is always false, because done means an export of
this spec, checked before the mixin runs (a stored application that succeeded without one, e.g. for an
older spec, is resubmitted and resumes from the latest checkpoint); and ``poll_until_complete`` returns the
task's result, which the mixin returns as is when it reconnects.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, ResumableJobMixin
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.local import ApplicationAlreadyRunningError
from airflow_tfos.hooks.run_dir import RunDirHook, RunWatch, progress_line
from airflow_tfos.hooks.runs import RunConfigError, check_run_dir, pick_winner, run_tag
from airflow_tfos.hooks.state import TERMINAL_STATES, YARN_STATES, AppState
from airflow_tfos.hooks.user_code import ShippedCode, UserCodeError, code_package, comma_list, import_path_of
from airflow_tfos.links.tfos import (
    REPORT_URL_KEY,
    TRACKING_URL_KEY,
    SparkApplicationLink,
    TensorBoardLink,
    TrainingReportLink,
)
from airflow_tfos.operators.run_dirs import resolve_run_dir, templated
from airflow_tfos.shared.rundir import spec_digest, spec_hash
from airflow_tfos.shared.spec import INPUT_MODES, RunSpec, SpecError, parse_spec, split_import_path
from airflow_tfos.triggers.tfos import TFoSApplicationTrigger, TFoSRunDirTrigger

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context

    from airflow_tfos.hooks.tfos import TFoSHook
    from airflow_tfos.shared.rundir import RunDir

#: The run-directory event recording which application a task submitted (or attached to after a race).
SUBMITTED_EVENT = "submitted"
#: XCom keys (besides the return value).
APPLICATION_ID_KEY = "application_id"
RUN_DIR_KEY = "run_dir"
#: Key of the application id in the task's durable state (kept across retries).
STATE_APPLICATION_ID = "tfos_application_id"
#: Where the training report is written in a run directory.
REPORT_PATH = "report/report.html"
#: Spec fields the operators take under another argument name (the others take the field's own name).
SPEC_ARGUMENTS = {"timeout": "training_timeout", "serve_idle_secs": "idle_timeout"}
#: Spec fields no argument sets: derived when the spec is built, stored with it, or inference's own.
DERIVED_SPEC_FIELDS = frozenset({"code", "spec_hash", "inference"})
#: What :meth:`_TFoSRunOperator.get_job_status` answers for an application the cluster no longer knows.
UNKNOWN_STATUS = "UNKNOWN"


def spec_arguments() -> list[str]:
    """The :class:`RunSpec` fields that the training operators' arguments set."""
    return [f.name for f in fields(RunSpec) if f.name not in DERIVED_SPEC_FIELDS]


def shipped_code(shipped: ShippedCode | None) -> dict[str, Any] | None:
    """The spec's ``code`` field for the shipped user code (None: nothing shipped)."""
    return None if shipped is None else {"packages": list(shipped.packages), "hash": shipped.digest}


class _TFoSRunOperator(ResumableJobMixin, BaseOperator):
    """What training and launch share: the spec, the idempotent submit, waiting, the result, lineage."""

    template_fields: Sequence[str] = (
        "run_dir",
        "args",
        "data",
        "validation_data",
        "feed",
        "env",
        "conf",
        "warm_start",
        "py_files",
        "archives",
        "files",
        "packed_env",
    )
    template_fields_renderers = {"args": "json", "data": "json", "feed": "json", "conf": "json"}
    operator_extra_links = (SparkApplicationLink(), TensorBoardLink(), TrainingReportLink())
    ui_color = "#f4a460"

    #: Whether the application serves feed requests until stopped (the lifecycle operators).
    serve = False
    #: What the application does (spec.json ``kind``).
    kind = "train"
    #: Seconds a serving application waits for a feed request (the launch operator's argument).
    idle_timeout: float | None = None
    #: Key of the application id in the task's durable state (ResumableJobMixin).
    external_id_key = STATE_APPLICATION_ID

    def __init__(
        self,
        *,
        train_fn: str | Callable | None = None,
        args: dict | list | None = None,
        num_nodes: int = 2,
        input_mode: str = "SPARK",
        data: dict | None = None,
        validation_data: dict | None = None,
        feed: dict | None = None,
        run_dir: str | None = None,
        warm_start: str | None = None,
        num_ps: int = 0,
        master_node: str | None = "chief",
        eval_node: bool = False,
        keras: str = "auto",
        gpus_per_node: int = 0,
        max_attempts: int = 3,
        training_timeout: float | None = None,
        env: dict[str, str] | None = None,
        stop_grace_secs: float = 120.0,
        spark_conn_id: str = "spark_default",
        yarn_conn_id: str = "yarn_default",
        webhdfs_conn_id: str | None = None,
        conf: dict[str, str] | None = None,
        executor_cores: int = 1,
        executor_memory: str = "2g",
        tf_memory_mb: int | None = None,
        poll_interval: float = 15.0,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        durable: bool = True,
        py_files: str | list[str] | None = None,
        archives: str | list[str] | None = None,
        files: str | list[str] | None = None,
        packed_env: str | None = None,
        ship_code: bool = True,
        allow_run_dir_outside_base: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(durable=durable, **kwargs)
        self.allow_run_dir_outside_base = allow_run_dir_outside_base
        self._run_dir_as_written = run_dir  # before rendering: whether it is templated
        try:
            self.train_fn = import_path_of(train_fn) if train_fn is not None else None
        except UserCodeError as exc:
            raise RunConfigError(f"{type(self).__name__} {self.task_id!r}: {exc}") from None
        self.py_files = py_files
        self.archives = archives
        self.files = files
        self.packed_env = packed_env
        self.ship_code = ship_code
        self.args = args
        self.num_nodes = num_nodes
        self.input_mode = input_mode
        self.data = data
        self.validation_data = validation_data
        self.feed = feed
        self.run_dir = run_dir
        self.warm_start = warm_start
        self.num_ps = num_ps
        self.master_node = master_node
        self.eval_node = eval_node
        self.keras = keras
        self.gpus_per_node = gpus_per_node
        self.max_attempts = max_attempts
        self.training_timeout = training_timeout
        self.env = env or {}
        self.stop_grace_secs = stop_grace_secs
        self.spark_conn_id = spark_conn_id
        self.yarn_conn_id = yarn_conn_id
        self.webhdfs_conn_id = webhdfs_conn_id
        self.conf = conf or {}
        self.executor_cores = executor_cores
        self.executor_memory = executor_memory
        self.tf_memory_mb = tf_memory_mb
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        #: the application this try works with, and the task's result once known (for lineage)
        self._app: AppState | None = None
        self._tfos_result: dict[str, Any] | None = None
        self._ti: Any = None
        self._tracking_url: str | None = None
        #: what this try pushed for the extra links (see airflow_tfos.links.tfos)
        self.link_targets: dict[str, str] = {}
        self._export_record: dict[str, Any] | None = None
        self._check_parameters()

    # --- checks at DAG parse time (no I/O) ---------------------------------------------------------------

    def _check_parameters(self) -> None:
        where = f"{type(self).__name__} {self.task_id!r}"
        if self.kind == "train":
            if not self.train_fn:
                raise RunConfigError(f"{where}: train_fn is required ('package.module:function')")
            try:
                split_import_path(self.train_fn, "train_fn")
            except SpecError as exc:
                raise RunConfigError(f"{where}: {exc}") from None
        if not isinstance(self.num_nodes, int) or isinstance(self.num_nodes, bool) or self.num_nodes < 1:
            raise RunConfigError(f"{where}: num_nodes must be an integer >= 1, got {self.num_nodes!r}")
        if self.input_mode not in INPUT_MODES:
            raise RunConfigError(
                f"{where}: input_mode must be one of {', '.join(INPUT_MODES)}, got {self.input_mode!r}"
            )
        if self.run_dir is not None and not templated(self.run_dir):
            check_run_dir(self.run_dir, f"{where}: run_dir")
        if self.poll_interval <= 0:
            raise RunConfigError(f"{where}: poll_interval must be > 0, got {self.poll_interval}")
        spec = self.build_spec(code=False).to_json()
        if not templated(spec):
            try:
                parse_spec(spec)
            except SpecError as exc:
                raise RunConfigError(f"{where}: {exc}") from None

    def build_spec(self, *, code: bool = True) -> RunSpec:
        """The spec this task asks for (the hash of its JSON form identifies the run's request).

        Every field of :class:`RunSpec` but those derived here comes from the operator's argument of the same
        name (or the one :data:`SPEC_ARGUMENTS` names).

        :param code: name the shipped code and its hash (zipping it on the first call), so that a change of
            the code is a new request; False at parse time, which does no I/O.
        """
        settings = {name: getattr(self, SPEC_ARGUMENTS.get(name, name)) for name in spec_arguments()}
        return RunSpec(**settings, code=shipped_code(self.user_code if code else None))

    def request_hash(self) -> str:
        """The hash of this task's spec: what an export, a live application or a stored id must match."""
        return spec_hash(self.build_spec().to_json())

    def user_functions(self) -> list[str]:
        """Import paths of the user's functions the application runs (``train_fn``, data functions)."""
        paths = [self.train_fn] if self.train_fn else []
        for data in (self.data, self.validation_data):
            if isinstance(data, dict) and data.get("format") == "function" and data.get("function"):
                paths.append(str(data["function"]))
        return paths

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

    # --- hooks ------------------------------------------------------------------------------------------

    @cached_property
    def hook(self) -> TFoSHook:
        from airflow_tfos.hooks.tfos import TFoSHook

        return TFoSHook(
            spark_conn_id=self.spark_conn_id,
            yarn_conn_id=self.yarn_conn_id,
            webhdfs_conn_id=self.webhdfs_conn_id,
            py_files=comma_list(self.py_files),
            archives=comma_list(self.archives),
            files=comma_list(self.files),
            packed_env=self.packed_env,
        )

    @cached_property
    def run_dir_hook(self) -> RunDirHook:
        return RunDirHook(self.run_dir, webhdfs_conn_id=self.webhdfs_conn_id)

    @property
    def rundir(self) -> RunDir:
        return self.run_dir_hook.rundir

    # --- launch (ResumableJobMixin) ------------------------------------------------------------------------

    def prepare(self, context: Context) -> dict[str, Any] | None:
        """Resolve the run directory and check the spec; return the result if this request is done already."""
        self.run_dir = self.resolve_run_dir(context)
        context["ti"].xcom_push(key=RUN_DIR_KEY, value=self.run_dir)
        context["ti"].xcom_push(key=REPORT_URL_KEY, value=self.rundir.path(REPORT_PATH))
        spec = self.build_spec().to_json()
        parse_spec(spec)
        done = self.already_done(spec_hash(spec))
        if done is not None and done.get("application_id"):  # e.g. a cleared task: name what did the work
            context["ti"].xcom_push(key=APPLICATION_ID_KEY, value=done["application_id"])
        return done

    def launch_and_wait(self, context: Context) -> Any:
        """Return the result at once if the run is done; else reattach or submit, then wait (or defer)."""
        done = self.prepare(context)
        return done if done is not None else self.execute_resumable(context)

    def submit_job(self, context: Context) -> str:
        """Reattach to a live application carrying the run's tag that works on this spec, else write the spec
        and submit one (a live application of another spec is killed first)."""
        spec = self.build_spec().to_json()
        digest = spec_hash(spec)
        live = [app for app in self.hook.find_live(run_tag(self.run_dir)) if self.works_on_spec(app, digest)]
        if live:
            winner = pick_winner([a.app_id for a in live])
            self.log.info("reattaching to application %s, which already works on %s", winner, self.run_dir)
            self._app = next(a for a in live if a.app_id == winner)
        else:
            self._app = self._submit(context, spec, digest)
        return self._app.app_id

    def works_on_spec(self, app: AppState, digest: str) -> bool:
        """Whether the live ``app`` works on spec ``digest``; if it works on another one, kill it (False)."""
        found = self.rundir.application_spec_hash(app.app_id)
        if found == digest:
            return True
        self.log.warning(
            "application %s works on spec %s of %s, not on this task's spec %s: killing it (a new one resumes "
            "from the latest checkpoint)",
            app.app_id,
            found,
            self.run_dir,
            digest,
        )
        self.hook.kill(app.app_id)
        return False

    def get_job_status(self, external_id: Any, context: Context) -> str:
        """``RUNNING``, ``FINISHED/FAILED``...; :data:`UNKNOWN_STATUS` when the cluster forgot the application."""
        try:
            app = self.hook.get_state(str(external_id))
        except Exception as exc:
            self.log.warning("cannot look up application %s kept from an earlier try: %s", external_id, exc)
            return UNKNOWN_STATUS
        if not app.is_terminal and not self.works_on_spec(app, self.request_hash()):
            app = self.hook.get_state(app.app_id)  # killed: the mixin submits anew
        self._app = app
        return f"{app.state}/{app.final_status}" if app.is_terminal else app.state

    def is_job_active(self, status: str) -> bool:
        state = status.split("/")[0]
        return state in YARN_STATES and state not in TERMINAL_STATES

    def is_job_succeeded(self, status: str) -> bool:
        return False  # done means an export of this spec (see prepare), never an application that succeeded

    def poll_until_complete(self, external_id: Any, context: Context) -> dict[str, Any]:
        """Wait for the application (or defer); return the task's result."""
        app = self._app if self._app and self._app.app_id == external_id else self.hook.get_state(str(external_id))
        self._ti = context["ti"]
        self._ti.xcom_push(key=APPLICATION_ID_KEY, value=app.app_id)
        self.push_tracking_url(app.tracking_url)
        return self.wait(app)

    def push_tracking_url(self, url: str | None) -> None:
        """Push the application's UI address (the Spark application link) once it is known, or when it changes."""
        if url and url != self._tracking_url and self._ti is not None:
            self._ti.xcom_push(key=TRACKING_URL_KEY, value=url)
            # under the link's own key too, so that the UI shows the link while the task still runs
            self._ti.xcom_push(key=SparkApplicationLink().xcom_key, value=url)
            self._tracking_url = url
            self.link_targets[TRACKING_URL_KEY] = url

    def wait(self, app: AppState) -> dict[str, Any]:
        """Wait until the application has done this task's work (or defer); return the result."""
        if self.deferrable:
            self.defer_until_end(app)
        return self.finish(self.wait_for_end(app))

    def get_job_result(self, external_id: Any, context: Context) -> dict[str, Any] | None:
        return self._tfos_result

    def _submit(self, context: Context, spec: dict[str, Any], digest: str) -> AppState:
        rundir = self.rundir
        current = rundir.read_spec()
        if current and current.get("spec_hash") != digest:
            self.log.warning(
                "the spec in %s changed (%s -> %s): checkpoints of the old spec are resumed only if the model matches",
                self.run_dir,
                current.get("spec_hash"),
                digest,
            )
        rundir.write_spec(spec)
        rundir.clear_stop()  # a stop request left for an earlier application must not stop this one
        latest = rundir.latest_checkpoint() if self.kind == "train" else None
        if latest:
            self.log.info("resuming from checkpoint step %d (%s)", latest.step, latest.path)
        elif self.kind == "train":
            self.log.info("no checkpoint in %s: training starts from the beginning", self.run_dir)
        tag = run_tag(self.run_dir)
        ti = context["ti"]
        rundir.add_event("submit", try_number=ti.try_number, resume_step=latest.step if latest else 0)
        try:
            app_id = self._submit_application(tag, ti, spec_digest(spec))
        except ApplicationAlreadyRunningError as exc:
            # another try of this task submitted first (the local backend's per-tag lock said so)
            self.log.warning("%s: attaching to the application already running", exc)
            live = self.hook.find_live(tag)
            if not live:
                raise
            return live[0]
        self.log.info("submitted application %s for %s (tag %s)", app_id, self.run_dir, tag)
        live = {a.app_id for a in self.hook.find_live(tag)} | {app_id}
        winner = pick_winner(sorted(live))
        if winner != app_id:
            self.log.warning(
                "another try submitted %s for this run first: killing %s and attaching to it", winner, app_id
            )
            self.hook.kill(app_id)
            app_id = winner
        rundir.add_event(SUBMITTED_EVENT, application_id=app_id, try_number=ti.try_number)
        return self.hook.get_state(app_id)

    def _submit_application(self, tag: str, ti: Any, digest: str) -> str:
        return self.hook.submit(
            self.run_dir,
            tag=tag,
            name=f"tfos {ti.dag_id}.{ti.task_id} {os.path.basename(self.run_dir)}",
            num_nodes=self.num_executors(),
            executor_cores=self.executor_cores,
            executor_memory=self.executor_memory,
            tf_memory_mb=self.tf_memory_mb,
            gpus_per_node=self.gpus_per_node,
            conf=self.conf,
            spec_hash=digest,
        )

    # --- waiting ----------------------------------------------------------------------------------------

    def wait_for_end(self, app: AppState) -> AppState:
        """Poll until the application ends, logging training progress from status.json."""
        watch = RunWatch()
        while not app.is_terminal:
            for line in self.run_dir_hook.watch_lines(watch):
                self.log.info("%s: %s", app.app_id, line)
            time.sleep(self.poll_interval)
            app = self.hook.get_state(app.app_id)
            self.push_tracking_url(app.tracking_url)
        self.log.info("application %s ended %s/%s", app.app_id, app.state, app.final_status)
        return app

    def defer_until_end(self, app: AppState) -> None:
        self.defer(
            trigger=TFoSApplicationTrigger(
                application_id=app.app_id,
                spark_conn_id=self.spark_conn_id,
                yarn_conn_id=self.yarn_conn_id,
                run_dir=self.run_dir,
                webhdfs_conn_id=self.webhdfs_conn_id,
                poll_interval=self.poll_interval,
                kill_on_kill=True,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.training_timeout * 2 + 3600) if self.training_timeout else None,
        )

    def num_executors(self) -> int:
        """Executors the application needs: one per TF node."""
        return self.num_nodes + self.num_ps + (1 if self.eval_node else 0)

    def already_done(self, digest: str) -> dict[str, Any] | None:
        """The result, if the run directory shows this request done already (an export of the same spec)."""
        done = self.rundir.export_success()
        if done and done.get("spec_hash") == digest:
            self.log.info(
                "%s already holds an export of this spec (%s) at step %s: nothing to do",
                self.run_dir,
                digest,
                done.get("step"),
            )
            return self.result(None, digest)
        return None

    # --- the end ----------------------------------------------------------------------------------------

    def result(self, app: AppState | None, digest: str) -> dict[str, Any]:
        """What the task returns: application id, run directory, step, export path and metrics."""
        rundir = self.rundir
        done = rundir.export_success()
        status = rundir.read_status() or {}
        exported = bool(done and done.get("spec_hash") == digest)
        latest = rundir.latest_checkpoint()
        self._tfos_result = {
            "application_id": app.app_id if app else self.submitted_application() or status.get("application_id"),
            "run_dir": self.run_dir,
            "spec_hash": digest,
            "step": (done or {}).get("step") if exported else (latest.step if latest else status.get("step", 0)),
            "export_path": rundir.path("export") if exported else None,
            "metrics": (done or {}).get("metrics", {}) if exported else {},
            "report": rundir.path(REPORT_PATH),
        }
        self._export_record = done if exported else None
        return self._tfos_result

    def submitted_application(self) -> str | None:
        """The application submitted last for this run (as the backend names it), from the run's events."""
        submitted = self.rundir.events(SUBMITTED_EVENT)
        return submitted[-1].get("application_id") if submitted else None

    def finish(self, app: AppState) -> dict[str, Any]:
        """The result of a successful application, or an error that says what failed and where a retry resumes."""
        digest = self.request_hash()
        line = progress_line(self.rundir.read_status())
        if line:
            self.log.info("application %s ended %s: %s", app.app_id, app.state, line)
        if app.is_successful:
            result = self.result(app, digest)
            if result["export_path"] is None and not self.serve:
                state = (self.rundir.read_status() or {}).get("state")
                raise AirflowException(
                    f"application {app.app_id} ended {app.state}/{app.final_status} (run state {state}) without an "
                    f"export of this task's spec {digest} in {self.rundir.path('export')}: call export_model in "
                    "train_fn; if it was stopped, clear the task to resume from the latest checkpoint"
                )
            return result
        status = self.rundir.read_status() or {}
        latest = self.rundir.latest_checkpoint()
        resume = f"the next try resumes from checkpoint step {latest.step}" if latest else "no checkpoint was published"
        error = status.get("error")
        diagnostics = (app.diagnostics or "").strip().splitlines()
        ended = f"application {app.app_id} ended {app.state}/{app.final_status}"
        if error:  # the driver's own words first
            raise AirflowException(f"{error} ({ended}{'; ' + diagnostics[0] if diagnostics else ''}); {resume}")
        raise AirflowException(
            f"{ended} (no error recorded in status.json{'; ' + diagnostics[-1] if diagnostics else ''}); {resume}"
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        self.run_dir = self.resolve_run_dir(context)
        if event.get("status") != "done":
            raise AirflowException(f"lost track of the application: {event.get('message')}")
        app = AppState.from_json(event["app"])
        self._ti = context["ti"]
        self.push_tracking_url(event.get("tracking_url") or app.tracking_url)
        return self.finish(app)

    def on_kill(self) -> None:
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

    # --- OpenLineage (asked for by the OpenLineage provider; its classes are imported only then) ------------

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The data this task trains on, and where the model will be exported (when the run directory is known)."""
        from airflow_tfos.operators.lineage import run_operator_lineage

        return run_operator_lineage(self, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The data this task trained on, and the exported model with its spec hash, step and metrics."""
        from airflow_tfos.operators.lineage import run_operator_lineage

        return run_operator_lineage(self, self._export_record)


class TFoSTrainOperator(_TFoSRunOperator):
    """Train a TensorFlow model on the Spark cluster: launch, feed, recover, export, shut down; one task.

    Idempotent: an export for the same spec ends the task at once with the same result; a live
    application for the run is reattached to; otherwise a new application resumes from the latest
    checkpoint (so an Airflow retry continues where the last try stopped).

    :param train_fn: the training function, ``package.module:function`` (``main_fun(args, ctx)``).
    :param args: passed to ``train_fn`` (templated; JSON).
    :param num_nodes: TF workers (chief included).
    :param input_mode: ``SPARK`` (Spark feeds ``data``) or ``TENSORFLOW`` (nodes read files themselves).
    :param data: what to train on (templated): ``{"format": "parquet"|"csv"|"table"|"tfrecord"|"function", ...}``.
    :param validation_data: fed beside ``data`` in SPARK mode (templated).
    :param feed: how Spark feeds: ``{"features": [...], "label": ..., "batch_size": ...}`` (templated).
    :param run_dir: the run directory (templated); default ``<run_dir_base>/<dag>/<task>/<logical date>``. No
        ``..``; a templated one must render to a folder under ``[tfos] run_dir_base``.
    :param allow_run_dir_outside_base: let a templated ``run_dir`` render to a folder outside
        ``[tfos] run_dir_base`` (only when nobody but the DAG's authors decides what it renders to).
    :param warm_start: an exported model to start from, e.g. the previous day's (templated).
    :param num_ps: parameter servers. :param master_node: ``chief``/``master``/None.
    :param eval_node: add an evaluator node.
    :param keras: ``auto``, ``tf_keras`` or ``keras3``.
    :param gpus_per_node: GPUs per TF node (0: none).
    :param max_attempts: TF cluster attempts inside one application (an executor lost is recovered there).
    :param training_timeout: seconds one TF cluster attempt may run.
    :param env: environment variables for the TF node processes (templated).
    :param stop_grace_secs: how long a stop request waits for the next checkpoint.
    :param spark_conn_id: the ``spark`` connection (``yarn`` master: YARN; else the local backend).
    :param yarn_conn_id: the ``yarn`` connection (YARN backend).
    :param webhdfs_conn_id: the ``webhdfs`` connection for HDFS run directories.
    :param conf: extra Spark settings (templated).
    :param executor_cores: cores per executor (one executor per TF node).
    :param executor_memory: JVM heap per executor.
    :param tf_memory_mb: memory of each TF node process, off the JVM heap; sets the executor's memory
        overhead and is checked against the largest container YARN allows.
    :param poll_interval: seconds between state polls.
    :param deferrable: wait in the triggerer, freeing the worker slot (default
        ``[operators] default_deferrable``).
    :param durable: keep the application id in the task's durable state, so that a retry reattaches to
        it (ResumableJobMixin); the run's tag is looked for either way.
    """

    def execute(self, context: Context) -> Any:
        return self.launch_and_wait(context)


class TFoSLaunchClusterOperator(_TFoSRunOperator):
    """Start the training application in serving mode; return once its TF cluster can take feeds.

    The application trains on ``data`` if given, then serves the feed requests that
    :class:`~airflow_tfos.operators.lifecycle.TFoSFeedOperator` writes, each resuming from the latest
    checkpoint, until :class:`~airflow_tfos.operators.lifecycle.TFoSShutdownClusterOperator` stops it.
    Pushes ``application_id`` and ``run_dir``. Parameters as :class:`TFoSTrainOperator`, plus:

    :param ready_timeout: seconds to wait for the application to come up; an application not serving by
        then is killed before the task fails.
    :param idle_timeout: seconds the serving application waits without any feed request before it stops by
        itself (None: until a shutdown), so that a DAG run that failed before its shutdown task, or whose
        shutdown never ran, does not hold the cluster's executors for good.
    """

    serve = True

    def __init__(self, *, ready_timeout: float = 1800.0, idle_timeout: float | None = 3600.0, **kwargs: Any) -> None:
        self.idle_timeout = idle_timeout
        super().__init__(**kwargs)
        self.ready_timeout = ready_timeout

    def execute(self, context: Context) -> Any:
        return self.launch_and_wait(context)

    def wait(self, app: AppState) -> dict[str, Any]:
        """Wait until the application serves feeds (or defer); a launch that ended instead is finished."""
        if self.deferrable:
            self.defer(
                trigger=TFoSRunDirTrigger(
                    run_dir=self.run_dir,
                    condition={"ready": {}},
                    webhdfs_conn_id=self.webhdfs_conn_id,
                    application_id=app.app_id,
                    spark_conn_id=self.spark_conn_id,
                    yarn_conn_id=self.yarn_conn_id,
                    poll_interval=min(self.poll_interval, 5.0),
                    timeout=self.ready_timeout,
                ),
                method_name="launch_complete",
            )
        deadline = time.monotonic() + self.ready_timeout
        while True:
            ready = self.run_dir_hook.check({"ready": {}})
            if ready is not None:
                self.log.info("application %s serves feeds for %s", app.app_id, self.run_dir)
                self._tfos_result = {"application_id": app.app_id, "run_dir": self.run_dir}
                return self._tfos_result
            app = self.hook.get_state(app.app_id)
            if app.is_terminal:
                return self.ended_before_serving(app)
            if time.monotonic() > deadline:
                self.stop_unready(app.app_id)
                raise AirflowException(
                    f"application {app.app_id} was not ready within {self.ready_timeout:.0f} s (ready_timeout): "
                    "it was stopped; see its driver log for why, or raise ready_timeout"
                )
            time.sleep(min(self.poll_interval, 5.0))

    def stop_unready(self, app_id: str | None) -> None:
        """Kill an application that did not come up: nothing of a failed launch may outlive its task."""
        if not app_id:
            return
        self.log.warning("application %s is not ready: killing it so that nothing outlives this launch", app_id)
        try:
            state = self.hook.kill(app_id)
        except Exception as exc:
            self.log.error("cannot kill application %s: %s", app_id, exc)
            return
        self.rundir.add_event("launch_failed", application_id=app_id, state=state.state)

    def launch_complete(self, context: Context, event: dict[str, Any]) -> Any:
        self.run_dir = self.resolve_run_dir(context)
        if event.get("status") == "done":  # the backend's id, not the one the driver knows itself by
            app_id = self.submitted_application() or event["result"].get("application_id")
            return {"application_id": app_id, "run_dir": self.run_dir}
        if event.get("status") == "app_ended":
            return self.ended_before_serving(AppState.from_json(event["app"]))
        app_id = self.submitted_application()
        self.stop_unready(app_id)
        raise AirflowException(
            f"application {app_id} did not become ready: {event.get('message') or event}; it was stopped"
        )

    def ended_before_serving(self, app: AppState) -> dict[str, Any]:
        """The result of an application that ended before it served feeds: a failure unless it left an
        export of this spec (e.g. it was stopped at once by a stop request)."""
        self.finish(app)  # raises if it failed
        digest = self.request_hash()
        result = self.result(app, digest)
        if result["export_path"] is None:
            state = (self.rundir.read_status() or {}).get("state")
            raise AirflowException(
                f"application {app.app_id} ended {app.state}/{app.final_status} (run state {state}) before it served "
                f"feeds, without an export of this task's spec {digest}: clear the task to launch it again"
            )
        return result
