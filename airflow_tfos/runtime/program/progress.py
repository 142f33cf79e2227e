"""Training progress: what the Airflow task log shows while a model trains, and the report's history.

The chief (or worker 0) keeps ``<run_dir>/progress.json`` current: written at most every ``interval``
seconds, at each epoch end and at the end. The driver copies it into ``status.json`` (``progress``)
with each heartbeat, which is what the operator and its trigger log. Fields:

``step`` (global step: optimizer updates, so it carries on after a resume), ``total_steps``, ``epoch``
(1-based, the epoch the step belongs to), ``epochs``, ``epoch_pct`` (how much of that epoch is done),
``steps_per_epoch``, ``loss``, ``metrics`` (every numeric value of the latest Keras logs, loss
included), ``steps_per_sec`` (over the last ``RATE_WINDOW_SECS``), ``global_batch_size`` and
``examples_per_sec`` (when the batch size is known), ``eta_secs``, ``elapsed_secs``, ``finished``,
``attempt``, ``run_id``, ``worker`` and ``time``.

It also records events for the training report (:mod:`airflow_tfos.runtime.report`):

- ``metrics`` (chief, every epoch end): ``step``, ``epoch``, ``attempt`` and the epoch's logs as they
  are (``loss``, ``accuracy``, ``val_loss``...);
- ``step_metrics`` (chief, every ``history_every`` steps): ``step``, ``epoch``, ``attempt`` and the
  running logs, so that the loss curve has points within epochs;
- ``worker_steps`` (every training node, every epoch end): ``worker``, ``job_name``, ``task_index``,
  ``executor_id``, ``attempt``, ``epoch``, ``step``, ``steps`` and ``mean_secs``, ``p50_secs``,
  ``p90_secs``, ``max_secs`` of the steps since the previous epoch end; the first step after
  :meth:`ProgressTracker.begin` (each ``fit``), which builds TensorFlow's graph, is left out of them and
  reported as ``first_step_secs`` in the event that follows it.

Writes go through the run directory's storage (local or HDFS) on a background thread
(:mod:`~airflow_tfos.runtime.program.progress_writer`), so a slow file system never holds up a training step; a
failed write only logs a warning.

``fit_resumable`` (:mod:`airflow_tfos.runtime.program.checkpoint`) adds the Keras callback by itself. A
program with its own ``model.fit``::

    model.fit(ctx.dataset(), epochs=5, callbacks=[progress_callback(ctx, steps_per_epoch=ctx.steps_per_epoch,
                                                                     epochs=5)])

and a custom training loop::

    tracker = ProgressTracker(ctx, steps_per_epoch=steps, epochs=epochs)
    tracker.begin(start_step)  # 0, or the step a restore returned
    for epoch in range(epochs):
        for batch in ...:
            loss = train_step(batch)
            tracker.step({"loss": float(loss)})
        tracker.epoch_end({"loss": ...})
    tracker.finish()
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import time
import weakref
from collections.abc import Iterator
from typing import Any

from airflow_tfos.runtime.program.progress_writer import ProgressWriter
from airflow_tfos.shared.rundir import RunDir

log = logging.getLogger(__name__)

#: Default seconds between two writes of progress.json.
PROGRESS_INTERVAL_SECS = 3.0
#: Seconds between writes of a node's ``nodes/<node>.json`` while it trains (read by the stall watchdog; its
#: writer thread keeps only the newest record).
NODE_INTERVAL_SECS = 0.2
#: The same on a remote run directory (HDFS): each write is a namenode request, from every node.
REMOTE_NODE_INTERVAL_SECS = 2.0
#: About how many ``step_metrics`` points a run records when its total steps are known.
HISTORY_POINTS = 100
#: Seconds between ``step_metrics`` points when the total steps are unknown.
HISTORY_SECS = 30.0
#: The window over which ``steps_per_sec`` is measured.
RATE_WINDOW_SECS = 30.0
#: Keys of the events that Keras logs must not overwrite.
_RESERVED = frozenset({"kind", "time", "step", "epoch", "attempt", "run_id", "worker", "steps"})


def numeric_logs(logs: dict[str, Any] | None) -> dict[str, float | None]:
    """The numeric values of Keras logs as plain floats (None for NaN and infinities); others are left out."""
    out: dict[str, float | None] = {}
    for name, value in (logs or {}).items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        out[str(name)] = number if math.isfinite(number) else None
    return out


def percentile(values: list[float], pct: float) -> float:
    """The ``pct`` percentile of ``values`` (linear between the nearest ranks); 0.0 for none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def epoch_position(step: int, steps_per_epoch: int | None) -> tuple[int | None, float | None]:
    """The 1-based epoch that global ``step`` belongs to, and the percentage of it done.

    Step 0 is epoch 1 at 0 %; the last step of an epoch is that epoch at 100 %.
    """
    if not steps_per_epoch:
        return None, None
    epoch = max(1, math.ceil(step / steps_per_epoch))
    return epoch, round(100.0 * (step - (epoch - 1) * steps_per_epoch) / steps_per_epoch, 1)


