"""The stall watchdog on a real local cluster: a TF node process frozen with SIGSTOP mid-training is
named, its attempt cancelled, and a fresh TF cluster resumes from the latest checkpoint; a checkpoint save
longer than ``stall_timeout`` does not fire it (driver_script's ``stall`` scenario: watchdog 4 s, the
chief's save at step 10 takes 6 s)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from airflow_tfos.shared.rundir import RunDir
from tests.integration.spark.test_driver_process import start_driver
from tests.integration.spark.test_recovery import assert_recovered, wait_for_progress

pytestmark = pytest.mark.integration


def test_a_frozen_tf_node_is_named_and_training_resumes_from_the_checkpoint(tmp_path):
    driver = start_driver("stall", tmp_path)
    frozen = None
    try:
        record = wait_for_progress(tmp_path, "worker-0", min_step=22)
        frozen = record["pid"]
        os.kill(frozen, signal.SIGSTOP)
        frozen_at = time.time()
        step_at_freeze = json.loads((tmp_path / "progress-worker-0.json").read_text())["step"]
        out, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
        if frozen is not None:
            try:
                os.kill(frozen, signal.SIGKILL)  # if the run did not end it
            except ProcessLookupError:
                pass
    assert driver.returncode == 0, err[-4000:]
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    rundir = RunDir(str(tmp_path))
    assert_recovered(step_at_freeze, result, rundir)
    # Exactly one stall, after the freeze (none during the 6 s save at step 10), naming the frozen node
    [stall] = rundir.events("stall")
    assert stall["time"] > frozen_at and stall["attempt"] == 0
    named = {n["node"]: n["step"] for n in stall["nodes"]}
    assert "worker:0" in named and abs(named["worker:0"] - step_at_freeze) <= 1, (named, step_at_freeze)
    reason = rundir.events("attempt_failed")[0]["reason"]
    assert "training stalled" in reason and "worker:0 (last step" in reason
    saved = {e["step"]: e["time"] for e in rundir.events("checkpoint") if e["step"] in (5, 10)}
    assert saved[10] - saved[5] >= 6  # the slow save did happen (it sleeps before step 10 is published)
    # Resumed within 60 s of the freeze, with at most one checkpoint interval redone (assert_recovered)
    resumed = min(
        json.loads(p.read_text())["time"]
        for p in tmp_path.glob("progress-*.json")
        if json.loads(p.read_text())["attempt"] >= 1
    )
    assert resumed - frozen_at < 60, resumed - frozen_at
