"""One multi-host cluster (network namespaces, Spark standalone, emulators across hosts), shared by every
multi-host test and stopped when they are done."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from airflow_tfos.testing.hosts import HostsUnavailable
from airflow_tfos.testing.multihost import MultiHostLab
from tests.conftest import REPO, write_linear_parquet
from tests.multihost.user_code import write_user_code


@pytest.fixture(scope="package")
def lab(tmp_path_factory):
    logs = tmp_path_factory.mktemp("multihost-logs")
    try:
        lab = MultiHostLab(log_dir=str(logs)).start()
    except HostsUnavailable as exc:
        pytest.skip(f"MULTI-HOST TESTS NOT RUN: this machine refused network namespaces: {exc}")
    try:
        yield lab
    finally:
        lab.stop()
    # nothing of the hosts is left: no namespace, no link, no process of theirs
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, timeout=30).stdout
    assert lab.hosts.prefix not in netns + links, (netns, links)
    assert all(p.poll() is not None for _, p in lab.hosts.processes)


@pytest.fixture(scope="session")
def user_code(tmp_path_factory) -> Path:
    """The user's training module and driver, in a folder on no test path."""
    return write_user_code(tmp_path_factory.mktemp("user-code"))


@pytest.fixture(scope="session")
def linear_data(tmp_path_factory) -> str:
    return write_linear_parquet(tmp_path_factory.mktemp("mh-data") / "linear", seed=11)


def start_training(lab, user_code: Path, run_dir: str, data: str, args=None, options=None, name="drive"):
    """Start the user's driver on the driver host; its output goes to ``<log_dir>/<name>.out``."""
    env = lab.env("driver", PYTHONPATH=os.pathsep.join([str(user_code), str(REPO), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, str(user_code / "drive.py"), lab.master, run_dir, data]
    argv += [json.dumps(args or {"epochs": 4, "every": 10}), json.dumps(options or {})]
    out = open(lab.hosts.log_dir / f"{name}.out", "w")  # noqa: SIM115 (handed to the child)
    try:
        return lab.hosts.spawn("driver", argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=str(user_code))
    finally:
        out.close()


def training_result(lab, process, name="drive", timeout=300) -> dict:
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    out = (lab.hosts.log_dir / f"{name}.out").read_text()
    assert process.returncode == 0, out[-5000:]
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])


def node_processes(lab, host: str) -> list[psutil.Process]:
    """The TF node processes and Spark executors alive on ``host``."""
    found = []
    for pid in lab.hosts.pids(host):
        try:
            cmdline = " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            continue
        if "airflow_tfos.runtime.program.child" in cmdline or "CoarseGrainedExecutorBackend" in cmdline:
            found.append(psutil.Process(pid))
    return found


def wait_no_node_processes(lab, hosts, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(node_processes(lab, h) for h in hosts):
            return
        time.sleep(0.5)
    left = {h: [p.pid for p in node_processes(lab, h)] for h in hosts}
    raise AssertionError(f"TF node processes or executors still alive after {within} s: {left}")
