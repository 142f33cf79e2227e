"""Where a TF cluster's launch spends its time: what each node records, and the breakdown made of it.

Each node's Spark task starts the node's process first (it imports TensorFlow and the program's module
while Spark runs the barrier and the nodes swap their ports), then hands it the cluster spec. Along the way
the node notes wall-clock times (``time.time()``, seconds):

``task_start``
    the barrier task began (in the Spark worker);
``started``
    the node's process began running Python (its interpreter is up);
``tf_imported``
    TensorFlow and the program were imported (None when the program does not import TensorFlow);
``barrier_start``, ``barrier_end``
    the task's port exchange (``allGather``) began and ended;
``main_started``
    the process had its cluster spec and called ``main_fun``.

The process writes them as a ``launch`` event in the run directory (when the run has one), and, when the
environment variable :data:`LAUNCH_TIMES_ENV` names a local directory, as ``launch-<executor>-<attempt>.json``
there (how the launch benchmark reads them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: Names a local directory where each node writes its launch times (a benchmark's channel).
LAUNCH_TIMES_ENV = "AIRFLOW_TFOS_LAUNCH_TIMES"

#: The phases of :func:`breakdown`, in order; they follow each other on the node's critical path.
PHASES = ("scheduling", "process start", "TF import", "barrier", "handover", "strategy built")

MARKS = ("task_start", "started", "tf_imported", "barrier_start", "barrier_end", "main_started")


def write_record(directory: str, record: dict) -> Path:
    """Write one node's launch times to ``directory`` (atomically); return the file."""
    target = Path(directory) / f"launch-{record['executor_id']}-{record.get('attempt', 0)}.json"
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, sort_keys=True))
    tmp.replace(target)
    return target


def read_records(directory: str) -> list[dict]:
    """Every node's launch times written to ``directory``, by executor id."""
    records = [json.loads(p.read_text()) for p in Path(directory).glob("launch-*.json")]
    return sorted(records, key=lambda r: (r.get("attempt", 0), r["executor_id"]))


def breakdown(called_at: float, record: dict, ready_at: float | None = None) -> dict[str, float]:
    """Split one node's launch, from the driver's call to ``ready_at``, into :data:`PHASES` (seconds).

    The phases are consecutive, so they sum to ``ready_at - called_at``:

    - scheduling: the driver's call until the barrier task began;
    - process start: until the node's Python process ran;
    - TF import: until TensorFlow and the program were imported;
    - barrier: what was left of the port exchange once the import was done (the exchange runs beside the
      process start and the import; :func:`barrier_seconds` gives its whole length);
    - handover: until ``main_fun`` was called with the cluster spec;
    - strategy built: until ``ready_at`` (when the program had built its strategy; ``main_started`` if None).

    :param called_at: when the driver called the launch (``time.time()``).
    :param record: the node's launch times (:data:`MARKS`).
    :param ready_at: when the program reported itself ready.
    """
    missing = [m for m in MARKS if m != "tf_imported" and record.get(m) is None]
    if missing:
        raise ValueError(f"the launch record of node {record.get('executor_id')} lacks {', '.join(missing)}")
    imported = record["tf_imported"] if record.get("tf_imported") is not None else record["started"]
    exchanged = max(record["barrier_end"], imported)
    ready = record["main_started"] if ready_at is None else ready_at
    return {
        "scheduling": record["task_start"] - called_at,
        "process start": record["started"] - record["task_start"],
        "TF import": imported - record["started"],
        "barrier": exchanged - imported,
        "handover": record["main_started"] - exchanged,
        "strategy built": ready - record["main_started"],
    }


def barrier_seconds(record: dict) -> float:
    """How long the node's port exchange took in all (it overlaps the process start and the import)."""
    return record["barrier_end"] - record["barrier_start"]
