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

The steps are :class:`~airflow_tfos.operators.run.TrainingRun`'s; waiting, deferring and the durable
application id are :class:`~airflow_tfos.operators.application._TFoSApplicationOperator`'s.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.exceptions import AirflowProviderDeprecationWarning
from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.errors import RunConfigError, UserCodeError
from airflow_tfos.hooks.user_code import import_path_of
from airflow_tfos.links.tfos import SparkApplicationLink, TensorBoardLink, TrainingReportLink
from airflow_tfos.operators.application import _TFoSApplicationOperator, shipped_code
from airflow_tfos.operators.run import TrainingRun, last_submitted
from airflow_tfos.operators.warm_start import ModelInService
from airflow_tfos.shared.events import LAUNCH_FAILED
from airflow_tfos.shared.spec import RunSpec, SpecError, split_import_path
from airflow_tfos.triggers.tfos import APP_ENDED, DONE, TFoSRunDirTrigger, watch_arguments

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context


#: Spec fields the operators take under another argument name (the others take the field's own name).
SPEC_ARGUMENTS = {"num_nodes": "num_workers", "timeout": "training_timeout", "serve_idle_secs": "idle_timeout"}
#: TF nodes that train when ``num_workers`` is not given.
DEFAULT_NUM_WORKERS = 2
#: Spec fields no argument sets: derived when the spec is built, stored with it, or inference's own.
DERIVED_SPEC_FIELDS = frozenset({"code", "spec_hash", "inference"})


def spec_arguments() -> list[str]:
    """The :class:`RunSpec` fields that the training operators' arguments set."""
    return [f.name for f in fields(RunSpec) if f.name not in DERIVED_SPEC_FIELDS]


