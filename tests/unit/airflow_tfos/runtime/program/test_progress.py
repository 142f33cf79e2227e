"""Training progress without TensorFlow: progress.json, status.json's ``progress``, the metrics history and
step times a node's tracker writes, and the progress line the operators log. From a real driver run on a
local cluster: tests/integration/spark/test_progress_report.py."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import pytest

from airflow_tfos.hooks.run_dir import progress_line
from airflow_tfos.runtime.program import progress as progress_mod
from airflow_tfos.runtime.program.progress import ProgressTracker, epoch_position, percentile
from airflow_tfos.shared.rundir import RunDir


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
