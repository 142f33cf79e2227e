"""Automatic recovery inside one application, on a real local cluster: a TF worker's process is killed
mid-training; a fresh TF cluster restores the latest checkpoint and the run finishes at the planned step.

A whole executor JVM killed is drill 2 (tests/drills): the same checks, in a DAG run with a real scheduler
and triggerer."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from airflow_tfos.shared.rundir import RunDir
from tests.integration.spark.test_driver_process import start_driver

pytestmark = pytest.mark.integration

PLANNED_STEPS = 60  # 3 epochs of 20 steps (driver_script's "recover" scenario)
EVERY = 5


def wait_for_progress(run_dir, label: str, min_step: int, within: float = 180) -> dict:
    path = run_dir / f"progress-{label}.json"
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            record = json.loads(path.read_text())
            if record["step"] >= min_step and record["attempt"] == 0:
                return record
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no progress to step {min_step} on {label} within {within} s")


def train_and_kill(tmp_path, kill) -> tuple[int, dict, RunDir]:
    driver = start_driver("recover", tmp_path)
    try:
        record = wait_for_progress(tmp_path, "worker-0", min_step=22)
        kill(record["pid"])
        step_at_kill = json.loads((tmp_path / "progress-worker-0.json").read_text())["step"]
        out, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 0, err[-4000:]
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    return step_at_kill, result, RunDir(str(tmp_path))


def assert_recovered(step_at_kill: int, result: dict, rundir: RunDir) -> None:
    assert result["step"] == PLANNED_STEPS  # finished the planned steps, no more, no fewer
    assert result["attempt"] >= 1  # ... on a fresh TF cluster
    restores = rundir.events("restore")
    assert restores, "no restore event"
    restored = restores[0]["step"]
    assert restored % EVERY == 0 and restored > 0
    # Steps trained again: at most one checkpoint interval (+1 for the progress file lagging a step).
    assert 0 <= step_at_kill - restored <= EVERY + 1, (step_at_kill, restored)
    failed = rundir.events("attempt_failed")
    assert failed and failed[0]["retrying"]
    assert [e["attempt"] for e in rundir.events("attempt")][:2] == [0, 1]
    success = rundir.export_success()  # the chief exported after the recovery, atomically
    assert success["step"] == PLANNED_STEPS
    assert rundir.storage.exists(rundir.path("export", "saved_model.pb"))


def test_killing_a_tf_worker_process_mid_training_recovers_from_the_checkpoint(tmp_path):
    step_at_kill, result, rundir = train_and_kill(tmp_path, lambda pid: os.kill(pid, signal.SIGKILL))
    assert_recovered(step_at_kill, result, rundir)
    assert "process killed by SIGKILL" in rundir.events("attempt_failed")[0]["reason"]
