"""A TF node's child process group is signalled only while its id is surely the child's; port clashes retry."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time

import psutil
import pytest

from airflow_tfos.runtime.node.process import ChildProcess
from airflow_tfos.runtime.program import child as child_module
from airflow_tfos.shared import procgroup


@pytest.fixture
def killpg_calls(monkeypatch):
    """Every ``os.killpg`` call (passed on to the real one)."""
    calls: list[tuple[int, int]] = []
    real = os.killpg

    def recording(pgid: int, sig: int) -> None:
        calls.append((pgid, sig))
        real(pgid, sig)

    monkeypatch.setattr(procgroup.os, "killpg", recording)
    return calls


def start(script: str) -> ChildProcess:
    return ChildProcess([sys.executable, "-c", script], env=dict(os.environ), name="test-child").start()


def test_a_reaped_child_whose_group_is_empty_is_not_signalled(killpg_calls):
    proc = start("pass")
    assert proc.wait(30) == 0  # reaped: its pid, the group's id, is free for anyone now
    assert procgroup.group_members(proc.pid) == []
    assert proc.stop(1.0) == 0
    assert killpg_calls == []


def test_what_a_reaped_child_left_in_its_group_is_killed(tmp_path, killpg_calls):
    marker = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        f"open({str(marker)!r}, 'w').write(str(p.pid))\n"
    )
    proc = start(script)
    assert proc.wait(30) == 0
    grandchild = psutil.Process(int(marker.read_text()))
    assert grandchild.is_running() and os.getpgid(grandchild.pid) == proc.pid
    proc.stop(1.0)
    grandchild.wait(10)  # raises TimeoutExpired if it was left behind
    assert killpg_calls == [(proc.pid, signal.SIGKILL)]


def test_a_running_child_is_stopped_with_its_group_before_it_is_reaped(killpg_calls):
    proc = start("import time; time.sleep(120)")
    time.sleep(0.2)
    code = proc.stop(5.0)
    assert code == -signal.SIGTERM
    assert killpg_calls == [(proc.pid, signal.SIGTERM), (proc.pid, signal.SIGKILL)]


class UnknownError(Exception):
    """Named as TensorFlow's ``tf.errors.UnknownError``, which a gRPC server that cannot bind raises."""


def test_a_port_taken_before_tf_binds_it_is_retryable(tmp_path):
    with socket.socket() as busy, socket.socket() as late:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(OSError) as clash:
            late.bind(busy.getsockname())
    assert child_module.is_retryable(clash.value)
    # what TF 2.21 raises from tf.distribute.Server or MultiWorkerMirroredStrategy on a taken port
    assert child_module.is_retryable(UnknownError("Could not start gRPC server"))
    assert not child_module.is_retryable(UnknownError("Failed to parse the model"))
    assert not child_module.is_retryable(ValueError("Attempt to convert a value (PerReplica:{...})"))
    child_module._write_error(tmp_path, UnknownError("Could not start gRPC server"))
    record = json.loads((tmp_path / child_module.ERROR).read_text())
    assert record["retryable"] is True and record["type"] == "UnknownError"