class ProgressTracker:
    """Measure training progress on one node and record it in the run directory.

    Every training node measures its step times; the chief also writes progress.json and the metrics
    history. Without a run directory nothing is written.

    :param ctx: the node's context.
    :param steps_per_epoch: steps per epoch (None: no epoch position, no total).
    :param epochs: epochs in all (None: no total, no ETA).
    :param global_batch_size: examples per step over all training nodes, for ``examples_per_sec``
        (default: the Spark feed's ``batch_size`` times the training nodes, when data is fed by Spark).
    :param interval: seconds between writes of progress.json.
    :param history_every: steps between ``step_metrics`` points (default: about ``HISTORY_POINTS`` per
        run when the total is known, else one every ``HISTORY_SECS``).
    """

    def __init__(
        self,
        ctx,
        *,
        steps_per_epoch: int | None = None,
        epochs: int | None = None,
        global_batch_size: int | None = None,
        interval: float = PROGRESS_INTERVAL_SECS,
        history_every: int | None = None,
    ):
        if interval <= 0:
            raise ValueError(f"interval must be positive seconds, got {interval!r}")
        if history_every is not None and history_every < 1:
            raise ValueError(f"history_every must be at least 1 step, got {history_every}")
        self.ctx = ctx
        self.steps_per_epoch = steps_per_epoch
        self.epochs = epochs
        self.global_batch_size = global_batch_size or _fed_batch_size(ctx)
        self.interval = interval
        self.history_every = history_every
        self.worker = f"{ctx.job_name}:{ctx.task_index}"
        self.is_chief = bool(ctx.is_chief)
        self._writer = ProgressWriter(RunDir(ctx.run_dir)) if ctx.run_dir else None
        remote = bool(ctx.run_dir) and "://" in str(ctx.run_dir) and not str(ctx.run_dir).startswith("file://")
        self._node_interval = REMOTE_NODE_INTERVAL_SECS if remote else NODE_INTERVAL_SECS
        self._step = 0
        self._logs: dict[str, float | None] = {}
        self._started_wall: float | None = None
        self._last_call: float | None = None
        self._window: list[float] = []
        self._first_step_secs: float | None = None
        self._first_untimed = True
        self._rate: collections.deque[tuple[float, int]] = collections.deque()
        self._last_write = 0.0
        self._last_point: tuple[float, int] | None = None
        self._last_epoch_step: int | None = None
        self._phase = "starting"  # "training" from the first step on, "finished" after finish()
        self._last_node_write = 0.0
        _TRACKERS.add(self)

    # --- what the caller reports --------------------------------------------------------------------

    @property
    def total_steps(self) -> int | None:
        if self.steps_per_epoch and self.epochs:
            return self.steps_per_epoch * self.epochs
        return None

    def begin(self, step: int = 0) -> None:
        """Training (re)starts at global ``step`` (after a restore); the step rate is measured afresh."""
        self._step = int(step)
        self._phase = "starting"
        if self._started_wall is None:
            self._started_wall = time.time()
        self._last_call = time.monotonic()
        self._first_untimed = True
        self._rate.clear()
        if self._last_point is None:
            self._last_point = (time.monotonic(), self._step)

    def step(self, logs: dict[str, Any] | None = None, *, step: int | None = None, step_secs: float | None = None):
        """One training step is done (call :meth:`begin` first, or the first step goes untimed).

        :param logs: the step's metrics (Keras logs, or e.g. ``{"loss": float(loss)}``).
        :param step: the global step now (default: one more than before).
        :param step_secs: how long the step took (default: the time since the previous call).
        """
        now = time.monotonic()
        if self._started_wall is None:
            self.begin(0 if step is None else max(0, int(step) - 1))
            self._last_call = None  # without begin(), the first step's time is unknown
        self._step = self._step + 1 if step is None else int(step)
        if self._phase in ("starting", "waiting_for_data"):
            self._phase = "training"
        if step_secs is None and self._last_call is not None:
            step_secs = now - self._last_call
        self._last_call = now
        if step_secs is not None and self._first_untimed:
            self._first_step_secs = float(step_secs)  # it builds the step's graph: kept out of the statistics
            self._first_untimed = False
        elif step_secs is not None:
            self._window.append(float(step_secs))
        if logs:
            self._logs = numeric_logs(logs)
        self._rate.append((now, self._step))
        while len(self._rate) > 2 and now - self._rate[0][0] > RATE_WINDOW_SECS:
            self._rate.popleft()
        if self._writer is not None and now - self._last_node_write >= self._node_interval:
            self._write_node(now)
        if not self.is_chief or self._writer is None:
            return
        if self._point_due(now):
            self._last_point = (now, self._step)
            self._event("step_metrics", self._with_logs(self._logs))
        if now - self._last_write >= self.interval:
            self._write_progress(now)

    def epoch_end(self, logs: dict[str, Any] | None = None, *, step: int | None = None, epoch: int | None = None):
        """An epoch ended: record its metrics (chief) and this node's step times.

        :param logs: the epoch's metrics, validation metrics included (Keras's ``on_epoch_end`` logs).
        :param step: the global step now (default: the last one reported).
        :param epoch: the 1-based epoch that ended (default: derived from the step).
        """
        if step is not None:
            self._step = int(step)
        if self._last_epoch_step == self._step:
            return  # already recorded (a custom loop's epoch_end and finish at the same step)
        self._last_epoch_step = self._step
        epoch = epoch if epoch is not None else epoch_position(self._step, self.steps_per_epoch)[0]
        values = numeric_logs(logs)
        if values:
            self._logs = {**self._logs, **values}
        self._record_step_times(epoch)
        if self._phase == "training":
            # Until the next epoch's first step: a new epoch's input may take seconds to start (not a stall).
            self._phase = "waiting_for_data"
            if self._writer is not None:
                self._write_node(time.monotonic())
        if self.is_chief and self._writer is not None:
            self._event("metrics", {**self._with_logs(values or self._logs), "epoch": epoch})
            self._write_progress(time.monotonic())

    def finish(self, logs: dict[str, Any] | None = None, *, step: int | None = None) -> None:
        """Training (or this ``fit``) ended: write the last progress and wait until everything is written."""
        if step is not None:
            self._step = int(step)
        if logs:
            self._logs = {**self._logs, **numeric_logs(logs)}
        self._phase = "finished"
        if self._writer is not None:
            self._write_node(time.monotonic())
        if self._window:
            self._record_step_times(epoch_position(self._step, self.steps_per_epoch)[0])
        if self._writer is None:
            return
        if self.is_chief:
            self._write_progress(time.monotonic())
        self.flush()

    @contextlib.contextmanager
    def phase(self, name: str):
        """Report that this node is in phase ``name`` while the block runs (chief: written at once).

        The stall watchdog (:mod:`airflow_tfos.runtime.driver.watchdog`) does not fire while a node is in a quiet
        phase: ``"checkpointing"``, ``"exporting"``, ``"restoring"``, ``"evaluating"``, ``"waiting_for_data"``.
        """
        before, self._phase = self._phase, name
        self._phase_changed()
        try:
            yield self
        finally:
            self._phase = before
            self._phase_changed()

    def _phase_changed(self) -> None:
        if self._writer is None:
            return
        self._write_node(time.monotonic())
        if self.is_chief:
            self._write_progress(time.monotonic())

    def _write_node(self, now: float) -> None:
        self._last_node_write = now
        record = {
            "worker": self.worker,
            "step": self._step if self._phase != "starting" else None,
            "phase": self._phase,
            "attempt": getattr(self.ctx, "attempt", 0),
            "run_id": os.environ.get("AIRFLOW_TFOS_CLUSTER_ID"),
            "time": time.time(),
        }
        self._writer.node_progress(self.worker, record)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything recorded so far is written."""
        return self._writer.flush(timeout) if self._writer is not None else True

    # --- what is written ------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The progress record (what progress.json holds)."""
        total = self.total_steps
        epoch, epoch_pct = epoch_position(self._step, self.steps_per_epoch)
        rate = self.steps_per_sec()
        record: dict[str, Any] = {
            "step": self._step,
            "total_steps": total,
            "epoch": epoch,
            "epochs": self.epochs,
            "epoch_pct": epoch_pct,
            "steps_per_epoch": self.steps_per_epoch,
            "loss": self._logs.get("loss"),
            "metrics": dict(self._logs),
            "steps_per_sec": round(rate, 3) if rate is not None else None,
            "global_batch_size": self.global_batch_size,
            "examples_per_sec": round(rate * self.global_batch_size, 1) if rate and self.global_batch_size else None,
            "eta_secs": round(max(0, total - self._step) / rate, 1) if rate and total is not None else None,
            "elapsed_secs": round(time.time() - self._started_wall, 1) if self._started_wall else 0.0,
            "finished": total is not None and self._step >= total,
            "attempt": getattr(self.ctx, "attempt", 0),
            "run_id": os.environ.get("AIRFLOW_TFOS_CLUSTER_ID"),
            "worker": self.worker,
            "phase": self._phase,
            "time": time.time(),
        }
        if total is not None and self._step >= total:
            record["eta_secs"] = 0.0
        return record

    def steps_per_sec(self) -> float | None:
        """Steps per second over the last ``RATE_WINDOW_SECS`` (None before two steps were seen)."""
        if len(self._rate) < 2:
            return None
        (t0, s0), (t1, s1) = self._rate[0], self._rate[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 and s1 > s0 else None

    def _point_due(self, now: float) -> bool:
        if self._last_point is None:
            return True
        every = self.history_every
        if every is None and self.total_steps:
            every = max(1, self.total_steps // HISTORY_POINTS)
        if every is not None:
            return self._step - self._last_point[1] >= every
        return now - self._last_point[0] >= HISTORY_SECS

    def _with_logs(self, logs: dict[str, float | None]) -> dict[str, Any]:
        epoch, _ = epoch_position(self._step, self.steps_per_epoch)
        base = {"step": self._step, "epoch": epoch, "attempt": getattr(self.ctx, "attempt", 0)}
        return {**{k: v for k, v in logs.items() if k not in _RESERVED}, **base}

    def _record_step_times(self, epoch: int | None) -> None:
        window, self._window = self._window, []
        first, self._first_step_secs = self._first_step_secs, None
        if not window or self._writer is None:
            return
        self._event(
            "worker_steps",
            {
                "worker": self.worker,
                "job_name": self.ctx.job_name,
                "task_index": self.ctx.task_index,
                "executor_id": self.ctx.executor_id,
                "attempt": getattr(self.ctx, "attempt", 0),
                "epoch": epoch,
                "step": self._step,
                "steps": len(window),
                "mean_secs": round(sum(window) / len(window), 6),
                "p50_secs": round(percentile(window, 50), 6),
                "p90_secs": round(percentile(window, 90), 6),
                "max_secs": round(max(window), 6),
                "first_step_secs": None if first is None else round(first, 6),
            },
        )

    def _write_progress(self, now: float) -> None:
        self._last_write = now
        record = self.snapshot()
        log.debug("progress: step %s of %s, loss %s", record["step"], record["total_steps"], record["loss"])
        self._writer.progress(record)

    def _event(self, kind: str, fields: dict[str, Any]) -> None:
        cluster_id = os.environ.get("AIRFLOW_TFOS_CLUSTER_ID")  # written as the records' run_id
        self._writer.event(kind, {**fields, "run_id": cluster_id} if cluster_id else fields)


_TRACKERS: weakref.WeakSet[ProgressTracker] = weakref.WeakSet()


@contextlib.contextmanager
def node_phase(name: str) -> Iterator[None]:
    """Every progress tracker of this process reports phase ``name`` while the block runs (see
    :meth:`ProgressTracker.phase`); the checkpointer and :func:`export_model` use it around their saves."""
    with contextlib.ExitStack() as stack:
        for tracker in list(_TRACKERS):
            stack.enter_context(tracker.phase(name))
        yield


def _fed_batch_size(ctx) -> int | None:
    share = (getattr(ctx, "feed_shares", None) or {}).get("train")
    if share is None or share.feed is None:
        return None
    return share.feed.batch_size * max(1, ctx.num_workers)
