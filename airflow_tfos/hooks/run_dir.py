"""The run directory from the Airflow side: where a task's run directory is, the names that tie a run together,
and the hook that reads it (local paths, or HDFS through a ``webhdfs`` connection).

The contract of the directory itself (its files, who writes what) is :mod:`airflow_tfos.shared.rundir`; this
module holds what the Airflow side does with it:

- a run is identified by its run directory. Its tag (``tfos-<hash of the run directory>``) is attached to the
  Spark application (YARN ``applicationTags``, or the local tracker), so a retried or cleared task finds the
  application that is already working on its run directory instead of submitting another;
- where a task's run directory is: as given (templated or not), or the default one under ``[tfos] run_dir_base``,
  checked against that base;
- :class:`RunDirHook`: status, progress and events of a run, read while it trains.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from datetime import datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.configuration import conf

from airflow_tfos.hooks.errors import RunConfigError
from airflow_tfos.shared.storage import join

if TYPE_CHECKING:
    from airflow.sdk import Context
import asyncio
from functools import cached_property

from airflow.sdk import BaseHook

from airflow_tfos.shared.events import ATTEMPT_FAILED
from airflow_tfos.shared.rundir import RUN_TERMINAL_STATES, RunDir
from airflow_tfos.shared.storage import Storage, storage_for
from airflow_tfos.shared.storage.webhdfs_config import HDFS_SCHEMES

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


def run_dir_base() -> str:
    """Where default run directories go: ``[tfos] run_dir_base``, ``$AIRFLOW_TFOS_RUN_DIR_BASE``, else
    ``$AIRFLOW_HOME/tfos-runs``."""
    configured = conf.get("tfos", "run_dir_base", fallback=None) or os.environ.get("AIRFLOW_TFOS_RUN_DIR_BASE")
    if configured:
        return configured
    home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return os.path.join(home, "tfos-runs")


def resolve_run_dir(
    run_dir: str | None,
    context: Context,
    *,
    task_id: str | None = None,
    as_written: str | None = None,
    allow_outside_base: bool = False,
) -> str:
    """``run_dir`` as given, else the default one of this task (or of task ``task_id``, e.g. the launch task
    of a feed or shutdown) in this DAG run; normalised (never ``..``).

    A templated run directory (``as_written``, the value before rendering, holds Jinja; unknown counts as
    templated), the run directory of a mapped task instance (its value may come from ``.expand()`` over an
    upstream task's output, data rather than the DAG's text) and the default one must lie under
    ``[tfos] run_dir_base``, unless ``allow_outside_base``.
    """
    base = run_dir_base()
    ti, dag_run = context["ti"], context["dag_run"]
    if run_dir:
        map_index = getattr(ti, "map_index", None)
        mapped = map_index is not None and map_index >= 0
        bounded = (as_written is None or templated(as_written) or mapped) and not allow_outside_base
        return place_run_dir(run_dir, base, must_be_under_base=bounded)
    # a mapped instance's own run directory (a feed or shutdown names its launch task: that one's, unmapped)
    map_index = getattr(ti, "map_index", None) if task_id is None else None
    default = default_run_dir(
        base, ti.dag_id, task_id or ti.task_id, dag_run.logical_date, dag_run.run_id, map_index=map_index
    )
    return place_run_dir(default, base, must_be_under_base=True)


def progress_line(status: dict[str, Any] | None) -> str | None:
    """One log line of training progress from status.json, or None when there is nothing to say.

    E.g. ``state RUNNING, checkpoint step 100, step 120/400 (30%), epoch 2/5 (40% of epoch), loss 0.4231,
    35.2 steps/s, 2253 examples/s, ETA 8 s`` (``progress`` is the chief's progress.json, see
    :mod:`airflow_tfos.runtime.program.progress`).
    """
    if not status:
        return None
    progress = status.get("progress") or {}
    parts = [f"state {status.get('state')}"]
    if status.get("step"):  # none before the first checkpoint, and never for batch inference
        parts.append(f"checkpoint step {status['step']}")
    if progress.get("step") is not None:
        total = progress.get("total_steps")
        parts.append(
            f"step {progress['step']}" + (f"/{total} ({100.0 * progress['step'] / total:.0f}%)" if total else "")
        )
    if progress.get("epoch") is not None:
        epoch = f"epoch {progress['epoch']}"
        if progress.get("epochs"):
            epoch += f"/{progress['epochs']}"
        if progress.get("epoch_pct") is not None:
            epoch += f" ({progress['epoch_pct']:.0f}% of epoch)"
        parts.append(epoch)
    if progress.get("loss") is not None:
        parts.append(f"loss {progress['loss']:.4f}")
    if progress.get("steps_per_sec"):
        parts.append(f"{progress['steps_per_sec']:.1f} steps/s")
    if progress.get("examples_per_sec"):
        parts.append(f"{progress['examples_per_sec']:.0f} examples/s")
    if progress.get("eta_secs") is not None:
        parts.append(f"ETA {progress['eta_secs']:.0f} s")
    return ", ".join(parts)


class RunWatch:
    """What a task waiting on a run logs: the progress line whenever it changes, and each failed attempt
    of the TF cluster (a lost node, and whether a new attempt resumes from the latest checkpoint) once."""

    def __init__(self) -> None:
        self.last_line: str | None = None
        self.seen: set[tuple[Any, Any]] = set()
        self.status: dict[str, Any] | None = None  # the latest status.json seen, for a PollPacer

    def lines(self, status: dict[str, Any] | None, failures: list[dict[str, Any]]) -> list[str]:
        self.status = status
        out = []
        for event in failures:
            key = (event.get("run_id"), event.get("attempt"))
            if key in self.seen:
                continue
            self.seen.add(key)
            then = (
                "a new attempt resumes from the latest checkpoint"
                if event.get("retrying")
                else "no attempts are left: the run fails"
            )
            out.append(f"TF cluster attempt {event.get('attempt')} failed: {event.get('reason')}; {then}")
        line = progress_line(status)
        if line and line != self.last_line:
            out.append(line)
            self.last_line = line
        return out


class PollPacer:
    """How long a task waiting on a training run sleeps before its next look.

    ``poll_interval`` while the run's end is further away than that, or unknown. When the chief's progress
    (status.json's ``progress``: ``time`` and ``eta_secs``) puts the last step closer, the next look is
    one second after it; once that moment has passed (or the run says it finished), the looks come after
    1, 2, 4... seconds, never more than ``poll_interval`` apart, until the application ends. So a run is
    seen to end within seconds of its export, not up to a whole interval later, at the cost of a handful
    of extra looks per run.
    """

    FIRST_SECS = 1.0

    def __init__(self, poll_interval: float) -> None:
        self.poll_interval = poll_interval
        self._late = 0  # looks since the expected end

    def next_secs(self, status: dict[str, Any] | None, now: float) -> float:
        progress = (status or {}).get("progress") or {}
        at, eta = progress.get("time"), progress.get("eta_secs")
        if progress.get("finished") or (status or {}).get("state") in RUN_TERMINAL_STATES:
            left = 0.0
        elif at is None or eta is None:
            self._late = 0
            return self.poll_interval
        else:
            left = float(at) + float(eta) - now
        if left > 0:
            self._late = 0
            return max(self.FIRST_SECS, min(self.poll_interval, left + self.FIRST_SECS))
        secs = min(self.poll_interval, self.FIRST_SECS * 2**self._late)
        self._late += 1
        return secs


def _scheme(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


class RunDirHook(BaseHook):
    """Read and write one run directory (spec, status, checkpoints, export, feeds, stop requests).

    :param run_dir: a local path, ``file://``, ``hdfs://`` or ``webhdfs://`` URI.
    :param webhdfs_conn_id: the ``webhdfs`` connection for HDFS run directories (default
        ``webhdfs_default``); unused for local ones.
    """

    def __init__(self, run_dir: str, *, webhdfs_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.run_dir = run_dir
        self.webhdfs_conn_id = webhdfs_conn_id

    @cached_property
    def storage(self) -> Storage:
        if _scheme(self.run_dir) in HDFS_SCHEMES:
            from airflow_tfos.hooks.webhdfs_connection import DEFAULT_CONN_ID, storage_from_connection

            return storage_from_connection(self.webhdfs_conn_id or DEFAULT_CONN_ID)
        return storage_for(self.run_dir)

    @cached_property
    def run_dir_contents(self) -> RunDir:
        """The run directory's contents: what ``run_dir`` (its URI) holds, read and written as the contract says."""
        return RunDir(self.run_dir, storage=self.storage)

    @property
    def rundir(self) -> RunDir:
        """The former name of :attr:`run_dir_contents` (kept for code written against it)."""
        return self.run_dir_contents

    async def aread_status(self) -> dict[str, Any] | None:
        """status.json, without blocking the event loop (for triggers)."""
        return await asyncio.to_thread(self.run_dir_contents.read_status)

    def watch_lines(self, watch: RunWatch) -> list[str]:
        """What a task waiting on the run should log now (see :class:`RunWatch`); storage errors are a line too."""
        try:
            return watch.lines(self.run_dir_contents.read_status(), self.run_dir_contents.events(ATTEMPT_FAILED))
        except Exception as exc:
            return [f"cannot read the run's status: {exc}"]

    async def awatch_lines(self, watch: RunWatch) -> list[str]:
        """:meth:`watch_lines`, without blocking the event loop (for triggers)."""
        return await asyncio.to_thread(self.watch_lines, watch)

    async def acheck(self, condition: dict[str, Any]) -> dict[str, Any] | None:
        """:meth:`check`, without blocking the event loop (for triggers)."""
        return await asyncio.to_thread(self.check, condition)

    # --- conditions that sensors and triggers wait for -------------------------------------------------

    def check(self, condition: dict[str, Any]) -> dict[str, Any] | None:
        """What ``condition`` waits for, once it is there (else None). See :func:`check_condition`."""
        return check_condition(self.run_dir_contents, condition)


def check_condition(rundir: RunDir, condition: dict[str, Any]) -> dict[str, Any] | None:
    """Evaluate one wait condition on a run directory; return its result once met, else None.

    ``{"checkpoint": {"min_step": N, "newer_than": unix_time}}``: the latest *published* checkpoint, if
    it satisfies both bounds (a half-written one is never named by the manifest).
    ``{"export": {}}``: the export's ``_SUCCESS`` record (with the export's path).
    ``{"feed": "<feed id>"}``: the feed's done record.
    ``{"ready": {}}``: the driver is up and serving feed requests.
    """
    if "checkpoint" in condition:
        bounds = condition["checkpoint"] or {}
        latest = rundir.latest_checkpoint()
        if latest is None:
            return None
        if bounds.get("min_step") is not None and latest.step < int(bounds["min_step"]):
            return None
        if bounds.get("newer_than") is not None and (latest.time or 0) <= float(bounds["newer_than"]):
            return None
        return {"path": latest.path, "step": latest.step, "epoch": latest.epoch, "time": latest.time}
    if "export" in condition:
        success = rundir.export_success()
        return {**success, "path": rundir.path("export")} if success else None
    if "feed" in condition:
        return rundir.feed_result(str(condition["feed"]))
    if "ready" in condition:
        status = rundir.read_status() or {}
        if status.get("serving") and status.get("state") == "RUNNING":
            return {"application_id": status.get("application_id"), "step": status.get("step", 0)}
        return None
    raise ValueError(f"unknown wait condition {condition!r}: use checkpoint, export, feed or ready")
