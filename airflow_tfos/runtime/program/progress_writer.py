"""The thread that writes a node's progress and events into its run directory, off the training loop.

:class:`~airflow_tfos.runtime.program.progress.ProgressTracker` hands each ``progress.json`` and event to a
:class:`ProgressWriter`, which writes them in order on one daemon thread (a slow file system never holds up
a training step; a failed write only logs a warning); the node process calls :func:`flush_all` before it exits.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import weakref
from typing import Any

from airflow_tfos.shared.rundir import RunDir

log = logging.getLogger(__name__)

_WRITERS: weakref.WeakSet[ProgressWriter] = weakref.WeakSet()


class ProgressWriter:
    """Writes progress.json and events in order on one daemon thread; only the newest progress is kept."""

    def __init__(self, rundir: RunDir):
        self.rundir = rundir
        self._cond = threading.Condition()
        self._events: list[tuple[str, dict[str, Any]]] = []
        self._progress: dict[str, Any] | None = None
        self._node: tuple[str, dict[str, Any]] | None = None
        self._busy = False
        self._thread: threading.Thread | None = None
        _WRITERS.add(self)

    def progress(self, record: dict[str, Any]) -> None:
        with self._cond:
            self._progress = record
            self._wake()

    def node_progress(self, node: str, record: dict[str, Any]) -> None:
        """This node's step and phase for ``nodes/<node>.json`` (only the newest is kept)."""
        with self._cond:
            self._node = (node, record)
            self._wake()

    def event(self, kind: str, fields: dict[str, Any]) -> None:
        with self._cond:
            self._events.append((kind, fields))
            self._wake()

    def _wake(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="airflow-tfos-progress", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _idle(self) -> bool:
        return not self._events and self._progress is None and self._node is None and not self._busy

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._events or self._progress is not None or self._node is not None)
                events, self._events = self._events, []
                progress, self._progress = self._progress, None
                node, self._node = self._node, None
                self._busy = True
            try:  # several at hand (a slow file system, an epoch end): one batch file, one request
                if len(events) > 1:
                    self.rundir.add_events(events)
                elif events:
                    self.rundir.add_event(events[0][0], **events[0][1])
            except Exception as exc:  # best effort: progress must never stop training
                counts = collections.Counter(kind for kind, _ in events)
                what = ", ".join(f"{n} {kind} events" if n > 1 else f"{kind} event" for kind, n in counts.items())
                log.warning("cannot record %s in %s: %s", what, self.rundir.uri, exc)
            if progress is not None:
                try:
                    self.rundir.write_progress(progress)
                except Exception as exc:
                    log.warning("cannot write progress to %s: %s", self.rundir.uri, exc)
            if node is not None:
                try:
                    self.rundir.write_node_progress(*node)
                except Exception as exc:
                    log.warning("cannot write node progress to %s: %s", self.rundir.uri, exc)
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything handed over is written; False if ``timeout`` ran out first."""
        with self._cond:
            return self._cond.wait_for(self._idle, timeout)


def flush_all(timeout: float = 30.0) -> None:
    """Wait for every tracker's pending writes (the node process calls it before it exits)."""
    deadline = time.monotonic() + timeout
    for writer in list(_WRITERS):
        if not writer.flush(max(0.0, deadline - time.monotonic())):
            log.warning("progress writes to %s did not finish within %.0f s", writer.rundir.uri, timeout)
