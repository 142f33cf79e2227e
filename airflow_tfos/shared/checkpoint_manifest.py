"""The run directory's checkpoint manifest (``<run_dir>/checkpoints/manifest.json``), read without trusting it.

The manifest names the complete checkpoints (``ckpt-<step>/``) and the latest one. What it names is joined
onto the run directory and deleted when older checkpoints are dropped, so every entry is checked before it is
used: an entry that is not ``{"name": "ckpt-<step>", "step": <whole number>}`` is refused before a
publication deletes anything, and skipped (with a warning) by a restore. Kept apart from
:mod:`airflow_tfos.shared.rundir`, whose :class:`~airflow_tfos.shared.rundir.RunDir` reads and writes the
manifest with these rules, so that the rules read in one place.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from airflow_tfos.shared.errors import RunDirError

log = logging.getLogger(__name__)

_CHECKPOINT_NAME = re.compile(r"^ckpt-[0-9]{1,19}$")


@dataclass(frozen=True)
class Checkpoint:
    """A published, complete checkpoint."""

    path: str
    step: int
    epoch: int | None = None
    time: float | None = None
    #: batches of epoch ``epoch`` trained when it was saved (None: not recorded; then ``step`` tells)
    in_epoch: int | None = None


def _bad_checkpoint(record: Any) -> str | None:
    """Why a manifest record cannot name a checkpoint of this run directory, or None if it can."""
    if not isinstance(record, dict):
        return f"the entry {record!r} is not a JSON object"
    name, step = record.get("name"), record.get("step")
    if not isinstance(name, str) or not _CHECKPOINT_NAME.match(name):
        return f"the entry names {name!r}, not a checkpoint directory ckpt-<step>"
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return f"the entry {name!r} has the step {step!r}, not a whole number"
    return None


def manifest_records(manifest: Any, where: str, *, strict: bool) -> list[dict[str, Any]]:
    """The history of ``manifest`` (read from ``where``); a bad entry raises RunDirError (``strict``, before
    deleting) or is skipped."""
    history = manifest.get("history", []) if isinstance(manifest, dict) else None
    if not isinstance(history, list):
        if strict:
            raise RunDirError(f"{where} has no list 'history': it was not written by airflow-tfos; remove it")
        log.warning("ignoring %s: it has no list 'history'", where)
        return []
    records = []
    for record in history:
        problem = _bad_checkpoint(record)
        if problem is None:
            records.append(record)
        elif strict:
            raise RunDirError(
                f"refusing to publish a checkpoint: {where} is not as airflow-tfos writes it ({problem}); "
                "remove that entry (or the manifest) and check who else writes this run directory"
            )
        else:
            log.warning("skipping an entry of %s: %s", where, problem)
    return records
