"""What is known of a local application, mapped onto YARN's vocabulary: pure functions, tested without processes.

The local backend (:mod:`airflow_tfos.hooks.backends.local_tracker`) gathers the facts (its record, whether its
processes live, the exit code its wrapper recorded, a kill request, the run directory's status.json, a standalone
master's entry, the end of its log); :func:`map_local_state` decides what state they make.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_tfos.hooks.backends.state import AppState

#: Lines of the log given as diagnostics of a failed application.
LOG_TAIL_LINES = 25

#: The application's own web UI, as Spark 4 logs it (not the UIs of local-cluster's master and workers).
_SPARK_UI = re.compile(r"Start Jetty (\S+):(\d+) for SparkUI")
_SPARK_UI_PORT = re.compile(r"Successfully started service 'SparkUI' on port (\d+)")


def spark_ui_url(log_text: str) -> str | None:
    """The URL of the application's Spark UI from the driver's log, or None when it has none (yet).

    The port is the one Spark says it started on (it tries the next port while one is taken, logging
    a "Start Jetty" line for each try); the host is the one it bound to.
    """
    port = _SPARK_UI_PORT.search(log_text)
    if not port:
        return None
    hosts = [m.group(1) for m in _SPARK_UI.finditer(log_text, 0, port.start()) if m.group(2) == port.group(1)]
    host = hosts[-1] if hosts and hosts[-1] not in ("0.0.0.0", "") else "127.0.0.1"
    return f"http://{host}:{port.group(1)}"


def tail(path: str | Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 64 * 1024) -> str:
    """The last ``lines`` lines of a text file (empty if it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def map_local_state(
    record: Mapping[str, Any],
    *,
    alive: bool,
    exit_info: Mapping[str, Any] | None,
    kill_info: Mapping[str, Any] | None,
    status: Mapping[str, Any] | None,
    master_app: Mapping[str, Any] | None = None,
    log_tail: str = "",
    tracking_url: str | None = None,
    now: float | None = None,
) -> AppState:
    """Map what is known of a local application onto YARN's vocabulary.

    :param record: the application's record (app_id, tag, name, submitted...).
    :param alive: whether its wrapper (or, without it, any of its processes) still runs.
    :param exit_info: what the wrapper wrote when the command ended, if it did.
    :param kill_info: what kill() wrote, if it was called.
    :param status: the run directory's status.json, if readable.
    :param master_app: the standalone master's entry for the application (its JSON API), if any.
    :param log_tail: the end of spark-submit's log.
    :param tracking_url: the application's UI, if known.
    :param now: the current time (for the heartbeat's age).
    """
    now = time.time() if now is None else now
    submitted = float(record.get("submitted") or 0)
    # status.json belongs to this application only if written after it was submitted.
    ours = status if status and float(status.get("heartbeat") or 0) >= submitted else None
    common = {
        "app_id": record["app_id"],
        "tags": (record["tag"],) if record.get("tag") else (),
        "name": record.get("name", ""),
        "tracking_url": tracking_url,
    }
    if alive:
        parts = []
        state = "RUNNING"
        if master_app and master_app.get("state") == "WAITING":
            state = "ACCEPTED"
            parts.append(f"waiting for executors on the standalone master (application {master_app.get('id')})")
        if ours:
            age = now - float(ours["heartbeat"])
            parts.append(f"run {ours.get('state')} at step {ours.get('step', 0)}, heartbeat {age:.0f} s ago")
        else:
            parts.append("the driver is starting")
        if kill_info:
            parts.append("being killed")
        return AppState(state=state, diagnostics="; ".join(parts), **common)
    error = (ours or {}).get("error") or ""
    signaled = exit_info is not None and (exit_info.get("terminated_by") or exit_info.get("signal"))
    if kill_info and (exit_info is None or exit_info.get("exit_code") != 0 or signaled):
        reason = kill_info.get("reason") or "killed"
        return AppState(state="KILLED", final_status="KILLED", diagnostics=f"killed: {reason}", **common)
    if exit_info is None:
        if ours and ours.get("state") == "SUCCEEDED":
            return AppState(state="FINISHED", final_status="SUCCEEDED", **common)
        message = "the local driver process ended without recording an exit code (killed from outside?)"
        diagnostics = "\n".join(filter(None, [message, error, log_tail]))
        return AppState(state="FAILED", final_status="FAILED", diagnostics=diagnostics, **common)
    code = exit_info.get("exit_code")
    if code == 0:
        return AppState(state="FINISHED", final_status="SUCCEEDED", diagnostics=error, **common)
    what = f"spark-submit exited with code {code}"
    if exit_info.get("signal"):
        what = f"spark-submit was ended by signal {exit_info['signal']}"
    diagnostics = "\n".join(filter(None, [what, exit_info.get("error"), error, log_tail]))
    return AppState(state="FAILED", final_status="FAILED", diagnostics=diagnostics, **common)
