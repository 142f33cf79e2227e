"""Helpers for the runtime's tests: node processes, the records test programs write, the driver's command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.conftest import REPO


def node_processes(run_id: str) -> list[psutil.Process]:
    """Every live TF node process of run ``run_id`` on this machine."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "airflow_tfos.runtime.program.child" in cmdline and f"--cluster-id={run_id}" in cmdline:
            found.append(proc)
    return found


def assert_no_node_processes(run_id: str, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not node_processes(run_id):
            return
        time.sleep(0.25)
    left = [(p.pid, p.status()) for p in node_processes(run_id)]
    raise AssertionError(f"TF node processes of run {run_id} still alive after {within} s: {left}")


def read_records(run_dir: str, prefix: str) -> dict[str, dict]:
    """Read the ``<prefix>-<job>-<index>.json`` files that test programs write, keyed by ``job:index``."""
    records = {}
    for path in Path(run_dir).glob(f"{prefix}-*.json"):
        job, index = path.stem[len(prefix) + 1 :].rsplit("-", 1)
        records[f"{job}:{index}"] = json.loads(path.read_text())
    return records


def wait_for_records(run_dir: str, prefix: str, count: int, within: float = 90.0) -> dict[str, dict]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        records = read_records(run_dir, prefix)
        if len(records) >= count:
            return records
        time.sleep(0.25)
    raise AssertionError(f"only {read_records(run_dir, prefix)} of {count} {prefix} records after {within} s")


def training_spec(data_path, **extra) -> dict:
    """A spec.json of ``tests.support.programs:spec_training`` on the parquet data at ``data_path``."""
    return {
        "train_fn": "tests.support.programs:spec_training",
        "args": {"epochs": 2, "every": 5},
        "num_nodes": 2,
        "input_mode": "SPARK",
        "data": {"format": "parquet", "path": data_path},
        "feed": {"features": ["x"], "label": "y", "batch_size": 30},
        **extra,
    }


def driver_command(run_dir) -> list[str]:
    """The driver entrypoint (what spark-submit runs) on a local-cluster[2,1,1024] master."""
    return [
        sys.executable, "-m", "airflow_tfos.runtime.driver", "--run-dir", str(run_dir),
        "--master", "local-cluster[2,1,1024]", "--heartbeat-secs", "0.5",
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=768m",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
        "--conf", f"spark.executorEnv.PYTHONPATH={os.environ['PYTHONPATH']}",
    ]  # fmt: skip


def run_driver(run_dir, timeout=400) -> subprocess.CompletedProcess:
    """Run the driver entrypoint to its end."""
    return subprocess.run(driver_command(run_dir), cwd=REPO, capture_output=True, text=True, timeout=timeout)


def feed_balance(run_dir: str, split: str = "train") -> dict[str, dict]:
    """Per node (``job:index``), what its ``feed`` event says one epoch feeds of ``split``: ``rows`` (the node's
    rows), ``rows_per_epoch``, ``repeated`` and ``dropped``. Nodes that hold none of it are left out."""
    from airflow_tfos.shared import events
    from airflow_tfos.shared.rundir import RunDir

    found = {}
    for event in RunDir(run_dir).events(events.FEED):
        if split in event.get("balance", {}):
            rows = event["splits"][split] if "splits" in event else event["rows"]
            found[event["worker"]] = {"rows": rows, **event["balance"][split]}
    return found


_BALANCE_LINE = re.compile(r"TF cluster (\S+): (?:training data: \d+ steps|TFCluster\.train: \d+ epoch)[^:]*: (.*)$")
_NODE_PART = re.compile(r"(\w+:\d+) (\d+) rows(?: \(\+(\d+) repeated\))?(?: \((\d+) left out\))?")


def logged_balance(log_text: str, run_id: str) -> dict[str, dict]:
    """Per node, the rows, repeated and dropped rows that the driver's log line of run ``run_id`` states for the
    training data (``... on every node: chief:0 102 rows (+18 repeated), worker:0 101 rows (1 left out)``)."""
    for line in log_text.splitlines():
        found = _BALANCE_LINE.search(line)
        if found and found.group(1) == run_id:
            return {
                node: {"rows": int(rows), "repeated": int(rep or 0), "dropped": int(drop or 0)}
                for node, rows, rep, drop in _NODE_PART.findall(found.group(2))
            }
    raise AssertionError(f"no balance line of run {run_id} in the driver's log")


def report_visitation(cell: str, ids: list[int], every_row_once: int, repeated: int = 0, dropped: int = 0) -> None:
    """Print one line of the visitation matrix's figures (``pytest -k visitation -s | grep VISITATION``): the rows
    trained in an epoch and the sum of their ids, beside the sum every row once gives and what balance stated."""
    print(  # noqa: T201 (the figures a reader of the matrix wants, shown with -s)
        f"VISITATION {cell}: {len(ids)} rows trained, id sum {sum(ids)} (every row once: {every_row_once}), "
        f"{repeated} repeated, {dropped} left out",
        flush=True,
    )


def webhdfs_remote_exception(response, status: int, exception: str, java_class: str) -> str:
    """Assert that a WebHDFS answer is Hadoop's error: ``status``, JSON, one ``RemoteException`` of ``exception``
    (``java_class``) with exactly its three fields; return its message."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["Content-Type"].split(";")[0] == "application/json"
    body = response.json()
    assert set(body) == {"RemoteException"}
    assert set(body["RemoteException"]) == {"exception", "javaClassName", "message"}
    assert body["RemoteException"]["exception"] == exception
    assert body["RemoteException"]["javaClassName"] == java_class
    return body["RemoteException"]["message"]
