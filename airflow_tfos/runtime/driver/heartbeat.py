"""The driver's watch over a run: it beats ``status.json`` and turns a stop request into a stop.

While the TF cluster runs, a daemon thread writes the run's state, the latest checkpoint step and the
chief's progress into ``status.json`` every few seconds (and outlives an outage of the storage), and looks
for a stop request meant for this application: then it stops the cluster after the next checkpoint, or
after the spec's ``stop_grace_secs``. Every minute it also folds the run's event files into a batch file
once there are a few hundred of them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from airflow_tfos.runtime.driver.launcher import TFClusterRun
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import RunSpec

log = logging.getLogger("airflow_tfos.driver")

#: When this driver process started: an unnamed stop request written before it was meant for an older one.
_STARTED = time.time()
#: How often the driver folds event files into a batch file while it runs, and from how many files on.
FOLD_EVERY_SECS = 60.0
FOLD_MIN_FILES = 200


class DriverWatch(threading.Thread):
    """Beats status.json and turns a stop request into a stop at the next checkpoint (or the grace)."""

    def __init__(self, rundir: RunDir, spec: RunSpec, base: dict[str, Any], interval: float):
        super().__init__(name="airflow-tfos-status", daemon=True)
        self.rundir, self.spec, self.base, self.interval = rundir, spec, base, interval
        self.tf_run: TFClusterRun | None = None
        self.cluster_ids: set[str] = set()
        self.stopping = threading.Event()
        self.finished = threading.Event()
        self.lock = threading.Lock()
        self._stop_seen: tuple[float, int] | None = None
        #: set when a serving driver stopped itself after ``serve_idle_secs`` without a feed request
        self.idle = False
        self._folded_at = time.monotonic()
        self._folding = threading.Thread()  # none yet (never started: not alive)

    def attach(self, tf_run: TFClusterRun) -> None:
        """Watch this TF cluster (stop requests cancel it; its progress goes into status.json)."""
        self.cluster_ids.add(tf_run.cluster_id)
        self.tf_run = tf_run

    def step(self) -> int:
        latest = self.rundir.latest_checkpoint()
        return latest.step if latest else 0

    def progress(self) -> dict[str, Any] | None:
        """The chief's progress.json, when it was written by a TF cluster of this application."""
        record = self.rundir.read_progress()
        if record and record.get("run_id") in self.cluster_ids:
            return record
        return None

    def stop_request(self) -> dict[str, Any] | None:
        """A stop request meant for this application: one naming it (its Spark id, or the local backend's id
        in ``$AIRFLOW_TFOS_LOCAL_APP``), or an unnamed one written after this driver started."""
        ids = {str(self.base.get("application_id")), os.environ.get("AIRFLOW_TFOS_LOCAL_APP", "")} - {"", "None"}
        return self.rundir.stop_requested(application_ids=frozenset(ids), started=_STARTED)

    def run(self) -> None:
        outage: float | None = None  # when the storage stopped answering, while it does not
        while not self.finished.wait(self.interval):
            try:
                self.beat()
            except Exception as exc:  # any storage error: the heartbeat must outlive an outage
                if outage is None:
                    outage = time.monotonic()
                    log.warning(
                        "cannot update status.json in %s (%s: %s); retrying every %.0f s",
                        self.rundir.uri,
                        type(exc).__name__,
                        exc,
                        self.interval,
                    )
                else:
                    log.debug("status.json still cannot be updated: %s", exc)
                continue
            if outage is not None:
                log.info("status.json is updated again after %.0f s", time.monotonic() - outage)
                outage = None
            self.fold_events()

    def fold_events(self, min_files: int = FOLD_MIN_FILES) -> None:
        """Now and then, fold the run's event files into a batch file (readers then open a few files, not
        thousands: :mod:`~airflow_tfos.shared.event_log`); a failure only waits for the next time."""
        if time.monotonic() - self._folded_at < FOLD_EVERY_SECS or self._folding.is_alive():
            return
        self._folded_at = time.monotonic()
        # On its own thread: a fold of a few hundred files on HDFS takes seconds, status.json must keep beating.
        self._folding = threading.Thread(target=self._fold, args=(min_files,), name="airflow-tfos-fold", daemon=True)
        self._folding.start()

    def _fold(self, min_files: int) -> None:
        try:
            folded = self.rundir.compact_events(min_files)
        except Exception as exc:
            log.warning("cannot fold the event files of %s: %s", self.rundir.uri, exc)
            return
        if folded:
            log.info("folded %d event files into a batch file", folded)

    def beat(self) -> None:
        step = self.step()
        if self._stop_seen is None and self.stop_request():
            self._stop_seen = (time.monotonic(), step)
            self.stopping.set()
            log.info("stop requested: stopping after the next checkpoint (at most %.0f s)", self.spec.stop_grace_secs)
        if self._stop_seen is not None:
            since, at_step = self._stop_seen
            due = step > at_step or time.monotonic() - since >= self.spec.stop_grace_secs
            if due and self.tf_run is not None and not self.tf_run.done():
                log.info("stopping the TF cluster at checkpoint step %d", step)
                self.tf_run.cancel()
            self._write("STOPPING", step)
            return
        self._write("RUNNING", step)

    def _write(self, state: str, step: int) -> None:
        progress = self.progress()
        extra = {"progress": progress} if progress is not None else {}
        with self.lock:
            if not self.finished.is_set():  # the final state, once written, is never overwritten
                self.rundir.write_status(state, **self.base, step=step, **extra)

    def finish(self, state: str, **fields: Any) -> None:
        """Stop beating and write the final state."""
        with self.lock:
            self.finished.set()
            progress = self.progress()
            extra = {"progress": progress} if progress is not None else {}
            self.rundir.write_status(state, **self.base, step=self.step(), **extra, **fields)
