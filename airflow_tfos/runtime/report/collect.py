"""What the training report reads from a run directory (:func:`collect`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_tfos.runtime.errors import ReportError
from airflow_tfos.shared.rundir import RunDir

#: Event kinds with many events each: counted in the event table, not listed.
BULK_KINDS = frozenset({"step_metrics", "metrics", "worker_steps", "feed", "node_memory"})
#: Event fields that are bookkeeping, not metrics.
BOOKKEEPING = frozenset({"kind", "time", "step", "epoch", "attempt", "run_id", "worker"})


@dataclass
class RunRecord:
    """Everything the report reads from a run directory."""

    uri: str
    spec: dict[str, Any]
    status: dict[str, Any]
    events: list[dict[str, Any]]
    checkpoints: list[dict[str, Any]]
    export: dict[str, Any] | None
    progress: dict[str, Any] | None
    #: fingerprint.json: the input's listing and the code's hash when the run was submitted
    fingerprint: dict[str, Any] | None = None

    def of(self, *kinds: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("kind") in kinds]


def collect(rundir: RunDir) -> RunRecord:
    """Read what the report shows from ``rundir``."""
    spec = rundir.read_spec() or {}
    status = rundir.read_status() or {}
    events = sorted(rundir.events(), key=lambda e: e.get("time", 0))
    if not spec and not status and not events:
        raise ReportError(f"{rundir.uri} has no spec.json, status.json or events: it is not a run directory")
    return RunRecord(
        uri=rundir.uri,
        spec=spec,
        status=status,
        events=events,
        checkpoints=rundir.checkpoint_history(),
        export=rundir.export_success(),
        progress=rundir.read_progress(),
        fingerprint=rundir.read_fingerprint(),
    )
