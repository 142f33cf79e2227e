"""A frozen executor on a local cluster of its own (three one-core executors, two TF nodes): worker:0 stops its
executor's JVM with SIGSTOP at step 10 and its TF process trains on to the last step, as the chief's does. The
run ends soon after the last node did, not when Spark's heartbeat times out (120 s, Spark's default here): the
driver's end watch sees every node's end, cancels the attempt, drops the frozen executor (:mod:`eviction`), and
a fresh TF cluster, on the replacement, restores the last checkpoint and returns the result. Which executors
are dropped, and the watch's rule: tests/unit/airflow_tfos/runtime/driver/test_eviction.py and test_ended.py."""

from __future__ import annotations

import json
import sys

import psutil
import pytest

from airflow_tfos.shared.rundir import RunDir
from tests.integration.spark.test_driver_process import start_driver
from tests.integration.spark.test_recovery import PLANNED_STEPS

pytestmark = pytest.mark.integration

#: The end of the run, from the last TF node's end, that the run must stay under.
END_WITHIN_SECS = 60


def end_frozen_jvm(pid: int | None) -> bool:
    """SIGKILL the executor JVM ``pid`` (stopped by the test's own program) if it is still there; whether it was."""
    if pid is None:
        return False
    try:
        process = psutil.Process(pid)
        if "CoarseGrainedExecutorBackend" not in " ".join(process.cmdline()):
            return False
        process.kill()
        process.wait(10)
        return True
    except psutil.NoSuchProcess:
        return False


def test_a_run_whose_executor_froze_ends_within_a_minute_of_its_last_node(tmp_path):
    driver = start_driver("freeze", tmp_path)
    try:
        out, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
            out, err = driver.communicate()
        frozen = RunDir(str(tmp_path)).events("drill_freeze")
        frozen_pid = frozen[0]["pid"] if frozen else None
        left_frozen = end_frozen_jvm(frozen_pid)  # Spark's worker ends it with SIGTERM, which a stopped JVM holds
    assert driver.returncode == 0, err[-4000:]
    assert frozen_pid is not None, "the program did not freeze its executor: " + err[-3000:]
    ended_at = float(next(line for line in out.splitlines() if line.startswith("ENDED "))[6:])
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    rundir = RunDir(str(tmp_path))

    # The old TF cluster trained to the end; the new one restored its last checkpoint and redid nothing
    assert result == {"step": PLANNED_STEPS, "attempt": 1}
    (hung,) = rundir.events("stage_hung")
    assert hung["attempt"] == 0 and sorted(hung["ended"]) == ["chief:0", "worker:0"], hung
    (restore,) = rundir.events("restore")
    assert (restore["step"], restore["attempt"]) == (PLANNED_STEPS, 1)
    (failed,) = rundir.events("attempt_failed")
    assert failed["reason"].startswith("every TF node ended (chief:0, worker:0) but Spark's stage did not within")
    (dropped,) = rundir.events("executors_dropped")
    assert [e["reason"].split(";")[0] for e in dropped["executors"]] == [
        "its TF node worker:0 ended, but the executor does not answer"
    ]
    # ... so the run ended well within a minute of the last node's end (the clock: that node's record)
    last_node_end = max(hung["ended"].values())
    took = ended_at - last_node_end
    sys.stdout.write(
        f"frozen executor: the run ended {took:.1f} s after its last TF node (the frozen JVM "
        f"{'was still there at the end' if left_frozen else 'was gone'})\n"
    )
    assert 0 < took < END_WITHIN_SECS, took
