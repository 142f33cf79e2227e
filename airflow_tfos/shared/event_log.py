"""The run's events in ``<run_dir>/events/``: one file per event as it happens, folded into batch files.

Any process of a run records an event by writing one small JSON file (``<time ns>-<seq>-<kind>.json``): no
append, no lock, safe from many writers on any file system. A long run on HDFS makes thousands of them
(metrics every few steps, every worker's epoch timings, checkpoints), and a reader that opens each one pays
one namenode and one datanode request per event. So the Spark driver folds them now and then
(:func:`compact`): it writes the events it read into one batch file (``batch-<first event's name>.jsonl``,
one ``{"name": ..., "event": ...}`` per line, written whole before it is visible) and only then deletes the
files it folded. A reader (:func:`read`) takes both, and an event that is in a batch file and still in its
own file counts once (by its name). A reader that lists the folder just before a fold and finds a listed
file gone lists again: the batch file holding it is there by then.

Writers that have several events at hand write them as one batch file themselves (:func:`write_batch`).
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow_tfos.shared.errors import RunDirError
from airflow_tfos.shared.storage import Storage, join

log = logging.getLogger(__name__)

BATCH_PREFIX = "batch-"
BATCH_SUFFIX = ".jsonl"
#: Reads at once when many event files are read (each is a request or two on HDFS).
READERS = 8
#: How often a reader lists the folder again when files it listed were folded away meanwhile.
RELISTS = 3

_SEQ = itertools.count()


def kind_suffix(kind: str) -> str:
    """An event kind as it appears at the end of its file name."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", kind)


def new_name(kind: str) -> str:
    """The file name of an event recorded now (names sort in the order events were recorded, per process)."""
    return f"{time.time_ns():020d}-{next(_SEQ):06d}-{kind_suffix(kind)}.json"


def _dumps(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, default=str).encode()


def write_one(storage: Storage, folder: str, event: dict[str, Any]) -> None:
    """Record one event as a file of its own."""
    storage.write_bytes(join(folder, new_name(event["kind"])), _dumps(event))


def write_batch(storage: Storage, folder: str, events: list[dict[str, Any]]) -> str | None:
    """Record several events as one batch file; return its name (None when there are none)."""
    if not events:
        return None
    named = [(new_name(e["kind"]), e) for e in events]
    return _write_batch(storage, folder, named)


def _write_batch(storage: Storage, folder: str, named: list[tuple[str, dict[str, Any]]]) -> str:
    name = f"{BATCH_PREFIX}{named[0][0].removesuffix('.json')}{BATCH_SUFFIX}"
    body = b"".join(json.dumps({"name": n, "event": e}, sort_keys=True, default=str).encode() + b"\n" for n, e in named)
    storage.write_bytes(join(folder, name), body)
    return name


def _is_batch(name: str) -> bool:
    return name.startswith(BATCH_PREFIX) and name.endswith(BATCH_SUFFIX)


def _parse_batch(data: bytes, where: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            found.append((item["name"], item["event"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise RunDirError(f"{where} is not an airflow-tfos event batch ({exc})") from exc
    return found


def _read_many(storage: Storage, paths: list[str]) -> list[bytes | None]:
    """The content of each path, None for one that is gone; in parallel when there are several."""

    def read(path: str) -> bytes | None:
        try:
            return storage.read_bytes(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RunDirError.from_storage(exc, f"cannot read {path}") from exc

    if len(paths) <= 1:
        return [read(p) for p in paths]
    with ThreadPoolExecutor(min(READERS, len(paths)), thread_name_prefix="airflow-tfos-events") as pool:
        return list(pool.map(read, paths))


def _listdir(storage: Storage, folder: str) -> list[str]:
    try:
        return storage.listdir(folder)
    except FileNotFoundError:
        return []


def read_named(storage: Storage, folder: str, kind: str | None = None) -> dict[str, dict[str, Any]]:
    """Every event (of ``kind`` only, if given) by its file name, from the event files and the batch files."""
    suffix = f"-{kind_suffix(kind)}.json" if kind is not None else ".json"
    found: dict[str, dict[str, Any]] = {}
    batches_read: set[str] = set()
    for _ in range(RELISTS):
        names = _listdir(storage, folder)
        batches = sorted(n for n in names if _is_batch(n) and n not in batches_read)
        for name, data in zip(batches, _read_many(storage, [join(folder, n) for n in batches]), strict=True):
            batches_read.add(name)
            for event_name, event in _parse_batch(data or b"", join(folder, name)):
                if kind is None or event.get("kind") == kind:
                    found[event_name] = event
        singles = sorted(n for n in names if n.endswith(suffix) and not _is_batch(n) and n not in found)
        gone = False
        for name, data in zip(singles, _read_many(storage, [join(folder, n) for n in singles]), strict=True):
            if data is None:  # folded into a batch file since the listing
                gone = True
                continue
            try:
                event = json.loads(data)
            except ValueError as exc:
                raise RunDirError(f"{join(folder, name)} is not valid JSON ({exc})") from exc
            if event and (kind is None or event.get("kind") == kind):
                found[name] = event
        if not gone:
            break
    return found


def read(storage: Storage, folder: str, kind: str | None = None) -> list[dict[str, Any]]:
    """Events in the order they were recorded (by name), of one ``kind`` only if given."""
    named = read_named(storage, folder, kind)
    return [named[name] for name in sorted(named)]


def compact(storage: Storage, folder: str, min_files: int = 1) -> int:
    """Fold the event files into one batch file when there are at least ``min_files`` of them, then delete
    them; return how many were folded. Only one process (the driver) folds a run's events."""
    names = sorted(n for n in _listdir(storage, folder) if n.endswith(".json") and not _is_batch(n))
    if len(names) < max(1, min_files):
        return 0
    named = []
    for name, data in zip(names, _read_many(storage, [join(folder, n) for n in names]), strict=True):
        if data is None:
            continue
        try:
            named.append((name, json.loads(data)))
        except ValueError:  # half-written by a process that died: left as it is, skipped by readers too
            log.warning("event file %s is not valid JSON: not folded", join(folder, name))
    if not named:
        return 0
    _write_batch(storage, folder, named)
    _delete_many(storage, [join(folder, n) for n, _ in named])
    return len(named)


def _delete_many(storage: Storage, paths: Iterable[str]) -> None:
    def delete(path: str) -> None:
        try:
            storage.delete(path)
        except FileNotFoundError:
            pass

    paths = list(paths)
    with ThreadPoolExecutor(min(READERS, max(1, len(paths))), thread_name_prefix="airflow-tfos-events") as pool:
        list(pool.map(delete, paths))
