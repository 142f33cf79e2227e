"""Child processes that die with their parent.

Each TF node runs in a fresh Python process started by its Spark task: TensorFlow's collective state
cannot be reset inside a process, and Spark reuses its Python workers, so TF never runs in the
worker itself. The child is the leader of its own process group (so a stop reaches whatever it
started, TensorBoard included) and gets SIGKILL from the kernel if the Spark task's process dies,
which is how a cancelled or killed task leaves no TF process behind.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence

from airflow_tfos.shared.procgroup import signal_group

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the child's own parent watchdog still applies
        pass


class ChildProcess:
    """A supervised child process whose stderr is forwarded and whose tail is kept.

    :param argv: the command line.
    :param env: the complete environment of the child.
    :param name: a label for the logs.
    :param tail_lines: how many of the last stderr lines to keep for error messages.
    :param cwd: the child's working directory (None: the parent's).
    :param takes_input: give the child a pipe as stdin, for one message sent later (:meth:`send`); the
        child reads it to its end, and reads an empty message if this process dies first.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        name: str,
        tail_lines: int = 60,
        cwd: str | None = None,
        takes_input: bool = False,
    ):
        self.argv = list(argv)
        self.takes_input = takes_input
        self.env = dict(env)
        self.name = name
        self.cwd = cwd
        self._tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._proc: subprocess.Popen | None = None
        self._pump: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> ChildProcess:
        self._proc = subprocess.Popen(
            self.argv,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.PIPE if self.takes_input else subprocess.DEVNULL,
            stdout=None,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self._pump = threading.Thread(target=self._forward_stderr, name=f"{self.name}-stderr", daemon=True)
        self._pump.start()
        log.info("started %s (pid %d)", self.name, self._proc.pid)
        return self

    def _forward_stderr(self) -> None:
        assert self._proc is not None
        assert self._proc.stderr is not None
        for raw in iter(self._proc.stderr.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            self._tail.append(line)
            try:
                sys.stderr.write(line)
            except (OSError, ValueError):
                pass

    def send(self, message: bytes) -> bool:
        """Write ``message`` to the child's stdin and close it; False if the child is gone already."""
        assert self._proc is not None and self._proc.stdin is not None, "start(takes_input=True) first"
        try:
            self._proc.stdin.write(message)
            self._proc.stdin.close()
        except OSError:  # BrokenPipeError: the child exited before reading
            return False
        return True

    def poll(self) -> int | None:
        assert self._proc is not None
        return self._proc.poll()

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the child; return its exit code, or None if it still runs after ``timeout``."""
        assert self._proc is not None
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if self._pump is not None:
            self._pump.join(timeout=5)
        return code

    def stderr_tail(self) -> str:
        return "".join(self._tail)

    def stop(self, grace_secs: float = 5.0) -> int | None:
        """Stop the child's whole process group: SIGTERM, then SIGKILL after ``grace_secs``.

        The group is signalled before the child is reaped, while its id is surely the child's; a child
        reaped already (by :meth:`wait`) leaves a group that is signalled only if it still has members.
        """
        if self._proc is None:
            return None
        pgid = self._proc.pid  # the child leads its own session and process group
        if not self._exited():
            signal_group(pgid, signal.SIGTERM, leader_unreaped=True)
            deadline = time.monotonic() + grace_secs
            while not self._exited() and time.monotonic() < deadline:
                time.sleep(0.05)
        # Whatever the child started (TensorBoard, data loaders) goes too, even if it exited itself.
        signal_group(pgid, signal.SIGKILL, leader_unreaped=self._proc.returncode is None)
        code = self._proc.wait()
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            try:
                self._proc.stdin.close()
            except OSError:
                pass
        if self._pump is not None:
            self._pump.join(timeout=5)
        return code

    def _exited(self) -> bool:
        """Whether the child has ended, without reaping it (a zombie keeps its pid, the group's id, taken)."""
        assert self._proc is not None
        if self._proc.returncode is not None:
            return True
        if not hasattr(os, "waitid"):
            return self._proc.poll() is not None
        try:
            return os.waitid(os.P_PID, self._proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:  # reaped meanwhile by another thread's poll()
            return True


def describe_exit(code: int) -> str:
    """Say how a process ended, naming the signal when it was killed."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = (
            " (often the kernel's out-of-memory killer, or YARN enforcing memoryOverhead)"
            if (-code == signal.SIGKILL)
            else ""
        )
        return f"process killed by {name}{hint}"
    return f"process exited with code {code}"
