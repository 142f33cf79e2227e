"""The run directory from the Airflow side: local paths, or HDFS through a ``webhdfs`` connection."""

from __future__ import annotations

import asyncio
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

from airflow_tfos.shared.events import ATTEMPT_FAILED
from airflow_tfos.shared.rundir import RUN_TERMINAL_STATES, RunDir
from airflow_tfos.shared.storage import Storage, storage_for
from airflow_tfos.shared.storage.webhdfs_config import HDFS_SCHEMES


def progress_line(status: dict[str, Any] | None) -> str | None:
    """One log line of training progress from status.json, or None when there is nothing to say.

    E.g. ``state RUNNING, checkpoint step 100, step 120/400 (30%), epoch 2/5 (40% of epoch), loss 0.4231,
    35.2 steps/s, 2253 examples/s, ETA 8 s`` (``progress`` is the chief's progress.json, see
    :mod:`airflow_tfos.runtime.program.progress`).
    """
    if not status:
        return None
    progress = status.get("progress") or {}
    parts = [f"state {status.get('state')}"]
    if status.get("step"):  # none before the first checkpoint, and never for batch inference
        parts.append(f"checkpoint step {status['step']}")
    if progress.get("step") is not None:
        total = progress.get("total_steps")
        parts.append(
            f"step {progress['step']}" + (f"/{total} ({100.0 * progress['step'] / total:.0f}%)" if total else "")
        )
    if progress.get("epoch") is not None:
        epoch = f"epoch {progress['epoch']}"
        if progress.get("epochs"):
            epoch += f"/{progress['epochs']}"
        if progress.get("epoch_pct") is not None:
            epoch += f" ({progress['epoch_pct']:.0f}% of epoch)"
        parts.append(epoch)
    if progress.get("loss") is not None:
        parts.append(f"loss {progress['loss']:.4f}")
    if progress.get("steps_per_sec"):
        parts.append(f"{progress['steps_per_sec']:.1f} steps/s")
    if progress.get("examples_per_sec"):
        parts.append(f"{progress['examples_per_sec']:.0f} examples/s")
    if progress.get("eta_secs") is not None:
        parts.append(f"ETA {progress['eta_secs']:.0f} s")
    return ", ".join(parts)


class RunWatch:
    """What a task waiting on a run logs: the progress line whenever it changes, and each failed attempt
    of the TF cluster (a lost node, and whether a new attempt resumes from the latest checkpoint) once."""

    def __init__(self) -> None:
        self.last_line: str | None = None
        self.seen: set[tuple[Any, Any]] = set()
        self.status: dict[str, Any] | None = None  # the latest status.json seen, for a PollPacer

    def lines(self, status: dict[str, Any] | None, failures: list[dict[str, Any]]) -> list[str]:
        self.status = status
        out = []
        for event in failures:
            key = (event.get("run_id"), event.get("attempt"))
            if key in self.seen:
                continue
            self.seen.add(key)
            then = (
                "a new attempt resumes from the latest checkpoint"
                if event.get("retrying")
                else "no attempts are left: the run fails"
            )
            out.append(f"TF cluster attempt {event.get('attempt')} failed: {event.get('reason')}; {then}")
        line = progress_line(status)
        if line and line != self.last_line:
            out.append(line)
            self.last_line = line
        return out


class PollPacer:
    """How long a task waiting on a training run sleeps before its next look.

    ``poll_interval`` while the run's end is further away than that, or unknown. When the chief's progress
    (status.json's ``progress``: ``time`` and ``eta_secs``) puts the last step closer, the next look is
    one second after it; once that moment has passed (or the run says it finished), the looks come after
    1, 2, 4... seconds, never more than ``poll_interval`` apart, until the application ends. So a run is
    seen to end within seconds of its export, not up to a whole interval later, at the cost of a handful
    of extra looks per run.
    """

    FIRST_SECS = 1.0

    def __init__(self, poll_interval: float) -> None:
        self.poll_interval = poll_interval
        self._late = 0  # looks since the expected end

    def next_secs(self, status: dict[str, Any] | None, now: float) -> float:
        progress = (status or {}).get("progress") or {}
        at, eta = progress.get("time"), progress.get("eta_secs")
        if progress.get("finished") or (status or {}).get("state") in RUN_TERMINAL_STATES:
            left = 0.0
        elif at is None or eta is None:
            self._late = 0
            return self.poll_interval
        else:
            left = float(at) + float(eta) - now
        if left > 0:
            self._late = 0
            return max(self.FIRST_SECS, min(self.poll_interval, left + self.FIRST_SECS))
        secs = min(self.poll_interval, self.FIRST_SECS * 2**self._late)
        self._late += 1
        return secs


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


