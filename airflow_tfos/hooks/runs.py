"""Names that tie a training run together: its run directory, its tag, its feed ids. Pure Python.

A run is identified by its run directory. Its tag (``tfos-<hash of the run directory>``) is attached
to the Spark application (YARN ``applicationTags``, or the local tracker), so a retried or cleared task
finds the application that is already working on its run directory instead of submitting another.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from typing import Any

from airflow_tfos.hooks.errors import RunConfigError
from airflow_tfos.shared.storage import join

TAG_PREFIX = "tfos-"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.=-]+")
_URI = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://\S*|/\S*)$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://([^/]*)(.*)$")
#: The setting that bounds templated and default run directories, and the operators' way out of it.
BASE_SETTING = "[tfos] run_dir_base"
ALLOW_OUTSIDE = "allow_run_dir_outside_base=True"


def templated(value: Any) -> bool:
    """Whether ``value`` (a string, or a list or dict holding strings) still holds Jinja: not rendered yet, so
    it cannot be checked at parse time."""
    return "{{" in json.dumps(value, default=str)


def run_tag(run_dir: str) -> str:
    """The tag of the application working on ``run_dir`` (YARN lower-cases tags; this is lower case)."""
    normalized = run_dir.rstrip("/")
    return TAG_PREFIX + hashlib.sha256(normalized.encode()).hexdigest()[:20]


def safe_name(value: str) -> str:
    """``value`` with every run of characters unsafe in paths and ids replaced by ``_``."""
    return _UNSAFE.sub("_", value).strip("_") or "run"


def run_key(logical_date: datetime | None, run_id: str) -> str:
    """The part of a default run directory that names the DAG run: its logical date, else its run id."""
    if logical_date is not None:
        return logical_date.strftime("%Y%m%dT%H%M%S")
    return safe_name(run_id)


def run_dir_key(logical_date: datetime | None, run_id: str, map_index: int | None = None) -> str:
    """The part of a default run directory that names one task instance of a DAG run.

    The logical date to the microsecond (two runs triggered in the same second differ), else the run
    id; then ``-map<index>`` for an instance of a mapped task (``map_index`` >= 0), so that mapped
    instances never share a run directory or a tag.
    """
    key = logical_date.strftime("%Y%m%dT%H%M%S.%f") if logical_date is not None else safe_name(run_id)
    if map_index is not None and map_index >= 0:
        key = f"{key}-map{int(map_index)}"
    return key


def default_run_dir(
    base: str,
    dag_id: str,
    task_id: str,
    logical_date: datetime | None,
    run_id: str,
    map_index: int | None = None,
) -> str:
    """``<base>/<dag_id>/<task_id>/<run dir key>`` (see :func:`run_dir_key`): a rerun of the same task
    instance finds it again, and its tag (:func:`run_tag`, a hash of it) is its own too."""
    return join(base, safe_name(dag_id), safe_name(task_id), run_dir_key(logical_date, run_id, map_index))


def check_run_dir(run_dir: str, what: str = "run_dir") -> None:
    """Raise unless ``run_dir`` is an absolute path or a URI (``file://``, ``hdfs://``, ``webhdfs://``...)
    that :func:`normalize_run_dir` accepts."""
    normalize_run_dir(run_dir, what)


def normalize_run_dir(run_dir: str, what: str = "run_dir") -> str:
    """``run_dir`` with ``//``, ``.`` and a trailing ``/`` removed; RunConfigError if it is empty or relative
    (a URI's path must be absolute too: ``hdfs:///runs/x``, ``file:///data/x``), is the root, or holds ``..``."""
    if not isinstance(run_dir, str) or not _URI.match(run_dir) or "\0" in run_dir:
        raise RunConfigError(
            f"{what} must be an absolute path or a URI such as hdfs://namenode/runs/x or file:///data/runs/x, "
            f"got {run_dir!r}"
        )
    found = _SCHEME.match(run_dir)
    prefix, path = (f"{found.group(1).lower()}://{found.group(2)}", found.group(3)) if found else ("", run_dir)
    if prefix.startswith("file://") and prefix != "file://":
        raise RunConfigError(
            f"{what} {run_dir!r} names a host: a file:// URI is local, write it as file:///path/to/run"
        )
    if not path.startswith("/"):
        raise RunConfigError(
            f"{what} {run_dir!r} has no absolute path after its scheme and host: write it as "
            f"{prefix or 'scheme://host'}/path/to/run (file:///data/runs/x for a local path)"
        )
    segments = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in segments:
        raise RunConfigError(f"{what} {run_dir!r} holds a '..' segment: name the run directory without it")
    if not segments:
        raise RunConfigError(f"{what} {run_dir!r} is the root of its file system: name a folder for the run")
    return prefix + "/" + "/".join(segments)


def _comparable(uri: str) -> tuple[str, list[str]]:
    """A normalised run directory as (where, path segments); local paths and ``file://`` compare alike."""
    found = _SCHEME.match(uri)
    where, path = (f"{found.group(1)}://{found.group(2)}", found.group(3)) if found else ("", uri)
    return ("" if where == "file://" else where), path.strip("/").split("/")


def place_run_dir(run_dir: str, base: str, *, must_be_under_base: bool, what: str = "run_dir") -> str:
    """The normalised ``run_dir``; with ``must_be_under_base``, RunConfigError unless it lies under ``base``.

    Templated and default run directories must (a rendered ``run_dir`` may come from ``dag_run.conf``); the
    comparison is by scheme, host and whole path segments, so ``hdfs://ns/runs`` does not hold
    ``hdfs:///runs/x`` (name the same host in both).
    """
    normalized = normalize_run_dir(run_dir, what)
    if not must_be_under_base:
        return normalized
    where, segments = _comparable(normalize_run_dir(base, BASE_SETTING))
    run_where, run_segments = _comparable(normalized)
    if run_where != where or run_segments[: len(segments)] != segments or len(run_segments) == len(segments):
        raise RunConfigError(
            f"{what} {normalized!r} is not inside {BASE_SETTING} ({base}), as a templated or default run "
            f"directory must be: set {BASE_SETTING} (or $AIRFLOW_TFOS_RUN_DIR_BASE) to a folder that holds it, "
            f"or pass {ALLOW_OUTSIDE} to the operator if this DAG's authors alone decide what it renders to"
        )
    return normalized


def pick_winner(app_ids: list[str]) -> str:
    """Of several live applications for one run (two task attempts that raced), the one that stays.

    Every racer picks the same one: the earliest submitted (YARN ids end in a growing sequence number;
    local ids start with their submission time).
    """
    if not app_ids:
        raise ValueError("no applications to choose from")

    def order(app_id: str) -> tuple:
        parts = app_id.split("_")
        if len(parts) == 3 and parts[0] == "application" and parts[1].isdigit() and parts[2].isdigit():
            return (0, int(parts[1]), int(parts[2]), app_id)
        return (1, 0, 0, app_id)

    return min(app_ids, key=order)
