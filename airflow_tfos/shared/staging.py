"""Directories written whole under a staging name, then swapped in by renames: never deleted before the new one
is in place.

A writer puts a complete directory at ``.staging-<name>-<id>`` beside its target, then :func:`replace_dir`
renames the old one aside (``.replaced-<name>-<id>``), the new one into place, and deletes the old one; what a
crash leaves behind is removed by the next writer (:func:`discard_stale`). Only ``exists``, ``rename``,
``delete`` and ``listdir`` are used, so that any storage serves: the run directory's export
(:meth:`~airflow_tfos.shared.rundir.RunDir.publish_export`) and the predictions a scoring job writes through
the Hadoop file system both go this way, which is why these helpers are apart from the run directory.
"""

from __future__ import annotations

import uuid

from airflow_tfos.shared.storage import Storage, join

#: Name prefixes of directories being written (staging) or being replaced (aside), beside their target.
STAGING_PREFIX = ".staging-"
ASIDE_PREFIX = ".replaced-"


def replace_dir(storage: Storage, staging: str, final: str) -> None:
    """Put the complete directory ``staging`` in the place of ``final`` by renames, never deleting first.

    ``final``, if it exists, is renamed aside (``.replaced-<name>-<id>`` beside it), ``staging`` is renamed
    to ``final``, then the old one is deleted. A reader sees the old directory or the new one, complete,
    except between the two renames; if the second rename fails, the old one is put back. Staging and
    aside directories are named so that :func:`discard_stale` finds them.
    """
    parent, name = final.rstrip("/").rsplit("/", 1)
    aside = None
    if storage.exists(final):
        aside = join(parent, f"{ASIDE_PREFIX}{name}-{uuid.uuid4().hex[:8]}")
        storage.rename(final, aside)
    try:
        storage.rename(staging, final)
    except Exception:
        if aside is not None and not storage.exists(final):
            storage.rename(aside, final)
        raise
    if aside is not None:
        storage.delete(aside)


def discard_stale(storage: Storage, parent: str, name: str, keep: str | None = None) -> list[str]:
    """Delete what writes of ``name`` in ``parent`` left behind (staging and aside directories); return them.

    Call it once a new ``name`` is in place: the writer of ``keep`` (a staging path) is not disturbed.
    """
    prefixes = (f"{STAGING_PREFIX}{name}-", f"{ASIDE_PREFIX}{name}-")
    stale = [join(parent, n) for n in storage.listdir(parent) if n.startswith(prefixes)]
    stale = [path for path in stale if keep is None or path.rstrip("/") != keep.rstrip("/")]
    for path in stale:
        storage.delete(path)
    return stale