class RunDirHook(BaseHook):
    """Read and write one run directory (spec, status, checkpoints, export, feeds, stop requests).

    :param run_dir: a local path, ``file://``, ``hdfs://`` or ``webhdfs://`` URI.
    :param webhdfs_conn_id: the ``webhdfs`` connection for HDFS run directories (default
        ``webhdfs_default``); unused for local ones.
    """

    def __init__(self, run_dir: str, *, webhdfs_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_dir = run_dir
        self.webhdfs_conn_id = webhdfs_conn_id

    @cached_property
    def storage(self) -> Storage:
        if _scheme(self.run_dir) in HDFS_SCHEMES:
            from airflow_tfos.hooks.webhdfs_connection import DEFAULT_CONN_ID, storage_from_connection

            return storage_from_connection(self.webhdfs_conn_id or DEFAULT_CONN_ID)
        return storage_for(self.run_dir)

    @cached_property
    def run_dir_contents(self) -> RunDir:
        """The run directory's contents: what ``run_dir`` (its URI) holds, read and written as the contract says."""
        return RunDir(self.run_dir, storage=self.storage)

    @property
    def rundir(self) -> RunDir:
        """The former name of :attr:`run_dir_contents` (kept for code written against it)."""
        return self.run_dir_contents

    async def aread_status(self) -> dict[str, Any] | None:
        """status.json, without blocking the event loop (for triggers)."""
        return await asyncio.to_thread(self.run_dir_contents.read_status)

    def watch_lines(self, watch: RunWatch) -> list[str]:
        """What a task waiting on the run should log now (see :class:`RunWatch`); storage errors are a line too."""
        try:
            return watch.lines(self.run_dir_contents.read_status(), self.run_dir_contents.events(ATTEMPT_FAILED))
        except Exception as exc:
            return [f"cannot read the run's status: {exc}"]

    async def awatch_lines(self, watch: RunWatch) -> list[str]:
        """:meth:`watch_lines`, without blocking the event loop (for triggers)."""
        return await asyncio.to_thread(self.watch_lines, watch)

    async def acheck(self, condition: dict[str, Any]) -> dict[str, Any] | None:
        """:meth:`check`, without blocking the event loop (for triggers)."""
        return await asyncio.to_thread(self.check, condition)

    # --- conditions that sensors and triggers wait for -------------------------------------------------

    def check(self, condition: dict[str, Any]) -> dict[str, Any] | None:
        """What ``condition`` waits for, once it is there (else None). See :func:`check_condition`."""
        return check_condition(self.run_dir_contents, condition)


def check_condition(rundir: RunDir, condition: dict[str, Any]) -> dict[str, Any] | None:
    """Evaluate one wait condition on a run directory; return its result once met, else None.

    ``{"checkpoint": {"min_step": N, "newer_than": unix_time}}``: the latest *published* checkpoint, if
    it satisfies both bounds (a half-written one is never named by the manifest).
    ``{"export": {}}``: the export's ``_SUCCESS`` record (with the export's path).
    ``{"feed": "<feed id>"}``: the feed's done record.
    ``{"ready": {}}``: the driver is up and serving feed requests.
    """
    if "checkpoint" in condition:
        bounds = condition["checkpoint"] or {}
        latest = rundir.latest_checkpoint()
        if latest is None:
            return None
        if bounds.get("min_step") is not None and latest.step < int(bounds["min_step"]):
            return None
        if bounds.get("newer_than") is not None and (latest.time or 0) <= float(bounds["newer_than"]):
            return None
        return {"path": latest.path, "step": latest.step, "epoch": latest.epoch, "time": latest.time}
    if "export" in condition:
        success = rundir.export_success()
        return {**success, "path": rundir.path("export")} if success else None
    if "feed" in condition:
        return rundir.feed_result(str(condition["feed"]))
    if "ready" in condition:
        status = rundir.read_status() or {}
        if status.get("serving") and status.get("state") == "RUNNING":
            return {"application_id": status.get("application_id"), "step": status.get("step", 0)}
        return None
    raise ValueError(f"unknown wait condition {condition!r}: use checkpoint, export, feed or ready")
