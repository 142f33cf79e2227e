"""The local backend's process tracker: Spark drivers run as detached spark-submit processes on this machine.

For the embedded default and single-machine users: the driver runs in client mode against
``local-cluster[N,C,MB]`` (real executor JVMs) or a standalone master (``spark://host:port``; Spark
standalone has no cluster deploy mode for Python applications). Each application is tracked in a
tracker directory that outlives the process that submitted it, so a later task (another process) can
look it up, find it by tag and kill it::

    <tracker_dir>/apps/<app_id>.json        the record: pid, process start time, tag, name, run_dir, log, master
    <tracker_dir>/apps/<app_id>.exit.json   how it ended, written by the wrapper (airflow_tfos.hooks.backends.localrun)
    <tracker_dir>/apps/<app_id>.kill.json   written by kill() before it signals
    <tracker_dir>/logs/<app_id>.log         spark-submit's stdout and stderr
    <tracker_dir>/tags/<tag>.lock           held while a submission for the tag checks and starts

One tag, one live application: :meth:`LocalBackend.submit` holds an exclusive ``flock`` on the tag's
lock file while it looks for a live application with the tag and starts a new one, and writes the
new record before releasing it. Two submissions racing for the same tag (threads, processes, Airflow
workers sharing this tracker directory on one machine) cannot both start: the second one sees the
first one's record and fails with :class:`ApplicationAlreadyRunningError`. ``flock`` is not reliable on
network file systems: keep the tracker directory on a local disk. (The tag rules and the lock are
:mod:`airflow_tfos.hooks.backends.base`'s, shared with YARN submissions; the state mapping is
:mod:`airflow_tfos.hooks.backends.local_state`'s; :class:`~airflow_tfos.hooks.backends.local.LocalSparkBackend`
builds the spark-submit this tracker starts.)

The tracker directory must be private to this OS user (:func:`~airflow_tfos.hooks.backends.base.private_dir`):
a submission refuses one that another user owns or can write.

Only what belongs to this OS user counts: a record file owned by another user is not listed (a tag is
predictable: anyone who can write the tracker directory could forge a record carrying it), and no
process of another user is ever taken for an application's process, looked at or signalled.

Pure Python plus psutil: no Airflow import, so it can be used without an Airflow installation.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from airflow_tfos.hooks.backends.base import (
    TAG_LOCK_TIMEOUT_SECS,
    TRACKER_DIR_ENV,
    check_tag,
    default_tracker_dir,
    private_dir,
    tag_lock,
)
from airflow_tfos.hooks.backends.local_state import LOG_TAIL_LINES, map_local_state, spark_ui_url, tail
from airflow_tfos.hooks.backends.localrun import write_json_atomically
from airflow_tfos.hooks.backends.standalone import master_webui_url
from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.errors import ApplicationAlreadyRunningError, ApplicationNotFoundError, LocalBackendError
from airflow_tfos.shared.procgroup import signal_group

__all__ = [
    "APP_ENV",
    "KILL_WAIT_SECS",
    "LOG_TAIL_LINES",
    "TAG_LOCK_TIMEOUT_SECS",
    "TRACKER_DIR_ENV",
    "ApplicationAlreadyRunningError",
    "ApplicationNotFoundError",
    "LocalBackend",
    "LocalBackendError",
    "check_tag",
    "default_tracker_dir",
    "map_local_state",
    "master_webui_url",
    "new_app_id",
    "spark_ui_url",
    "tag_lock",
    "tail",
]

log = logging.getLogger(__name__)

#: Set in the environment of every process of a local application (its value: the app id).
APP_ENV = "AIRFLOW_TFOS_LOCAL_APP"
#: How long kill() waits after SIGKILL for the processes to go.
KILL_WAIT_SECS = 15.0

_APP_ID = re.compile(r"^local-\d{14}-[0-9a-f]{8}$")


def new_app_id(now: float | None = None) -> str:
    """``local-<YYYYmmddHHMMSS>-<8 hex digits>``."""
    return f"local-{time.strftime('%Y%m%d%H%M%S', time.localtime(now))}-{secrets.token_hex(4)}"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None


def _ours(process: psutil.Process) -> bool:
    """Whether ``process`` runs as this OS user (another user's process is never one of ours)."""
    return process.uids().real == os.getuid()


def _own_file(path: Path) -> bool:
    """Whether ``path`` belongs to this OS user (else it is not one of our records)."""
    try:
        owner = path.stat().st_uid
    except OSError:
        return False
    if owner != os.getuid():
        log.warning("ignoring %s: it belongs to uid %d, not to this user (uid %d)", path, owner, os.getuid())
        return False
    return True


class LocalBackend:
    """Submit, look up, find by tag and kill local Spark applications (detached spark-submit processes).

    :param tracker_dir: where the records and logs go (default: :func:`default_tracker_dir`).
    :param http_timeout: seconds to wait for a standalone master's JSON API.
    """

    def __init__(self, tracker_dir: str | None = None, *, http_timeout: float = 2.0) -> None:
        self.tracker_dir = Path(tracker_dir or default_tracker_dir())
        self.http_timeout = http_timeout
        self._children: dict[str, subprocess.Popen] = {}

    # --- paths ---------------------------------------------------------------------------------------

    def _app_file(self, app_id: str, suffix: str = ".json") -> Path:
        if not _APP_ID.match(app_id):
            raise ApplicationNotFoundError(f"{app_id!r} is not a local application id (local-<time>-<hex>)")
        return self.tracker_dir / "apps" / f"{app_id}{suffix}"

    def log_path(self, app_id: str) -> Path:
        return self.tracker_dir / "logs" / f"{app_id}.log"

    def record(self, app_id: str) -> dict[str, Any]:
        """The application's record; raise :class:`ApplicationNotFoundError` if there is none."""
        found = _read_json(self._app_file(app_id))
        if found is None:
            raise ApplicationNotFoundError(f"no local application {app_id} in {self.tracker_dir / 'apps'}")
        return found

    # --- submit --------------------------------------------------------------------------------------

    def submit(
        self,
        command: Sequence[str],
        *,
        tag: str,
        name: str,
        run_dir: str,
        master: str,
        env: Mapping[str, str] | None = None,
        remove_after: Sequence[str] = (),
        webui_url: str | None = None,
    ) -> str:
        """Start ``command`` (spark-submit in client mode) detached; return the new application's id.

        :param command: the full command line; it must hold no secret (``ps`` shows it).
        :param tag: the run's tag; submitting while a live application carries it raises
            :class:`ApplicationAlreadyRunningError`.
        :param name: the application's name.
        :param run_dir: the run directory (its status.json adds to the state).
        :param master: the Spark master the command submits to.
        :param env: extra environment for the command (secrets go here, not on the command line).
        :param remove_after: files to delete once the command has ended (e.g. a properties file with secrets).
        :param webui_url: a standalone master's web UI (default: port 8080 of the master's host).
        """
        tag = check_tag(tag)
        tracker = private_dir(self.tracker_dir)
        for folder in ("apps", "logs"):
            private_dir(tracker / folder)
        with tag_lock(self.tracker_dir, tag):
            live = self.find_live(tag)
            if live:
                raise ApplicationAlreadyRunningError(tag, [app.app_id for app in live])
            app_id = new_app_id()
            log_path = self.log_path(app_id)
            wrapper = [
                sys.executable, "-m", "airflow_tfos.hooks.backends.localrun",
                "--exit-file", str(self._app_file(app_id, ".exit.json")),
                *[arg for path in remove_after for arg in ("--remove", str(path))],
                "--", *command,
            ]  # fmt: skip
            full_env = {
                **os.environ,
                "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
                "PYSPARK_DRIVER_PYTHON": os.environ.get("PYSPARK_DRIVER_PYTHON", sys.executable),
                **(env or {}),
                APP_ENV: app_id,
            }
            with open(log_path, "ab") as log_file:
                process = subprocess.Popen(
                    wrapper,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=full_env,
                    start_new_session=True,
                    close_fds=True,
                )
            self._children[app_id] = process
            try:
                start_time = psutil.Process(process.pid).create_time()
            except psutil.NoSuchProcess:
                start_time = None
            record = {
                "app_id": app_id,
                "pid": process.pid,
                "pgid": process.pid,
                "start_time": start_time,
                "tag": tag,
                "name": name,
                "run_dir": run_dir,
                "log": str(log_path),
                "master": master,
                "webui_url": webui_url or master_webui_url(master),
                "submitted": time.time(),
                "uid": os.getuid(),
                "command": list(command),
            }
            write_json_atomically(self._app_file(app_id), record)
        log.info("submitted local application %s (pid %d, tag %s), log in %s", app_id, process.pid, tag, log_path)
        return app_id

    # --- processes -----------------------------------------------------------------------------------

    def _leader(self, record: Mapping[str, Any]) -> psutil.Process | None:
        """The application's wrapper process if it still runs (and is the same process: pid reuse)."""
        child = self._children.get(record["app_id"])
        if child is not None:
            child.poll()  # reaps it if it has ended, so it is not left a zombie
        try:
            process = psutil.Process(record["pid"])
            if not _ours(process):
                return None
            if record.get("start_time") is not None and abs(process.create_time() - record["start_time"]) > 0.01:
                return None
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            return process
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None

    @staticmethod
    def _members(app_id: str, pgid: int | None = None) -> list[psutil.Process]:
        """Every live process that carries the application's marker in its environment, and with
        ``pgid``, every live process of that process group, marked or not."""
        found = []
        for process in psutil.process_iter():
            try:
                if process.status() == psutil.STATUS_ZOMBIE or not _ours(process):
                    continue
                if (pgid is not None and os.getpgid(process.pid) == pgid) or process.environ().get(APP_ENV) == app_id:
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                continue
        return found

    def processes(self, app_id: str) -> list[psutil.Process]:
        """The application's live processes (its wrapper, spark-submit, the driver, executors, TF nodes)."""
        record = self.record(app_id)
        leader = self._leader(record)
        members = self._members(app_id)
        if leader is not None and leader.pid not in {p.pid for p in members}:
            members.insert(0, leader)
        return members

    # --- state ---------------------------------------------------------------------------------------

    def _status(self, run_dir: str) -> dict[str, Any] | None:
        try:
            from airflow_tfos.shared.rundir import RunDir

            return RunDir(run_dir).read_status()
        except Exception as exc:  # a broken run directory must not hide the process state
            log.warning("cannot read the status of %s: %s", run_dir, exc)
            return None

    def _master_app(self, webui_url: str | None, spark_app_id: str | None) -> dict[str, Any] | None:
        """The standalone master's entry for ``spark_app_id`` (its ``/json/`` API), or None."""
        if not webui_url or not spark_app_id:
            return None
        try:
            with urllib.request.urlopen(f"{webui_url.rstrip('/')}/json/", timeout=self.http_timeout) as reply:
                data = json.loads(reply.read())
        except (OSError, ValueError) as exc:
            log.debug("standalone master %s not reachable: %s", webui_url, exc)
            return None
        for app in [*data.get("activeapps", []), *data.get("completedapps", [])]:
            if app.get("id") == spark_app_id:
                return app
        return None

    def _tracking_url(self, record: Mapping[str, Any], master_app: Mapping[str, Any] | None) -> str | None:
        if master_app and record.get("webui_url"):
            return f"{record['webui_url'].rstrip('/')}/app/?appId={master_app['id']}"
        try:
            with open(record["log"], "rb") as handle:
                head = handle.read(256 * 1024).decode("utf-8", errors="replace")
        except OSError:
            return None
        return spark_ui_url(head)

    def _state(self, record: dict[str, Any]) -> AppState:
        app_id = record["app_id"]
        exit_info = _read_json(self._app_file(app_id, ".exit.json"))
        kill_info = _read_json(self._app_file(app_id, ".kill.json"))
        alive = exit_info is None and self._leader(record) is not None
        if exit_info is None and not alive:  # the wrapper is gone: are its processes?
            alive = bool(self._members(app_id))
        status = self._status(record["run_dir"]) if record.get("run_dir") else None
        master_app = None
        if alive and status:
            master_app = self._master_app(record.get("webui_url"), status.get("application_id"))
        return map_local_state(
            record,
            alive=alive,
            exit_info=exit_info,
            kill_info=kill_info,
            status=status,
            master_app=master_app,
            log_tail="" if alive else tail(record["log"]),
            tracking_url=self._tracking_url(record, master_app) if alive else None,
        )

    def get_state(self, app_id: str) -> AppState:
        """The application's state; raise :class:`ApplicationNotFoundError` if it is not known here."""
        return self._state(self.record(app_id))

    def records(self) -> list[dict[str, Any]]:
        """Every application's record, oldest first."""
        folder = self.tracker_dir / "apps"
        if not folder.is_dir():
            return []
        found = [
            _read_json(path) for path in folder.glob("local-*.json") if path.name.count(".") == 1 and _own_file(path)
        ]  # not .exit.json / .kill.json
        return sorted(
            (r for r in found if r and r.get("uid", os.getuid()) == os.getuid()), key=lambda r: r.get("submitted", 0)
        )

    def find_by_tag(self, tag: str) -> list[AppState]:
        """The applications carrying ``tag``, live or not, oldest first."""
        tag = check_tag(tag)
        return [self._state(record) for record in self.records() if record.get("tag") == tag]

    def find_live(self, tag: str) -> list[AppState]:
        """The applications carrying ``tag`` that have not ended."""
        return [app for app in self.find_by_tag(tag) if not app.is_terminal]

    # --- kill ----------------------------------------------------------------------------------------

    def _signal_group(self, record: dict[str, Any], sig: int) -> None:
        """Signal the application's process group if its leader is seen alive just before: only then is
        the group id surely the application's (once the leader has gone, it may be reused)."""
        if self._leader(record) is not None:
            signal_group(record["pgid"], sig, leader_unreaped=True)

    def kill(self, app_id: str, grace_secs: float = 30, *, reason: str = "kill requested") -> AppState:
        """SIGTERM the application's process group, then SIGKILL whatever is left after ``grace_secs``.

        Idempotent: an application that has ended (or is not known) is left alone and its state returned.
        """
        try:
            record = self.record(app_id)
        except ApplicationNotFoundError:
            log.info("local application %s is not known: nothing to kill", app_id)
            return AppState(app_id=app_id, state="KILLED", final_status="KILLED", diagnostics="not known here")
        state = self._state(record)
        if state.is_terminal:
            log.info("local application %s has ended already (%s): nothing to kill", app_id, state)
            return state
        kill_file = self._app_file(app_id, ".kill.json")
        if not kill_file.exists():
            write_json_atomically(kill_file, {"reason": reason, "time": time.time(), "grace_secs": grace_secs})
        leader = self._leader(record)
        # The process group is surely ours while its leader lives (a pgid is free for reuse only once
        # every member has gone): its members, marked or not, are looked up, and the group signalled,
        # only while the leader is seen alive just before.
        group = record["pgid"] if leader is not None else None
        targets = {p.pid: p for p in self._members(app_id, group)}
        if leader is not None:
            targets.setdefault(leader.pid, leader)
            self._signal_group(record, signal.SIGTERM)
        for process in targets.values():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                process.terminate()
        log.info("sent SIGTERM to local application %s (%d processes); grace %.0f s", app_id, len(targets), grace_secs)
        _, left = psutil.wait_procs(list(targets.values()), timeout=max(grace_secs, 0.1))
        group = record["pgid"] if group is not None and self._leader(record) is not None else None
        left += [p for p in self._members(app_id, group) if p.pid not in targets]
        if left:
            log.warning(
                "local application %s: %d processes still alive after %.0f s: SIGKILL", app_id, len(left), grace_secs
            )
            if group is not None:
                self._signal_group(record, signal.SIGKILL)
            for process in left:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    process.kill()
            _, stuck = psutil.wait_procs(left, timeout=KILL_WAIT_SECS)
            if stuck:
                raise LocalBackendError(
                    f"local application {app_id}: processes {[p.pid for p in stuck]} survive SIGKILL"
                )
        self._leader(record)  # reap our own child
        return self._state(record)
