"""Training progress (progress.json, status.json's ``progress``, the metrics history) and the training
report from real runs on a local cluster: a driver run that loses a worker, restores a checkpoint, and
exports. On hand-made run directories: tests/unit/airflow_tfos/runtime/program/test_progress.py and
tests/unit/airflow_tfos/runtime/test_report.py."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from airflow_tfos.hooks.run_dir import progress_line
from airflow_tfos.shared.rundir import RunDir
from tests.conftest import REPO
from tests.support.helpers import driver_command
from tests.unit.airflow_tfos.runtime.test_report import PLOTS, assert_png


@pytest.fixture
def linear_parquet(tmp_path) -> str:
    """600 rows: x (2 doubles), y = 3 x0 - 2 x1 + 1."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = np.random.default_rng(1).random((600, 2))
    y = 3 * x[:, 0] - 2 * x[:, 1] + 1
    path = tmp_path / "linear"
    path.mkdir()
    pq.write_table(pa.table({"x": pa.array(list(x)), "y": pa.array(y)}), path / "part-0.parquet")
    return str(path)


def assert_the_last_step_of_each_epoch_reads_as_the_epoch(rundir: RunDir) -> None:
    """A step's running metrics at the end of an epoch are the epoch's metrics (Keras computes those from
    the metrics' own values, over all replicas): a loss or mae summed over the replicas would read N times."""
    points = {(e["attempt"], e["step"]): e for e in rundir.events("step_metrics")}
    epochs = rundir.events("metrics")
    assert epochs
    for epoch in epochs:
        point = points[(epoch["attempt"], epoch["step"])]
        for name in ("loss", "mae"):
            assert point[name] == pytest.approx(epoch[name], rel=1e-4), (name, point, epoch)


@pytest.mark.integration
@pytest.mark.parametrize("nodes", [1, 3])
def test_per_step_metrics_are_values_over_all_replicas_not_their_sum(sc, tmp_path, nodes):
    from airflow_tfos.runtime import run
    from tests.support import programs

    args = {"steps_per_epoch": 6, "epochs": 2, "every": 100}
    result = run(sc, programs.tracked_training, args, num_nodes=nodes, run_dir=str(tmp_path), timeout=300)
    assert result["step"] == 12
    assert_the_last_step_of_each_epoch_reads_as_the_epoch(RunDir(str(tmp_path)))


@pytest.mark.integration
def test_a_driver_run_reports_progress_while_training_and_writes_the_report(tmp_path, linear_parquet):
    rundir = RunDir(str(tmp_path / "run"))
    data = {"format": "parquet", "path": linear_parquet}
    rundir.write_spec({
        "train_fn": "tests.support.programs:tracked_training",
        "args": {"epochs": 2, "every": 5, "sleep": 0.15, "fail_at": 7},
        "num_nodes": 2, "input_mode": "SPARK", "data": data, "validation_data": data,
        # through Spark: its read-and-spill rates are checked below (direct reads happen while training: no rate)
        "feed": {"features": ["x"], "label": "y", "batch_size": 30, "read": "spark"},
    })  # fmt: skip
    driver = subprocess.Popen(driver_command(rundir.uri), cwd=REPO, stderr=subprocess.PIPE, text=True)
    running = []
    try:
        deadline = time.monotonic() + 400
        while driver.poll() is None and time.monotonic() < deadline:
            status = rundir.read_status() or {}
            if status.get("state") == "RUNNING" and status.get("progress"):
                running.append(status)
            time.sleep(0.1)
        _, err = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 0, err[-4000:]

    # While it trained, status.json carried the chief's progress, which the operator logs.
    assert running, "status.json never showed progress while RUNNING"
    seen = running[-1]["progress"]
    assert 0 < seen["step"] <= 20 and seen["total_steps"] == 20 and seen["epochs"] == 2
    assert f"step {seen['step']}/20 (" in progress_line(running[-1])
    # 600 rows, 300 a node, batches of 30: 10 steps an epoch, 2 epochs; attempt 1 resumed from step 5.
    final = rundir.read_progress()
    assert (final["step"], final["total_steps"], final["epoch"], final["epochs"]) == (20, 20, 2, 2)
    assert final["epoch_pct"] == 100.0 and final["finished"] and final["attempt"] == 1
    assert final["loss"] is not None and "mae" in final["metrics"] and final["steps_per_sec"] > 0
    assert final["global_batch_size"] == 60 and final["examples_per_sec"] == pytest.approx(
        60 * final["steps_per_sec"], rel=0.01
    )
    status = rundir.read_status()
    assert status["state"] == "SUCCEEDED" and status["progress"]["step"] == 20
    assert "step 20/20 (100%), epoch 2/2 (100% of epoch)" in progress_line(status)

    metrics = rundir.events("metrics")
    assert [(e["epoch"], e["step"], e["attempt"]) for e in metrics] == [(1, 10, 1), (2, 20, 1)]
    assert all(e["val_loss"] is not None and e["mae"] is not None for e in metrics)
    points = rundir.events("step_metrics")
    assert {e["attempt"] for e in points} == {0, 1} and max(e["step"] for e in points) == 20
    assert_the_last_step_of_each_epoch_reads_as_the_epoch(rundir)
    steps = {(e["worker"], e["attempt"], e["epoch"]) for e in rundir.events("worker_steps")}
    assert {(w, 1, epoch) for w in ("chief:0", "worker:0") for epoch in (1, 2)} <= steps
    memory = {(e["worker"], e["attempt"], e["ok"]): e["peak_rss_mb"] for e in rundir.events("node_memory")}
    assert memory[("worker:0", 0, False)] > 100  # the worker that failed recorded its peak too
    assert memory[("chief:0", 1, True)] > 100 and memory[("worker:0", 1, True)] > 100
    feeds = rundir.events("feed")  # each node, on each attempt, read its partition from Spark again
    assert sorted((e["worker"], e["attempt"]) for e in feeds) == [
        ("chief:0", 0), ("chief:0", 1), ("worker:0", 0), ("worker:0", 1),
    ]  # fmt: skip
    for event in feeds:
        assert event["splits"] == {"train": 300, "validation": 300} and event["rows"] == 600
        assert event["rows_per_sec"] == pytest.approx(600 / event["seconds"], rel=0.02)
    assert [e["exit_code"] for e in rundir.events("application_end")] == [0]

    # The driver wrote the report at the end: every plot, the export's metrics, the timeline's events.
    folder = Path(rundir.uri, "report")
    page = (folder / "report.html").read_text()
    for name in PLOTS:
        assert f'src="{name}"' in page
        assert_png(folder / name)
    export = rundir.export_success()
    assert f"{export['metrics']['loss']:.6g}" in page
    for kind in ("attempt_failed", "restore", "checkpoint", "export", "application_end"):
        assert f"<td>{kind}</td>" in page
    assert status["application_id"] in page and "2 (1 failed)" in page
    assert os.path.getmtime(folder / "report.html") >= max(os.path.getmtime(folder / n) for n in PLOTS)
    json.loads((Path(rundir.uri) / "progress.json").read_text())  # plain JSON
