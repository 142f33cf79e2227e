"""Every TF node ended, but Spark's barrier stage did not: an executor stopped answering.

Each node's process records its end in the run directory when ``main_fun`` has returned and its result is
written (``ended`` in ``nodes/<node>.json``, :meth:`~airflow_tfos.shared.rundir.RunDir.mark_node_ended`). Spark
ends the stage a second or two later, once every task has handed its outcome back. A task whose executor JVM
hangs (frozen, starved, its host half cut off) never does: its TF process is a separate process and trains on
to the end, so no step stalls and no node fails, and the stage would wait for Spark's heartbeat timeout
(``spark.network.timeout``, 120 s by default) to declare the executor lost.

:class:`EndWatch` is the driver's thread that notices it. Once every node that decides the run's end (the
chief, or every training node, :func:`~airflow_tfos.runtime.node.cluster.decider_ids`) has recorded its end and
the stage still runs :data:`ENDED_GRACE_SECS` later, it calls back; the launcher then cancels the attempt, drops
the executors that do not end their tasks (:mod:`~airflow_tfos.runtime.driver.eviction`), and a fresh TF cluster
restores the last checkpoint, which the old one wrote to the end, and returns the program's result (Spark's
result of a barrier stage comes back only when every task ended, so the old cluster's cannot). The grace is
measured on the driver's clock, from when it first saw every end, so hosts' clocks do not matter.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

log = logging.getLogger(__name__)

#: Seconds the stage may take to end after the driver saw every deciding node's end before the attempt is
#: cancelled and its unanswering executors dropped (a task ends a second or two after its node's process).
ENDED_GRACE_SECS = 10.0
#: Seconds between two reads of the nodes' records.
POLL_SECS = 2.0


@dataclasses.dataclass(frozen=True)
class HungStage:
    """Every deciding node ended (``ended``: node -> the time its record gives), the stage did not within
    ``grace`` seconds."""

    ended: dict[str, float]
    grace: float

    def message(self) -> str:
        nodes = ", ".join(sorted(self.ended))
        return (
            f"every TF node ended ({nodes}) but Spark's stage did not within {self.grace:g} s: an executor does not "
            "answer (its JVM hangs or its host is cut off); the attempt was cancelled and a fresh TF cluster "
            "returns the result from the latest checkpoint"
        )


def ended_nodes(records: Iterable[dict[str, Any] | None], cluster_id: str, attempt: int) -> dict[str, float]:
    """The nodes of ``cluster_id``'s ``attempt`` whose record says they ended, with the time each did."""
    found = {}
    for record in records:
        if not record or record.get("run_id") != cluster_id or record.get("attempt", 0) != attempt:
            continue
        if record.get("ended") is not None and record.get("worker"):
            found[str(record["worker"])] = float(record["ended"])
    return found


class EndWatch(threading.Thread):
    """Polls the nodes' records; calls ``on_hung`` once when every node of ``deciders`` ended ``grace`` seconds
    ago (on this process's clock) and :meth:`stop` was not called (the stage did not end).

    :param read: returns the nodes' current progress records (``RunDir.node_progress``).
    :param deciders: the labels of the nodes whose end ends the run (``chief:0``, ``worker:1``...).
    """

    def __init__(
        self,
        read: Callable[[], Iterable[dict[str, Any] | None]],
        cluster_id: str,
        attempt: int,
        deciders: Collection[str],
        on_hung: Callable[[HungStage], None],
        *,
        grace: float = ENDED_GRACE_SECS,
        poll: float = POLL_SECS,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__(name="airflow-tfos-end-watch", daemon=True)
        self.read, self.on_hung, self.clock = read, on_hung, clock
        self.cluster_id, self.attempt, self.deciders = cluster_id, attempt, frozenset(deciders)
        self.grace, self.poll = grace, poll
        self.done = threading.Event()
        self.all_ended_at: float | None = None

    def stop(self) -> None:
        self.done.set()

    def check(self) -> HungStage | None:
        """Read the records once; a :class:`HungStage` when the grace has run out."""
        try:
            ended = ended_nodes(self.read(), self.cluster_id, self.attempt)
        except Exception as exc:  # a storage hiccup: look again next poll
            log.debug("cannot read the nodes' records: %s", exc)
            return None
        if not self.deciders or not self.deciders <= ended.keys():
            return None
        now = self.clock()
        if self.all_ended_at is None:
            self.all_ended_at = now
        if now - self.all_ended_at < self.grace:
            return None
        return HungStage({node: ended[node] for node in sorted(self.deciders)}, self.grace)

    def run(self) -> None:
        while not self.done.wait(self.poll):
            hung = self.check()
            if hung is not None and not self.done.is_set():
                self.done.set()
                log.error("TF cluster %s: %s", self.cluster_id, hung.message())
                self.on_hung(hung)
                return