class _TFoSRunOperator(_TFoSApplicationOperator):
    """What training and launch share: the training arguments, their checks, the spec, lineage."""

    template_fields: Sequence[str] = (
        "run_dir",
        "args",
        "data",
        "validation_data",
        "feed",
        "env",
        "conf",
        "warm_start",
        "log_dir",
        "py_files",
        "archives",
        "files",
        "packed_env",
        "name",
        "yarn_queue",
        "proxy_user",
    )
    template_fields_renderers = {"args": "json", "data": "json", "feed": "json", "conf": "json"}
    operator_extra_links = (SparkApplicationLink(), TensorBoardLink(), TrainingReportLink())

    spec_argument_names = SPEC_ARGUMENTS
    #: Whether the application serves feed requests until stopped (the lifecycle operators).
    serve = False
    #: What the application does (spec.json ``kind``).
    kind = "train"
    #: Seconds a serving application waits for a feed request (the launch operator's argument).
    idle_timeout: float | None = None

    def __init__(
        self,
        *,
        train_fn: str | Callable | None = None,
        args: dict | list | None = None,
        num_workers: int | None = None,
        input_mode: str = RunSpec.input_mode,
        data: dict | None = RunSpec.data,
        validation_data: dict | None = RunSpec.validation_data,
        feed: dict | None = RunSpec.feed,
        warm_start: str | ModelInService | None = RunSpec.warm_start,
        num_ps: int = RunSpec.num_ps,
        master_node: str | None = RunSpec.master_node,
        eval_node: bool = RunSpec.eval_node,
        keras: str = RunSpec.keras,
        gpus_per_node: int = RunSpec.gpus_per_node,
        max_attempts: int = RunSpec.max_attempts,
        training_timeout: float | None = RunSpec.timeout,
        stop_grace_secs: float = RunSpec.stop_grace_secs,
        stall_timeout: float | None = RunSpec.stall_timeout,
        kill_grace_secs: float = RunSpec.kill_grace_secs,
        tensorboard: bool = RunSpec.tensorboard,
        log_dir: str | None = RunSpec.log_dir,
        feed_functions: Sequence[str] = (),
        num_nodes: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        num_workers = self._num_workers(num_workers, num_nodes)
        try:
            self.train_fn = import_path_of(train_fn) if train_fn is not None else None
        except UserCodeError as exc:
            raise RunConfigError(f"{type(self).__name__} {self.task_id!r}: {exc}") from None
        self.args = args
        self.num_workers = num_workers
        self.input_mode = input_mode
        self.data = data
        self.validation_data = validation_data
        self.feed = feed
        self.warm_start = warm_start
        self._warm_start_found: str | None = None  # what a ModelInService named, once resolved
        self.num_ps = num_ps
        self.master_node = master_node
        self.eval_node = eval_node
        self.keras = keras
        self.gpus_per_node = gpus_per_node
        self.max_attempts = max_attempts
        self.training_timeout = training_timeout
        self.stop_grace_secs = stop_grace_secs
        self.stall_timeout = stall_timeout
        self.kill_grace_secs = kill_grace_secs
        self.tensorboard = tensorboard
        self.log_dir = log_dir
        self.feed_functions = list(feed_functions)  # not templated: a DAG run's conf cannot widen it
        self._check_parameters()

    def _num_workers(self, num_workers: int | None, num_nodes: int | None) -> int:
        """``num_workers``, or the old spelling ``num_nodes`` (same meaning: the nodes that train), warned about."""
        if num_nodes is None:
            return DEFAULT_NUM_WORKERS if num_workers is None else num_workers
        if num_workers is not None:
            raise RunConfigError(
                f"{type(self).__name__} {self.task_id!r}: give num_workers (num_nodes is its old spelling), not both"
            )
        warnings.warn(
            f"{type(self).__name__} {self.task_id!r}: num_nodes is now spelled num_workers: the TF nodes that train "
            "(the chief included; parameter servers and the evaluator come on top), as before. run()'s num_nodes "
            "counts every node. The spec and its hash are the same either way: a run resumes as it would have.",
            AirflowProviderDeprecationWarning,
            stacklevel=3,
        )
        return num_nodes

    @property
    def num_nodes(self) -> int:
        """The old spelling of :attr:`num_workers`."""
        return self.num_workers

    # --- checks at DAG parse time (no I/O) ---------------------------------------------------------------

    def _check_parameters(self) -> None:
        where = f"{type(self).__name__} {self.task_id!r}"
        if not self.train_fn:
            raise RunConfigError(f"{where}: train_fn is required ('package.module:function')")
        try:
            split_import_path(self.train_fn, "train_fn")
        except SpecError as exc:
            raise RunConfigError(f"{where}: {exc}") from None
        self.check_parameters()

    def build_spec(self, *, code: bool = True) -> RunSpec:
        """The spec this task asks for (the hash of its JSON form identifies the run's request).

        Every field of :class:`RunSpec` but those derived here comes from the operator's argument of the same
        name (or the one :data:`SPEC_ARGUMENTS` names).

        :param code: name the shipped code and its hash (zipping it on the first call), so that a change of
            the code is a new request; False at parse time, which does no I/O.
        """
        settings = {name: getattr(self, SPEC_ARGUMENTS.get(name, name)) for name in spec_arguments()}
        if isinstance(self.warm_start, ModelInService):  # unresolved at parse time, which checks the rest
            settings["warm_start"] = self._warm_start_found
        settings["warm_start"] = settings["warm_start"] or None  # "" from an upstream task: no model yet
        return RunSpec(**settings, code=shipped_code(self.user_code if code else None))

    def cluster_paths(self) -> dict[str, Any]:
        if isinstance(self.warm_start, ModelInService):
            warm_start = {"warm_start=ModelInService(...)'s registry": self.warm_start.registry}
        else:
            warm_start = {"warm_start": self.warm_start}
        return {**super().cluster_paths(), **warm_start, "log_dir": self.log_dir}

    def resolve_inputs(self, context: Context) -> None:
        """Look up the model in service that ``warm_start=ModelInService(...)`` names (after rendering)."""
        if isinstance(self.warm_start, ModelInService):
            self._warm_start_found = self.warm_start.lookup(webhdfs_conn_id=self.webhdfs_conn_id, log=self.log)

    def user_functions(self) -> list[str]:
        """Import paths of the user's functions the application runs (``train_fn``, data functions)."""
        paths = ([self.train_fn] if self.train_fn else []) + self.feed_functions
        for data in (self.data, self.validation_data):
            if isinstance(data, dict) and data.get("format") == "function" and data.get("function"):
                paths.append(str(data["function"]))
        return paths

    # --- the run ---------------------------------------------------------------------------------------------

    def new_run(self, spec: RunSpec) -> TrainingRun:
        return TrainingRun(**self.run_parts(spec))

    def num_executors(self) -> int:
        """Executors the application needs: one per TF node."""
        return self.num_workers + self.num_ps + (1 if self.eval_node else 0)

    def gpus_per_executor(self) -> int:
        return self.gpus_per_node

    def defer_timeout(self) -> timedelta | None:
        return timedelta(seconds=self.training_timeout * 2 + 3600) if self.training_timeout else None

    # --- OpenLineage (asked for by the OpenLineage provider; its classes are imported only then) ------------

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The data this task trains on, and where the model will be exported (when the run directory is known)."""
        from airflow_tfos.operators.lineage import run_operator_lineage

        return run_operator_lineage(self, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The data this task trained on, and the exported model with its spec hash, step and metrics."""
        from airflow_tfos.operators.lineage import run_operator_lineage

        run = self._run
        return run_operator_lineage(self, run.export_record if run else None, run.computed_fingerprint if run else None)


class TFoSTrainOperator(_TFoSRunOperator):
    """Train a TensorFlow model on the Spark cluster: launch, feed, recover, export, shut down; one task.

    Idempotent: an export for the same spec ends the task at once with the same result; a live
    application for the run is reattached to; otherwise a new application resumes from the latest
    checkpoint (so an Airflow retry continues where the last try stopped).

    :param train_fn: the training function, ``package.module:function`` (``main_fun(args, ctx)``).
    :param args: passed to ``train_fn`` (templated; JSON).
    :param num_workers: TF nodes that train: the chief and the workers (parameter servers and the evaluator come
        on top). ``num_nodes``, its old spelling, still works with a deprecation warning (the same spec and hash).
    :param input_mode: ``SPARK`` (Spark feeds ``data``) or ``TENSORFLOW`` (nodes read files themselves).
    :param data: what to train on (templated): ``{"format": "parquet"|"csv"|"table"|"tfrecord"|"function", ...}``.
    :param validation_data: fed beside ``data`` in SPARK mode (templated).
    :param feed: how Spark feeds: ``{"features": [...], "label": ..., "batch_size": ...}`` (templated).
    :param run_dir: the run directory (templated); default ``<run_dir_base>/<dag>/<task>/<logical date>``. No
        ``..``; a templated one must render to a folder under ``[tfos] run_dir_base``.
    :param allow_run_dir_outside_base: let a templated ``run_dir`` render to a folder outside
        ``[tfos] run_dir_base`` (only when nobody but the DAG's authors decides what it renders to).
    :param warm_start: an exported model to start from when the run has no checkpoint yet (templated), or
        ``ModelInService(registry)``: the model a registry had in service before this run's version, looked up by
        the task (none yet: from scratch). An empty string means none too: what an upstream task returns when there
        is no model yet (a task that returns None leaves no XCom, and Airflow logs the missing XCom as an error).
    :param num_ps: parameter servers. :param master_node: ``chief``/``master``/None.
    :param eval_node: add an evaluator node.
    :param keras: ``auto``, ``tf_keras`` or ``keras3``.
    :param gpus_per_node: GPUs per TF node (0: none).
    :param max_attempts: TF cluster attempts inside one application (an executor lost is recovered there).
    :param training_timeout: seconds one TF cluster attempt may run.
    :param env: environment variables for the TF node processes (templated).
    :param stop_grace_secs: how long a stop request waits for the next checkpoint.
    :param stall_timeout: seconds without the training's global step advancing before the TF cluster attempt
        is failed (naming the stalled nodes) and retried from the latest checkpoint; not while a checkpoint
        is saved, a model exported or restored, or the feed's first batch awaited. None: no watchdog.
    :param kill_grace_secs: seconds a node's TF process may take to exit after SIGTERM, when its Spark task
        ends or fails, before it is killed (a program that writes something on SIGTERM may need longer).
    :param tensorboard: start TensorBoard beside the chief (or worker 0) while the run trains; the task's
        TensorBoard link leads to it while the application runs (not while the task is deferred).
    :param log_dir: the log directory TensorBoard reads, which the training function finds as ``ctx.log_dir``
        (templated); default ``<run_dir>/tensorboard`` when ``tensorboard`` is on.
    :param feed_functions: data functions (``package.module:function``) that feed requests (the ``data`` of
        :class:`~airflow_tfos.operators.lifecycle.TFoSFeedOperator` with format ``function``) may name besides
        those of ``data`` and ``validation_data``; the application refuses any other before importing it. Not
        templated: what a DAG run's conf renders cannot widen it.
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

    def __init__(
        self, *, ready_timeout: float = 1800.0, idle_timeout: float | None = RunSpec.serve_idle_secs, **kwargs: Any
    ) -> None:
        self.idle_timeout = idle_timeout
        super().__init__(**kwargs)
        self.ready_timeout = ready_timeout
        where = f"TFoSLaunchClusterOperator {self.task_id!r}"
        if not isinstance(ready_timeout, (int, float)) or ready_timeout <= 0:
            raise RunConfigError(f"{where}: ready_timeout must be > 0 seconds, got {ready_timeout!r}")
        if idle_timeout is not None and (not isinstance(idle_timeout, (int, float)) or idle_timeout <= 0):
            raise RunConfigError(f"{where}: idle_timeout must be > 0 seconds or None, got {idle_timeout!r}")

    def wait(self, app: AppState) -> dict[str, Any]:
        """Wait until the application serves feeds (or defer); a launch that ended instead is finished."""
        if self.deferrable:
            self.defer(
                trigger=TFoSRunDirTrigger(
                    condition={"ready": {}},
                    application_id=app.app_id,
                    timeout=self.ready_timeout,
                    **watch_arguments(self, poll_interval=min(self.poll_interval, 5.0)),
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
        self.run_dir_contents.add_event(LAUNCH_FAILED, application_id=app_id, state=state.state)

    def launch_complete(self, context: Context, event: dict[str, Any]) -> Any:
        self.run_dir = self.resolve_run_dir(context)
        self.resolve_inputs(context)
        if event.get("status") == DONE:  # the backend's id, not the one the driver knows itself by
            app_id = last_submitted(self.run_dir_contents) or event["result"].get("application_id")
            return {"application_id": app_id, "run_dir": self.run_dir}
        if event.get("status") == APP_ENDED:
            return self.ended_before_serving(AppState.from_json(event["app"]))
        app_id = last_submitted(self.run_dir_contents)
        self.stop_unready(app_id)
        raise AirflowException(
            f"application {app_id} did not become ready: {event.get('message') or event}; it was stopped"
        )

    def ended_before_serving(self, app: AppState) -> dict[str, Any]:
        """The result of an application that ended before it served feeds: a failure unless it left an
        export of this spec (e.g. it was stopped at once by a stop request)."""
        result = self.finish(app)  # raises if it failed
        if result["export_path"] is None:
            self.run().no_export(app, "before it served feeds")
        return result
