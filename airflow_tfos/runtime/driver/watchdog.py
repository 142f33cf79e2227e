"""The progress watchdog: a run whose training nodes stop advancing their global step is failed and retried.

Every training node reports its global step and what it is doing (its *phase*) through
:class:`~airflow_tfos.runtime.program.progress.ProgressTracker` (e.g. ``progress_callback``), into the run
directory's ``nodes/<node>.json``; :class:`StallWatchdog` judges those reports with no
I/O of its own (a clock is passed in, so it is tested without waiting), and :class:`StallMonitor` is the
driver's thread that feeds it from the run directory and, on a stall, hands a :class:`StallReport` to the
run (which cancels the barrier stage and starts a fresh TF cluster from the latest checkpoint).

The watchdog holds off:

- while any node is in a quiet phase (:data:`QUIET_PHASES`: saving a checkpoint, exporting, restoring,
  evaluating, waiting for the feed's first batch): other nodes wait on it in a synchronous strategy;
- for a node that has not reported a step yet (it is still starting: building the graph, reading data);
- altogether once a single step took longer than ``stall_timeout`` (the timeout is too short for this
  program: it is then off, and says so once in the log).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

#: Phase of a node that runs training steps: the only phase in which a node can stall.
TRAINING = "training"
#: Phases in which no step advances on purpose; while any node is in one, nothing is judged.
QUIET_PHASES = frozenset({"checkpointing", "exporting", "restoring", "evaluating", "waiting_for_data", "starting"})
#: All phases a node may report.
PHASES = QUIET_PHASES | {TRAINING, "finished"}


@dataclasses.dataclass(frozen=True)
class StalledNode:
    """One node that did not advance: its name, the last global step it reached and for how long."""

    node: str
    step: int
    secs: float


@dataclasses.dataclass(frozen=True)
class StallReport:
    """Why the watchdog fired: the stalled nodes and the timeout that ran out."""

    nodes: tuple[StalledNode, ...]
    timeout: float

    def message(self) -> str:
        named = ", ".join(f"{n.node} (last step {n.step}, {n.secs:.0f} s ago)" for n in self.nodes)
        return (
            f"training stalled: no node advanced its global step for {self.timeout:g} s: {named}; the attempt "
            "was cancelled and is retried from the latest checkpoint (raise stall_timeout if steps are this slow)"
        )


@dataclasses.dataclass
class _Node:
    step: int | None
    phase: str
    advanced: float  # when the step last advanced, or a quiet phase last ended


class StallWatchdog:
    """Decide from nodes' reports whether training stalled (pure logic: the caller brings the clock).

    :param timeout: seconds without any node advancing its global step before the run counts as stalled (the
        spec's ``stall_timeout``, checked where the spec was made).
    :param clock: the clock ``observe``/``check`` use when not given ``now`` (tests pass a fake one).
    """

    def __init__(self, timeout: float, clock: Callable[[], float] = time.monotonic):
        self.timeout = float(timeout)
        self.clock = clock
        self.nodes: dict[str, _Node] = {}
        self.longest_step = 0.0
        self.disabled = False

    def observe(self, node: str, step: int | None, phase: str = TRAINING, now: float | None = None) -> None:
        """``node`` reports its global ``step`` (None before its first) and its ``phase``."""
        now = self.clock() if now is None else now
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r} for {node}; one of {', '.join(sorted(PHASES))}")
        seen = self.nodes.get(node)
        if seen is None:
            self.nodes[node] = _Node(step, phase, now)
            return
        was_quiet = seen.phase in QUIET_PHASES
        if phase in QUIET_PHASES or was_quiet:
            seen.advanced = now  # a quiet phase is not a stall, and the clock starts again when it ends
        elif step is not None and (seen.step is None or step > seen.step):
            if seen.step is not None:
                self._step_took(now - seen.advanced)
            seen.advanced = now
        elif step is not None and step < seen.step:
            seen.advanced = now  # restored to an older checkpoint: a new start, not a stall
        seen.step = step if step is not None else seen.step
        seen.phase = phase
        if phase in QUIET_PHASES or was_quiet:
            # The others wait on this node (a checkpoint is a collective): their steps do not count as slow,
            # and their time without a step starts again when it is done.
            for other in self.nodes.values():
                other.advanced = now

    def _step_took(self, secs: float) -> None:
        self.longest_step = max(self.longest_step, secs)
        if secs > self.timeout and not self.disabled:
            self.disabled = True
            log.warning(
                "a training step took %.0f s, longer than stall_timeout=%g s: the stall watchdog is off for this run "
                "(raise stall_timeout above the longest step to keep it on)",
                secs,
                self.timeout,
            )

    def check(self, now: float | None = None) -> StallReport | None:
        """A report when no training node advanced for ``timeout`` seconds; None otherwise."""
        now = self.clock() if now is None else now
        if self.disabled or not self.nodes:
            return None
        if any(n.phase in QUIET_PHASES for n in self.nodes.values()):
            return None
        judged = {name: n for name, n in self.nodes.items() if n.phase == TRAINING and n.step is not None}
        if not judged or any(now - n.advanced < self.timeout for n in judged.values()):
            return None
        # Every node is stuck; the ones stuck longest are the cause (the others wait on them).
        oldest = min(n.advanced for n in judged.values())
        stalled = [
            StalledNode(name, int(n.step), now - n.advanced)
            for name, n in sorted(judged.items())
            if n.advanced - oldest < self.timeout / 2
        ]
        return StallReport(tuple(stalled), self.timeout)


def reports_from(records: Iterable[dict[str, Any] | None]) -> list[tuple[str, int | None, str]]:
    """``(node, step, phase)`` from progress records (``worker``, ``step``, ``phase`` fields)."""
    found = []
    for record in records:
        if not record or not record.get("worker"):
            continue
        step = record.get("step")
        phase = record.get("phase") or (TRAINING if step else "starting")
        found.append((str(record["worker"]), None if step is None else int(step), str(phase)))
    return found


class StallMonitor(threading.Thread):
    """The driver's thread: polls nodes' progress and calls ``on_stall`` once when the watchdog fires.

    :param read: returns the nodes' current progress records (one per node, or the chief's alone).
    :param timeout: ``stall_timeout`` in seconds.
    :param on_stall: called with the :class:`StallReport`; it cancels the attempt.
    :param poll: seconds between reads.
    """

    def __init__(
        self,
        read: Callable[[], Iterable[dict[str, Any] | None]],
        timeout: float,
        on_stall: Callable[[StallReport], None],
        poll: float | None = None,
    ):
        super().__init__(name="airflow-tfos-stall-watchdog", daemon=True)
        self.read, self.on_stall = read, on_stall
        self.watchdog = StallWatchdog(timeout)
        self.poll = poll if poll is not None else min(5.0, max(0.5, timeout / 10))
        self.done = threading.Event()

    def stop(self) -> None:
        self.done.set()

    def run(self) -> None:
        while not self.done.wait(self.poll):
            try:
                for node, step, phase in reports_from(self.read()):
                    self.watchdog.observe(node, step, phase if phase in PHASES else TRAINING)
            except Exception as exc:  # a storage hiccup: judge on what was seen, try again next poll
                log.debug("cannot read progress for the stall watchdog: %s", exc)
            report = self.watchdog.check()
            if report is not None:
                self.done.set()
                log.error("%s", report.message())
                self.on_stall(report)
                return
