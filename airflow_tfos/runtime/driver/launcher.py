"""The driver side of a TF cluster on Spark: one barrier stage per cluster.

>>> from airflow_tfos.runtime import run
>>> result = run(sc, main_fun, args, num_nodes=2)           # blocks; returns the chief's value

or, to do something while it trains::

    cluster = TFClusterRun(sc, main_fun, args, num_nodes=2).start()
    ...
    result = cluster.wait()
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from airflow_tfos.runtime.driver.checks import check_cluster, snapshot_resources
from airflow_tfos.runtime.driver.ended import EndWatch, HungStage
from airflow_tfos.runtime.driver.eviction import drop_unanswering, is_local
from airflow_tfos.runtime.driver.eviction import job_ids as group_job_ids
from airflow_tfos.runtime.driver.stage import check_data_args, frame_stage, rdd_stage, retryable, translate
from airflow_tfos.runtime.driver.watchdog import StallMonitor, StallReport
from airflow_tfos.runtime.errors import HungStageError, RunTimeoutError, StallError, TFoSRuntimeError
from airflow_tfos.runtime.feed.rows import RowFeed
from airflow_tfos.runtime.node.cluster import decider_ids, plan_roles
from airflow_tfos.runtime.node.job import NodeJob
from airflow_tfos.shared import events
from airflow_tfos.shared.errors import RunDirError
from airflow_tfos.shared.feed import Feed
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import RunSpec, check_settings
from airflow_tfos.shared.storage import join
from airflow_tfos.shared.storage.tokens import TokenKeeper

log = logging.getLogger(__name__)

_UNSET = object()


class TFClusterRun:
    """One TF cluster run as a Spark barrier stage, with one task per TF node.

    :param sc: the SparkContext.
    :param main_fun: ``main_fun(args, ctx)``, run on every node; the chief's (or worker 0's) return
        value is the run's result.
    :param args: passed to ``main_fun`` as is (a list also becomes the node's ``sys.argv``).
    :param num_nodes: number of TF nodes, parameter servers and evaluator included.
    :param num_ps: number of parameter servers.
    :param master_node: job name of the coordinating node, ``"chief"`` (default) or ``"master"``, or
        None for plain workers (worker 0 then acts as chief).
    :param eval_node: whether one node is an evaluator.
    :param run_dir: the run's directory; the nodes find it as ``ctx.run_dir``.
    :param timeout: seconds the whole run may take; then its stage is cancelled and
        :class:`RunTimeoutError` raised. None: no limit.
    :param gpus_per_node: GPUs each node needs from Spark's resource scheduling (0: none asked for;
        GPUs that Spark assigns anyway are still given to the node).
    :param keras: which Keras ``tf.keras`` means in the nodes: ``"auto"`` (Keras 2 from tf-keras when
        installed, which MultiWorkerMirroredStrategy's ``fit`` needs on TF 2.21), ``"tf_keras"`` or
        ``"keras3"``.
    :param tensorboard: start TensorBoard beside the chief (or worker 0), reading ``log_dir``.
    :param log_dir: TensorBoard's log directory.
    :param env: extra environment variables for the node processes. The driver's own ``AIRFLOW_TFOS_*``
        variables (e.g. ``AIRFLOW_TFOS_WEBHDFS``, the HDFS settings) are passed on too, unless overridden here.
    :param slot_wait_secs: how long to wait for executors to register before deciding that the cluster
        is too small.
    :param data: InputMode.SPARK: a DataFrame whose rows are fed to the training nodes (with ``feed``),
        or an RDD of rows for TFoS programs (with ``row_feed``).
    :param feed: how the DataFrame's columns become batches (:class:`~airflow_tfos.runtime.feed.Feed`).
    :param validation_data: a second DataFrame, fed beside ``data`` as the validation set.
    :param row_feed: how an RDD's rows are fed to TFoS programs (``DataFeed``).
    :param max_attempts: how many TF clusters to try in all. When a node process or an executor dies,
        or a node fails for a reason a fresh cluster may get past (a lost peer), the whole barrier stage
        runs again with fresh ports and TF_CONFIG, and the nodes resume from the latest checkpoint
        (:mod:`airflow_tfos.runtime.program.checkpoint`). An error in the program itself is not retried.
    :param warm_start: an exported model (SavedModel directory, or a run directory with ``export/``)
        to start from when the run has no checkpoint yet; the nodes find it as ``ctx.warm_start``.
    :param stall_timeout: seconds without the training advancing its global step (as reported through
        :class:`~airflow_tfos.runtime.program.progress.ProgressTracker`, e.g. ``progress_callback``) after which the
        attempt counts as stalled: its stage is cancelled, and a fresh TF cluster resumes from the latest
        checkpoint (:mod:`airflow_tfos.runtime.driver.watchdog`). It holds off while a node saves a checkpoint,
        exports, restores, evaluates or waits for its first batch, and is off once a step took longer than
        it. Needs ``run_dir``. None: no watchdog.
        On a stall, Spark cancels the stage's tasks, and each task ends its node process (with its process
        group); a frozen executor JVM is not reached this way: Spark replaces it once its heartbeat times out.
    """

    def __init__(
        self,
        sc,
        main_fun: Callable[[Any, Any], Any],
        args: Any = None,
        *,
        num_nodes: int,
        num_ps: int = RunSpec.num_ps,
        master_node: str | None = RunSpec.master_node,
        eval_node: bool = RunSpec.eval_node,
        run_dir: str | None = None,
        timeout: float | None = RunSpec.timeout,
        gpus_per_node: int = RunSpec.gpus_per_node,
        keras: str = RunSpec.keras,
        tensorboard: bool = RunSpec.tensorboard,
        log_dir: str | None = RunSpec.log_dir,
        env: Mapping[str, str] | None = None,
        slot_wait_secs: float = 60.0,
        set_tf_config: bool = True,
        data: Any = None,
        feed: Feed | None = None,
        validation_data: Any = None,
        row_feed: RowFeed | None = None,
        max_attempts: int = RunSpec.max_attempts,
        warm_start: str | None = RunSpec.warm_start,
        stall_timeout: float | None = RunSpec.stall_timeout,
    ):
        if not callable(main_fun):
            raise TypeError(f"main_fun must be callable, got {type(main_fun).__name__}")
        roles = tuple(plan_roles(num_nodes, num_ps=num_ps, master_node=master_node, eval_node=eval_node))
        # The cluster's settings are a spec, checked once (check_settings) as spec.json's are, and handed to every
        # node (NodeJob.spec); num_nodes there counts the nodes that train, as the operators' does.
        spec = RunSpec(
            num_nodes=len(roles) - num_ps - (1 if eval_node else 0),
            num_ps=num_ps,
            master_node=master_node,
            eval_node=eval_node,
            timeout=timeout,
            gpus_per_node=gpus_per_node,
            keras=keras,
            tensorboard=tensorboard,
            log_dir=log_dir,
            max_attempts=max_attempts,
            warm_start=warm_start or None,
            stall_timeout=stall_timeout,
        )
        check_settings(spec)
        self._setup(sc, main_fun, args, roles, spec, run_dir, env, slot_wait_secs, set_tf_config)
        self.data, self.feed, self.validation_data, self.row_feed = data, feed, validation_data, row_feed
        check_data_args(data, feed, validation_data, row_feed)

    def _setup(self, sc, main_fun, args, roles, spec, run_dir, env, slot_wait_secs, set_tf_config) -> None:
        self.sc = sc
        self.main_fun = main_fun
        self.args = args
        self.roles = roles
        #: the cluster's settings (the spec it was started from, or the one its arguments made), for every node
        self.spec: RunSpec = spec
        self.run_dir = run_dir
        self.env = {**{k: v for k, v in os.environ.items() if k.startswith("AIRFLOW_TFOS_")}, **dict(env or {})}
        self.slot_wait_secs = slot_wait_secs
        self.set_tf_config = set_tf_config
        #: TensorBoard's log directory: the spec's, else ``<run_dir>/tensorboard`` when TensorBoard is on
        self.log_dir = spec.log_dir or (join(run_dir, "tensorboard") if spec.tensorboard and run_dir else None)
        self._stall: StallReport | None = None
        self._hung: HungStage | None = None
        self.cluster_id = uuid.uuid4().hex[:12]
        self.job_group = f"airflow-tfos-{self.cluster_id}"
        self._thread: threading.Thread | None = None
        self._tokens: TokenKeeper | None = None
        self._started_at: float | None = None
        self._outcome: Any = _UNSET
        self._error: BaseException | None = None
        self._cancelled = False
        self._frame = None
        self._direct = None

    @classmethod
    def from_spec(
        cls,
        sc,
        spec: RunSpec,
        main_fun: Callable[[Any, Any], Any],
        args: Any = None,
        *,
        run_dir: str | None = None,
        env: Mapping[str, str] | None = None,
        data: Any = None,
        validation_data: Any = None,
    ) -> TFClusterRun:
        """The TF cluster ``spec`` asks for (what the driver starts; :func:`parse_spec` checked it): the layout,
        limits and node settings come from the spec (its ``num_nodes`` counts the nodes that train, as the
        operator's does: the cluster adds ``num_ps`` parameter servers and the evaluator); what the driver made of
        it is passed: the training function, its ``args`` (a feed request's own, or the spec's), the DataFrames it
        built (fed with ``spec.feed``), and ``env`` added to the spec's.
        """
        total = spec.num_nodes + spec.num_ps + (1 if spec.eval_node else 0)
        roles = tuple(plan_roles(total, num_ps=spec.num_ps, master_node=spec.master_node, eval_node=spec.eval_node))
        run = cls.__new__(cls)
        run._setup(sc, main_fun, args, roles, spec, run_dir, {**spec.env, **(env or {})}, 60.0, True)
        feed = Feed(**spec.feed) if data is not None else None
        run.data, run.feed, run.validation_data, run.row_feed = data, feed, validation_data, None
        check_data_args(data, feed, validation_data, None)
        return run

    @property
    def num_nodes(self) -> int:
        return len(self.roles)

    def start(self) -> TFClusterRun:
        """Check the cluster, then submit the barrier stage in the background."""
        if self._thread is not None:
            raise TFoSRuntimeError(f"run {self.cluster_id} was already started")
        resources = snapshot_resources(self.sc, wanted_slots=self.num_nodes, wait_seconds=self.slot_wait_secs)
        check_cluster(resources, self.num_nodes, gpus_per_node=self.spec.gpus_per_node)
        if self.feed is not None:
            self._prepare_feed()
        job = self.node_job()
        self._tokens = TokenKeeper.for_run_dir(self.run_dir, f"TF cluster {self.cluster_id}")
        if self._tokens is None and self.spec.tensorboard:  # TensorBoard's log directory alone may be on HDFS
            self._tokens = TokenKeeper.for_run_dir(self.log_dir, f"TF cluster {self.cluster_id}")
        if self._tokens is not None:
            job = dataclasses.replace(job, webhdfs_token=self._tokens.token)
        self._started_at = time.monotonic()
        from pyspark import InheritableThread

        self._thread = InheritableThread(target=self._collect, args=(job,), name=self.job_group, daemon=True)
        self._thread.start()
        log.info(
            "TF cluster %s: %d node(s) %s submitted as one barrier stage",
            self.cluster_id,
            self.num_nodes,
            ", ".join(r.label for r in self.roles),
        )
        return self

    def _prepare_feed(self) -> None:
        """Check the DataFrames' schemas here, on the caller's thread, before anything is launched; then either
        plan the nodes' direct reads of the Parquet files, or lay the rows out through Spark."""
        from airflow_tfos.runtime.feed.direct import plan_direct
        from airflow_tfos.runtime.feed.plan import check_schema
        from airflow_tfos.runtime.feed.spark_side import prepare_dataframe, schema_fields

        check_schema(schema_fields(self.data), self.feed, "training DataFrame")
        if self.validation_data is not None:
            check_schema(schema_fields(self.validation_data), self.feed, "validation DataFrame")
        self._direct, line = plan_direct(self.data, self.feed, self.roles, self.validation_data)
        log.info("TF cluster %s: %s", self.cluster_id, line)
        if self._direct is None:
            self._frame = prepare_dataframe(self.data, self.feed, self.roles, self.validation_data)

    def node_job(self) -> NodeJob:
        """What every node task of this run gets (built on the driver)."""
        from pyspark import cloudpickle

        hadoop_conf = self.sc._jsc.hadoopConfiguration()
        default_fs = hadoop_conf.get("fs.defaultFS") or "file:///"
        if default_fs.startswith("file://"):
            default_fs = "file://"
        return NodeJob(
            cluster_id=self.cluster_id,
            roles=self.roles,
            deciders=decider_ids(self.roles),
            payload=cloudpickle.dumps((self.main_fun, self.args)),
            run_dir=self.run_dir,
            default_fs=default_fs,
            working_dir=os.getcwd(),
            env=self.env,
            set_tf_config=self.set_tf_config,
            feed=self.feed,
            direct=self._direct,
            with_validation=self.validation_data is not None,
            row_feed=self.row_feed,
            spec=dataclasses.replace(self.spec, log_dir=self.log_dir),
        )

    def _collect(self, job: NodeJob) -> None:
        try:
            self._attempts(job)
        finally:
            if self._tokens is not None:
                self._tokens.stop()

    def _attempts(self, job: NodeJob) -> None:
        self.sc.setJobGroup(self.job_group, f"airflow-tfos TF cluster {self.cluster_id}", interruptOnCancel=True)
        for attempt in range(self.spec.max_attempts):
            self._fence(attempt)
            self._event(events.ATTEMPT, attempt=attempt)
            self._hung = None
            watches = [w for w in (self._watch(attempt), self._watch_end(attempt)) if w is not None]
            jobs_before = self._job_ids()
            try:
                self._outcome = self._stage(dataclasses.replace(job, attempt=attempt))
                return
            except BaseException as exc:  # re-raised on the caller's thread by wait()
                stall, self._stall = self._stall, None
                hung, self._hung = self._hung, None
                self._error = StallError(stall.message()) if stall is not None else exc
                if hung is not None and stall is None:
                    self._error = HungStageError(hung.message())
                exc = self._error
                last = attempt + 1 >= self.spec.max_attempts
                if self._cancelled or not retryable(exc):
                    return
                reason = str(self._translate(exc)).splitlines()[0][:500]
                self._event(events.ATTEMPT_FAILED, attempt=attempt, reason=reason, retrying=not last)
                if not last and (dropped := self._drop_unanswering(attempt, jobs_before, exc, stall, hung)):
                    self._event(events.EXECUTORS_DROPPED, attempt=attempt, executors=dropped)
                if last:
                    log.error(
                        "TF cluster %s: attempt %d failed, no attempts left: %s", self.cluster_id, attempt, reason
                    )
                    return
                # A lost executor comes back after some seconds; wait for its slot rather than let the
                # next barrier stage sit in Spark's own slot check.
                snapshot_resources(self.sc, wanted_slots=self.num_nodes, wait_seconds=self.slot_wait_secs)
                log.warning(
                    "TF cluster %s: attempt %d failed (%s); starting a fresh TF cluster (attempt %d of %d)",
                    self.cluster_id,
                    attempt,
                    reason,
                    attempt + 2,
                    self.spec.max_attempts,
                )
                self._error = None
            finally:
                for watch in watches:
                    watch.stop()

    def _job_ids(self) -> set[int] | None:
        if is_local(self.sc.master):
            return None
        try:
            return group_job_ids(self.sc, self.job_group)
        except Exception:
            return None

    def _drop_unanswering(
        self,
        attempt: int,
        jobs_before: set[int] | None,
        error: BaseException,
        stall: StallReport | None,
        hung: HungStage | None,
    ) -> list[dict[str, Any]]:
        """Drop the executors that still run a task of the failed attempt once the others ended theirs (a host
        cut off, a JVM that hangs), so the next attempt is placed on the others instead of waiting for Spark's
        heartbeat timeout (:mod:`airflow_tfos.runtime.driver.eviction`); return what was dropped."""
        if jobs_before is None:
            return []
        nodes = [role.label for role in self.roles]
        last_steps = self._last_steps(attempt)
        return drop_unanswering(self.sc, self.job_group, jobs_before, nodes, error, stall, hung, last_steps)

    def _last_steps(self, attempt: int) -> dict[str, int]:
        if not self.run_dir:
            return {}
        try:
            records = RunDir(self.run_dir).node_progress()
        except (RunDirError, OSError, ValueError):
            return {}
        return {
            str(r["worker"]): int(r["step"])
            for r in records
            if r.get("run_id") == self.cluster_id and r.get("attempt", 0) == attempt and r.get("step") is not None
        }

    def _watch(self, attempt: int) -> StallMonitor | None:
        """Start the stall watchdog over this attempt's progress reports (None without stall_timeout)."""
        if self.spec.stall_timeout is None or not self.run_dir:
            return None
        rundir = RunDir(self.run_dir)

        def read() -> list[dict[str, Any]]:
            records = rundir.node_progress()
            return [r for r in records if r.get("run_id") == self.cluster_id and r.get("attempt", 0) == attempt]

        def on_stall(report: StallReport) -> None:
            self._stall = report
            self._event(
                events.STALL,
                attempt=attempt,
                timeout=report.timeout,
                nodes=[{"node": n.node, "step": n.step, "secs": round(n.secs, 1)} for n in report.nodes],
            )
            self.sc.cancelJobGroup(self.job_group)  # Spark kills the tasks; their node processes die with them

        monitor = StallMonitor(read, self.spec.stall_timeout, on_stall)
        monitor.start()
        return monitor

    def _watch_end(self, attempt: int) -> EndWatch | None:
        """Watch for every deciding node's end while the stage runs on (:mod:`airflow_tfos.runtime.driver.ended`);
        None without a run directory or executors to drop (local mode)."""
        if not self.run_dir or is_local(self.sc.master):
            return None
        deciders = [role.label for role in self.roles if role.executor_id in decider_ids(self.roles)]

        def on_hung(hung: HungStage) -> None:
            self._hung = hung
            self._event(events.STAGE_HUNG, attempt=attempt, ended=hung.ended, grace=hung.grace)
            self.sc.cancelJobGroup(self.job_group)  # the others' tasks end; the unanswering ones are dropped

        watch = EndWatch(RunDir(self.run_dir).node_progress, self.cluster_id, attempt, deciders, on_hung)
        watch.start()
        return watch

    def _fence(self, attempt: int) -> None:
        """Make ``attempt`` the only one whose checkpoints and exports the run directory accepts."""
        if not self.run_dir:
            return
        try:
            RunDir(self.run_dir).write_attempt(self.cluster_id, attempt)
        except (RunDirError, ValueError) as exc:
            log.warning("cannot record attempt %d in %s (its writes are not fenced): %s", attempt, self.run_dir, exc)

    def _event(self, kind: str, **fields: Any) -> None:
        if not self.run_dir:
            return
        try:
            RunDir(self.run_dir).add_event(kind, run_id=self.cluster_id, **fields)
        except (RunDirError, ValueError) as exc:
            log.warning("cannot record %s in %s: %s", kind, self.run_dir, exc)

    def _stage(self, job: NodeJob) -> list[tuple[int, bytes, str]]:
        if self.feed is not None and self._direct is None:
            return frame_stage(self._frame, job)
        if self.row_feed is not None:
            from airflow_tfos.runtime.feed.spark_side import prepare_rdd

            return rdd_stage(prepare_rdd(self.data, self.roles), job)
        return rdd_stage(self.sc.parallelize(range(self.num_nodes), self.num_nodes), job)

    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def wait(self, timeout: float | None = _UNSET) -> Any:  # type: ignore[assignment]
        """Wait for the run; return the chief's (or worker 0's) return value.

        :param timeout: seconds to wait from now; defaults to what is left of the run's ``timeout``.
            When it runs out the stage is cancelled and :class:`RunTimeoutError` raised.
        """
        if self._thread is None:
            raise TFoSRuntimeError("the run was not started: call start() first")
        if timeout is _UNSET:
            timeout = None if self.spec.timeout is None else self.spec.timeout - (time.monotonic() - self._started_at)
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0)
        try:
            while self._thread.is_alive():
                if deadline is not None and time.monotonic() >= deadline:
                    self.cancel()
                    raise RunTimeoutError(
                        f"TF cluster {self.cluster_id} did not finish within {self.spec.timeout or timeout:g} s; its "
                        "Spark stage was cancelled (raise timeout= to give it longer)"
                    )
                self._thread.join(0.2)
        except KeyboardInterrupt:
            log.warning("interrupted: cancelling TF cluster %s", self.cluster_id)
            self.cancel()
            raise
        return self._result()

    def _result(self) -> Any:
        if self._error is not None:
            translated = self._translate(self._error)
            if translated is self._error:
                raise translated
            raise translated from self._error
        from pyspark import cloudpickle

        for _executor_id, data, notes in self._outcome:
            for line in filter(None, notes.splitlines()):
                log.info("TF cluster %s: %s", self.cluster_id, line)
            return cloudpickle.loads(data)
        return None

    def _translate(self, error: BaseException) -> BaseException:
        return translate(error, self.cluster_id, self.num_nodes, self._cancelled)

    def cancel(self) -> None:
        """Cancel the stage; Spark kills its tasks and every node process dies with them."""
        self._cancelled = True
        self.sc.cancelJobGroup(self.job_group)
        if self._thread is not None:
            self._thread.join(30)


def run(sc, main_fun: Callable[[Any, Any], Any], args: Any = None, **kwargs: Any) -> Any:
    """Run ``main_fun(args, ctx)`` on a TF cluster inside Spark and return the chief's result.

    Takes the keyword arguments of :class:`TFClusterRun` (``num_nodes`` is required).
    """
    return TFClusterRun(sc, main_fun, args, **kwargs).start().wait()
