"""Training progress (progress.json, status.json's ``progress``, the metrics history) and the training
report: on hand-made run directories (no TensorFlow), on HDFS (the WebHDFS emulator), and from a real
driver run on a local cluster that loses a worker, restores a checkpoint, and exports."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_tfos.hooks.run_dir import progress_line
from airflow_tfos.runtime import report
from airflow_tfos.runtime.program import progress as progress_mod
from airflow_tfos.runtime.program.progress import ProgressTracker, epoch_position, percentile
from airflow_tfos.runtime.report import cli as report_cli
from airflow_tfos.shared.fingerprint import run_fingerprint
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from tests.conftest import REPO
from tests.runtime.test_driver_entrypoint import driver_command

PNG = b"\x89PNG\r\n\x1a\n"
PLOTS = ("metrics.png", "step_times.png", "feed.png", "timeline.png", "memory.png")


def node_ctx(run_dir, *, job_name="chief", task_index=0, attempt=0):
    return SimpleNamespace(
        run_dir=run_dir,
        job_name=job_name,
        task_index=task_index,
        executor_id=task_index,
        is_chief=job_name == "chief",
        num_workers=2,
        attempt=attempt,
        feed_shares={},
    )


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG), path
    assert len(data) > 5000, (path, len(data))


# --- progress without TensorFlow --------------------------------------------------------------------------


def test_epoch_position_and_percentiles():
    assert epoch_position(0, 10) == (1, 0.0)
    assert epoch_position(4, 10) == (1, 40.0)
    assert epoch_position(10, 10) == (1, 100.0)
    assert epoch_position(11, 10) == (2, 10.0)
    assert epoch_position(7, None) == (None, None)
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.5
    assert percentile([1.0] * 9 + [11.0], 90) == pytest.approx(2.0)


def test_a_custom_loop_tracker_writes_progress_metrics_and_step_times(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_TFOS_CLUSTER_ID", "run-1")
    rundir = RunDir(str(tmp_path))
    chief = ProgressTracker(node_ctx(str(tmp_path)), steps_per_epoch=5, epochs=2, global_batch_size=64,
                            interval=0.01, history_every=2)  # fmt: skip
    worker = ProgressTracker(node_ctx(str(tmp_path), job_name="worker"), steps_per_epoch=5, epochs=2)
    chief.begin(0)
    worker.begin(0)
    seen = []
    for epoch in range(2):
        for i in range(5):
            time.sleep(0.02)
            loss = 1.0 / (1 + epoch * 5 + i)
            chief.step({"loss": loss, "mae": 2 * loss, "note": "text is left out"})
            worker.step({"loss": loss})
            chief.flush()
            seen.append(rundir.read_progress())
        chief.epoch_end({"loss": loss, "val_loss": loss * 1.5})
        worker.epoch_end()
    chief.finish()
    worker.finish()

    midway = next(p for p in seen if p and p["step"] == 3)
    assert (midway["epoch"], midway["epoch_pct"], midway["total_steps"]) == (1, 60.0, 10)
    assert midway["eta_secs"] > 0 and midway["steps_per_sec"] > 0
    assert midway["examples_per_sec"] == pytest.approx(midway["steps_per_sec"] * 64, rel=0.01)
    final = rundir.read_progress()
    assert (final["step"], final["total_steps"], final["epoch"], final["epochs"]) == (10, 10, 2, 2)
    assert final["epoch_pct"] == 100.0 and final["finished"] and final["eta_secs"] == 0.0
    assert final["loss"] == pytest.approx(0.1) and final["metrics"]["val_loss"] == pytest.approx(0.15)
    assert "note" not in final["metrics"] and final["run_id"] == "run-1" and final["worker"] == "chief:0"

    metrics = rundir.events("metrics")
    assert [(e["epoch"], e["step"]) for e in metrics] == [(1, 5), (2, 10)]
    assert metrics[1]["val_loss"] == pytest.approx(0.15) and metrics[0]["run_id"] == "run-1"
    assert [e["step"] for e in rundir.events("step_metrics")] == [2, 4, 6, 8, 10]
    steps = rundir.events("worker_steps")
    # The first step (which builds a training loop's graph) is timed apart from the others.
    assert sorted((e["worker"], e["epoch"], e["steps"], e["first_step_secs"] is not None) for e in steps) == [
        ("chief:0", 1, 4, True), ("chief:0", 2, 5, False), ("worker:0", 1, 4, True), ("worker:0", 2, 5, False),
    ]  # fmt: skip
    for event in steps:
        assert 0.015 < event["p50_secs"] <= event["p90_secs"] <= event["max_secs"] < 5


def test_a_failing_progress_write_only_warns(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    tracker = ProgressTracker(node_ctx(str(blocker / "run")), steps_per_epoch=2, epochs=1, interval=0.01)
    with caplog.at_level(logging.WARNING, logger=progress_mod.__name__):
        tracker.step({"loss": 1.0})
        tracker.step({"loss": 0.5})
        tracker.epoch_end({"loss": 0.5})
        tracker.finish()
    assert any("cannot write progress" in r.getMessage() for r in caplog.records)
    recorded = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cannot record ")]
    assert any(" metrics event" in m for m in recorded)  # named even when written with others in one batch


def test_progress_line_shows_epochs_and_examples():
    status = {
        "state": "RUNNING",
        "step": 100,
        "progress": {
            "step": 120, "total_steps": 400, "epoch": 2, "epochs": 5, "epoch_pct": 40.0, "loss": 0.42311,
            "steps_per_sec": 35.24, "examples_per_sec": 2255.4, "eta_secs": 7.9,
        },
    }  # fmt: skip
    assert progress_line(status) == (
        "state RUNNING, checkpoint step 100, step 120/400 (30%), epoch 2/5 (40% of epoch), loss 0.4231, "
        "35.2 steps/s, 2255 examples/s, ETA 8 s"
    )


# --- the report on hand-made run directories --------------------------------------------------------------


def failed_run(rundir: RunDir) -> None:
    """A run that failed on its first attempt: no feed, no export, one checkpoint."""
    rundir.write_spec({"train_fn": "pkg.mod:train", "num_nodes": 2, "input_mode": "TENSORFLOW",
                       "data": {"format": "parquet", "path": "hdfs:///data/<day>"}})  # fmt: skip
    rundir.write_status("FAILED", application_id="app-1", error="ValueError: <script>alert(1)</script>")
    rundir.add_event("application", application_id="app-1", spec_hash="abc")
    rundir.add_event("attempt", attempt=0, run_id="r1")
    for step in range(1, 9):
        rundir.add_event("step_metrics", step=step, epoch=1, attempt=0, loss=2.0 / step, accuracy=0.1 * step)
    rundir.add_event("metrics", step=5, epoch=1, attempt=0, loss=0.5, accuracy=0.5, val_loss=0.7, val_accuracy=0.4)
    rundir.add_event("worker_steps", worker="chief:0", attempt=0, epoch=1, step=5, steps=5, mean_secs=0.02,
                     p50_secs=0.02, p90_secs=0.03, max_secs=0.04)  # fmt: skip
    rundir.publish_checkpoint(rundir.checkpoint_staging(5), 5, epoch=1)
    rundir.add_event("checkpoint", step=5, epoch=1, seconds=0.1, path="x")
    rundir.add_event("node_memory", worker="chief:0", attempt=0, peak_rss_mb=812.5, ok=False)
    rundir.add_event("attempt_failed", attempt=0, run_id="r1", reason="lost <worker>", retrying=False)
    rundir.add_event("failed", error="ValueError: <script>alert(1)</script>")
    rundir.add_event("application_end", application_id="app-1", state="FAILED", exit_code=1, seconds=42.0)


def test_the_report_of_a_failed_run_without_feed_or_export(tmp_path):
    rundir = RunDir(str(tmp_path))
    failed_run(rundir)
    data = tmp_path / "data"
    data.mkdir()
    (data / "part-0.parquet").write_bytes(b"p" * 321)
    rundir.write_fingerprint(run_fingerprint({"data": {"format": "parquet", "path": str(data)}}))
    path = report.write_report(rundir)
    assert path == f"{tmp_path}/report/report.html"
    page = (tmp_path / "report" / "report.html").read_text()
    assert f"{rundir.read_fingerprint()['hash']} (data: 1 files, 321 bytes)" in page
    names = sorted(p.name for p in (tmp_path / "report").glob("*.png"))
    assert names == ["memory.png", "metrics.png", "step_times.png", "timeline.png"]  # no feed plot
    for name in names:
        assert f'src="{name}"' in page
        assert_png(tmp_path / "report" / name)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "lost &lt;worker&gt;" in page and "hdfs:///data/&lt;day&gt;" in page
    assert "No model was exported" in page and "No data was fed from Spark" in page
    assert "ckpt-5" in page and "app-1" in page and "1 (1 failed)" in page
    assert "attempt_failed" in page and "Not listed: 1 metrics, 1 node_memory, 8 step_metrics" in page


def test_the_report_of_direct_reads_draws_no_feed_rates_and_says_why(tmp_path):
    """Nodes that read their Parquet files themselves record rows, not a rate: no feed plot of zeros."""
    rundir = RunDir(str(tmp_path))
    failed_run(rundir)
    for worker in ("chief:0", "worker:0"):
        rundir.add_event("feed", worker=worker, attempt=0, rows=500, splits={"train": 500}, source="parquet")
    report.write_report(rundir)
    page = (tmp_path / "report" / "report.html").read_text()
    assert not (tmp_path / "report" / "feed.png").exists() and 'src="feed.png"' not in page
    assert "The nodes read their shares of the Parquet files themselves" in page
    assert "No data was fed from Spark" not in page


def test_the_report_cli_and_an_empty_directory(tmp_path, capsys):
    assert report_cli.main(["--run-dir", str(tmp_path / "nothing")]) == 1
    assert "not a run directory" in capsys.readouterr().err
    rundir = RunDir(str(tmp_path / "run"))
    rundir.write_spec({"train_fn": "pkg.mod:train", "num_nodes": 1})
    assert report_cli.main(["--run-dir", rundir.uri]) == 0
    assert capsys.readouterr().out.strip() == f"{rundir.uri}/report/report.html"
    page = Path(rundir.uri, "report", "report.html").read_text()
    assert "No training was recorded yet" in page and not list(Path(rundir.uri, "report").glob("*.png"))


def test_progress_and_the_report_on_hdfs(tmp_path):
    with WebHDFSEmulator() as emu:
        uri = emu.uri("/runs/r")
        rundir = RunDir(uri)
        failed_run(rundir)
        tracker = ProgressTracker(node_ctx(uri), steps_per_epoch=2, epochs=1, interval=0.01)
        tracker.step({"loss": 1.0})
        tracker.step({"loss": 0.5})
        tracker.finish()
        assert rundir.read_progress()["step"] == 2
        assert report.write_report(rundir) == f"{uri}/report/report.html"
        html = Path(emu.local_path("/runs/r/report/report.html")).read_text()
        assert 'src="timeline.png"' in html
        assert_png(Path(emu.local_path("/runs/r/report/timeline.png")))
        creates = [r.path for r in emu.requests if r.op == "CREATE" and "/report/" in r.path]
        assert creates[-1].startswith("/runs/r/report/.report.html")  # the page is written after its images


# --- a real driver run --------------------------------------------------------------------------------------


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
    from tests.runtime import programs

    args = {"steps_per_epoch": 6, "epochs": 2, "every": 100}
    result = run(sc, programs.tracked_training, args, num_nodes=nodes, run_dir=str(tmp_path), timeout=300)
    assert result["step"] == 12
    assert_the_last_step_of_each_epoch_reads_as_the_epoch(RunDir(str(tmp_path)))


@pytest.mark.integration
def test_a_driver_run_reports_progress_while_training_and_writes_the_report(tmp_path, linear_parquet):
    rundir = RunDir(str(tmp_path / "run"))
    data = {"format": "parquet", "path": linear_parquet}
    rundir.write_spec({
        "train_fn": "tests.runtime.programs:tracked_training",
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
