"""Helpers for the runtime's integration tests."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psutil


def node_processes(run_id: str) -> list[psutil.Process]:
    """Every live TF node process of run ``run_id`` on this machine."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if "airflow_tfos.runtime.child" in cmdline and f"--run-id={run_id}" in cmdline:
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
    """A spec.json of ``tests.runtime.programs:spec_training`` on the parquet data at ``data_path``."""
    return {
        "train_fn": "tests.runtime.programs:spec_training",
        "args": {"epochs": 2, "every": 5},
        "num_nodes": 2,
        "input_mode": "SPARK",
        "data": {"format": "parquet", "path": data_path},
        "feed": {"features": ["x"], "label": "y", "batch_size": 30},
        **extra,
    }
