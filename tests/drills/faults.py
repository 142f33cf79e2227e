"""Watch a DAG run's training from outside, and do one thing to it at a chosen step.

A :class:`RunWatch` follows one run directory and the local backend's applications working on it (as
an operator on the machine would: the run directory, ``ps``, ``kill``), records what it saw, and once
the run has published a checkpoint at ``at_step`` or later, does its action: kill the Spark driver,
kill an executor JVM, or mark the task failed through the REST API.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil

from airflow_tfos.hooks.backends.local_tracker import LocalBackend
from airflow_tfos.shared.rundir import RunDir

#: Seconds between two looks.
POLL_SECS = 0.25
#: How Spark 4 reports the port of an application's UI in the driver's log.
_SPARK_UI_PORT = re.compile(r"Successfully started service 'SparkUI' on port (\d+)")


@dataclass
class Sample:
    """One look at the run: when, which application was live, its checkpoint and training step."""

    time: float
    app_id: str | None
    checkpoint: int
    progress: int | None


@dataclass
class Action:
    """What the watch did, and the state of the run when it did it."""

    kind: str
    time: float
    app_id: str
    checkpoint: int
    progress: int | None
    pids: list[int] = field(default_factory=list)
    detail: str = ""


def progress_step(run_dir: str) -> int | None:
    """The chief's last trained step, as ``tests.support.programs:spec_training`` records it after each batch."""
    try:
        with open(os.path.join(run_dir, "progress-chief-0.json")) as handle:
            return int(json.load(handle)["step"])
    except (OSError, ValueError, KeyError):
        return None


def command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


def spark_ui_port(log_path: str) -> int | None:
    """The port of the application's own UI, from its spark-submit log."""
    try:
        with open(log_path, errors="replace") as handle:
            found = _SPARK_UI_PORT.search(handle.read(512 * 1024))
    except OSError:
        return None
    return int(found.group(1)) if found else None


def application_names(ui_url: str) -> list[str]:
    """The applications a Spark UI serves (its REST API); empty if it does not answer as an application UI."""
    try:
        with urllib.request.urlopen(f"{ui_url.rstrip('/')}/api/v1/applications", timeout=5) as reply:
            return [app.get("name", "") for app in json.loads(reply.read())]
    except (OSError, ValueError):
        return []


class RunWatch(threading.Thread):
    """Follow the training in ``run_dir``; at checkpoint ``at_step`` or later, call ``action`` once.

    :param run_dir: the run directory the DAG run trains in.
    :param tracker_dir: the local backend's tracker directory.
    :param at_step: act once the latest published checkpoint is at this step or later.
    :param action: ``action(watch, app_id)`` does the deed and returns an :class:`Action`; None: only watch.
    :param ready: another condition that must hold before acting (e.g. the task is deferred).
    """

    def __init__(
        self,
        run_dir: str,
        tracker_dir: str,
        *,
        at_step: int = 0,
        action: Callable[[RunWatch, str], Action] | None = None,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__(daemon=True, name=f"watch {os.path.basename(run_dir)}")
        self.run_dir = run_dir
        self.rundir = RunDir(run_dir)
        self.backend = LocalBackend(tracker_dir)
        self.at_step = at_step
        self.action = action
        self.ready = ready
        self.samples: list[Sample] = []
        self.done: Action | None = None
        self.error: str | None = None
        #: For every application seen live: the tracking URL the backend gave, the port of its own UI,
        #: and the applications that URL serves.
        self.ui: dict[str, dict[str, Any]] = {}
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def records(self) -> list[dict[str, Any]]:
        """The local backend's records of the applications working on this run directory, oldest first."""
        return [r for r in self.backend.records() if r.get("run_dir") == self.run_dir]

    def live_app(self) -> str | None:
        for record in reversed(self.records()):
            if not self.backend.get_state(record["app_id"]).is_terminal:
                return record["app_id"]
        return None

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                self._look()
                self._halt.wait(POLL_SECS)
        except Exception as exc:  # reported by the test that reads the watch
            self.error = f"{type(exc).__name__}: {exc}"

    def _look(self) -> None:
        app_id = self.live_app()
        latest = self.rundir.latest_checkpoint()
        step = latest.step if latest else 0
        sample = Sample(time.time(), app_id, step, progress_step(self.run_dir))
        self.samples.append(sample)
        if app_id is None:
            return
        seen = self.ui.get(app_id, {})
        if not (seen.get("tracking_url") and seen.get("spark_ui_port") and seen.get("serves")):
            self._look_at_ui(app_id)  # again until the UI answers: it may start after its port is logged
        due = self.done is None and self.action is not None and latest is not None and step >= self.at_step
        if due and (self.ready is None or self.ready()):
            self.done = self.action(self, app_id)

    def _look_at_ui(self, app_id: str) -> None:
        state = self.backend.get_state(app_id)
        record = self.backend.record(app_id)
        port = spark_ui_port(record["log"])
        seen = {**self.ui.get(app_id, {}), "name": record.get("name")}  # what was seen stays once it is gone
        if port:
            seen["spark_ui_port"] = port
        if state.tracking_url:
            seen["tracking_url"] = state.tracking_url
            seen["serves"] = application_names(state.tracking_url) or seen.get("serves", [])
        self.ui[app_id] = seen

    # --- what happened ----------------------------------------------------------------------------

    def live_between(self, app_id: str) -> tuple[float, float] | None:
        """First and last time the application was seen live."""
        times = [s.time for s in self.samples if s.app_id == app_id]
        return (times[0], times[-1]) if times else None

    def progress_while(self, app_id: str) -> list[int]:
        """The training steps seen while ``app_id`` was live (in order)."""
        return [s.progress for s in self.samples if s.app_id == app_id and s.progress is not None]


def _deed(watch: RunWatch, app_id: str, kind: str, target: psutil.Process | None, pids: list[int]) -> Action:
    latest = watch.rundir.latest_checkpoint()
    progress = progress_step(watch.run_dir)
    if target is None:
        return Action(kind, time.time(), app_id, latest.step if latest else 0, progress, pids, "no target found")
    os.kill(target.pid, signal.SIGKILL)
    return Action(kind, time.time(), app_id, latest.step if latest else 0, progress, pids, command_line(target)[:300])


def kill_driver(watch: RunWatch, app_id: str) -> Action:
    """SIGKILL the application's driver JVM (spark-submit in client mode runs the driver)."""
    processes = watch.backend.processes(app_id)
    drivers = [p for p in processes if "org.apache.spark.deploy.SparkSubmit" in command_line(p)]
    return _deed(watch, app_id, "kill driver", drivers[0] if drivers else None, [p.pid for p in processes])


def kill_executor(watch: RunWatch, app_id: str) -> Action:
    """SIGKILL one of the application's executor JVMs (and so the TF node it hosts)."""
    processes = watch.backend.processes(app_id)
    executors = [p for p in processes if "CoarseGrainedExecutorBackend" in command_line(p)]
    return _deed(watch, app_id, "kill executor", executors[0] if executors else None, [p.pid for p in processes])


def mark_failed(mark: Callable[[], Any]) -> Callable[[RunWatch, str], Action]:
    """An action that marks the task failed (``mark`` calls the REST API)."""

    def deed(watch: RunWatch, app_id: str) -> Action:
        latest = watch.rundir.latest_checkpoint()
        pids = [p.pid for p in watch.backend.processes(app_id)]
        answer = mark()
        return Action(
            "mark failed",
            time.time(),
            app_id,
            latest.step if latest else 0,
            progress_step(watch.run_dir),
            pids,
            json.dumps(answer, default=str)[:300],
        )

    return deed
