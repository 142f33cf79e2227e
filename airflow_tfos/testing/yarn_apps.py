"""The applications of the ResourceManager emulator (:mod:`airflow_tfos.testing.yarn`): their record, YARN's state
machine, and the local process an application may follow.

An :class:`App` is what the REST API shows of an application (``id``, ``state``, ``finalStatus``, tags...) and,
for one backed by a real local process, its pid and process group and where a kill of it stands. Its
:meth:`~App.move` holds YARN's rules for states and final statuses; :func:`signal_group` and :func:`exit_code`
signal the process as a NodeManager signals a container and read how it ended. Apart from the emulator, which
keeps the applications by id, answers requests and decides when to move them, so that each module stays short.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from airflow_tfos.hooks.backends.state import FINAL_STATUSES, TERMINAL_STATES

_FINAL_FOR_STATE = {"FINISHED": ("SUCCEEDED", "FAILED", "KILLED"), "FAILED": ("FAILED",), "KILLED": ("KILLED",)}
_DEFAULT_FINAL = {"FINISHED": "SUCCEEDED", "FAILED": "FAILED", "KILLED": "KILLED"}


@dataclass
class App:
    """One application the emulated RM knows: what the REST API shows of it, and the local process it may follow."""

    app_id: str
    name: str
    user: str
    queue: str
    app_type: str
    tags: tuple[str, ...]
    state: str
    final_status: str
    diagnostics: str
    started_ms: int
    finished_ms: int = 0
    progress: float = 0.0
    process: subprocess.Popen | None = None
    pid: int | None = None
    pgid: int | None = None
    kill_requested_at: float | None = None
    sigkill_sent: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def move(self, state: str, final_status: str | None, diagnostics: str | None) -> None:
        """Move along YARN's state machine to ``state`` (a known one), with ``final_status`` (for an ended state,
        default: SUCCEEDED, FAILED or KILLED to match) and ``diagnostics`` (None keeps the old ones); ValueError
        where YARN never goes (an ended application cannot change any more)."""
        if self.terminal and state != self.state:
            raise ValueError(f"{self.app_id} has ended as {self.state}; YARN never moves it to {state}")
        if state in TERMINAL_STATES:
            final_status = final_status or _DEFAULT_FINAL[state]
            if final_status not in _FINAL_FOR_STATE[state]:
                raise ValueError(f"final status of a {state} application is one of {_FINAL_FOR_STATE[state]}")
            if not self.terminal:
                self.finished_ms = int(time.time() * 1000)
            self.progress = 100.0
        else:
            if final_status not in (None, "UNDEFINED"):
                raise ValueError(f"final status stays UNDEFINED while the application is {state}")
            final_status = "UNDEFINED"
            self.progress = {"RUNNING": 10.0}.get(state, 0.0)
        if final_status not in FINAL_STATUSES:
            raise ValueError(f"unknown final status {final_status!r}")
        self.state, self.final_status = state, final_status
        if diagnostics is not None:
            self.diagnostics = diagnostics


#: What :func:`exit_code` gives for a process that ended without leaving its exit code to read.
UNKNOWN_EXIT = -(2**31)


def signal_group(pid: int, pgid: int | None, signum: int) -> None:
    """Signal the process group of ``pid`` (only ``pid`` when it shares the emulator's own group)."""
    try:
        if pgid is None or pgid == os.getpgrp():
            os.kill(pid, signum)
        else:
            os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def exit_code(process: subprocess.Popen | None, pid: int) -> int | None:
    """The exit code of a process, None while it runs, ``UNKNOWN_EXIT`` when it cannot be read."""
    if process is not None:
        return process.poll()
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return UNKNOWN_EXIT
        try:
            with open(f"/proc/{pid}/stat") as stat:
                zombie = stat.read().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError):
            zombie = False
        return UNKNOWN_EXIT if zombie else None
    return None if done == 0 else os.waitstatus_to_exitcode(status)
