"""RunCheckpointer and fit_resumable under ParameterServerStrategy (ps, chief and 2 workers), the parameter
server killed mid-run; the cluster runs in a driver process of its own (tests/support/ps_driver.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from airflow_tfos.shared.rundir import RunDir
from tests.conftest import REPO
from tests.support.helpers import read_records

pytestmark = pytest.mark.integration

EVERY = 10  # steps between checkpoints
#: 800 rows in 3 partitions, batches of 16: 26 batches for each of the 2 workers (their last padded).
EPOCHS, STEPS_PER_EPOCH = 3, 52


def _latest_step(run_dir, driver: subprocess.Popen, within: float = 240) -> int:
    """Wait for a checkpoint past the first, then return the step of the latest."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and driver.poll() is None:
        latest = RunDir(str(run_dir)).latest_checkpoint()
        if latest is not None and latest.step >= 2 * EVERY:
            return latest.step
        time.sleep(0.05)
    out, err = driver.communicate(timeout=60) if driver.poll() is not None else ("", "")
    raise AssertionError(f"no checkpoint of step {2 * EVERY} or more within {within} s\n{out[-3000:]}{err[-5000:]}")


def test_a_parameter_server_lost_mid_run_resumes_from_the_last_checkpoint_with_its_variables(tmp_path):
    code = "import sys; from tests.support import ps_driver; sys.exit(ps_driver.main_checkpointed(sys.argv[1]))"
    driver = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        saved_before_kill = _latest_step(tmp_path, driver)
        os.kill(read_records(str(tmp_path), "node")["ps:0"]["pid"], signal.SIGKILL)
        out, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    lines = [line for line in out.splitlines() if line.startswith("RESULT checkpointed ")]
    assert driver.returncode == 0 and lines, out[-3000:] + err[-5000:]
    result = json.loads(lines[-1].split(" ", 2)[2])
    attempt = result["attempt"]
    assert attempt >= 1
    # The attempt's failure names the cause, the parameter server killed, not its echo on the chief ("failed to
    # connect": the chief's task waits a moment so that the parameter server's fails the stage first). An attempt
    # before it may have failed for a reason of its own (a port taken before TF bound it), which the run retries.
    failed = RunDir(str(tmp_path)).events("attempt_failed")
    *before, lost = failed
    assert lost["retrying"] and "ps:0" in lost["reason"] and "process killed by SIGKILL" in lost["reason"], failed
    assert all("could not start grpc server" in f["reason"].lower() for f in before), failed

    first = next(r["chief:0"] for a in range(attempt) if (r := read_records(str(tmp_path), f"restored{a}")))
    restored = read_records(str(tmp_path), f"restored{attempt}")["chief:0"]
    assert first["step"] == 0
    # Resumed from a checkpoint the chief saved before the parameter server was lost (the chief may
    # save once more while the loss is being noticed)...
    step = restored["step"]
    assert step >= saved_before_kill and step % EVERY == 0, (saved_before_kill, restored)
    saved = [read_records(str(tmp_path), f"saved-a{a}-s{step}").get("chief:0") for a in range(attempt)]
    saved = [record for record in saved if record]
    assert len(saved) == 1 and saved[0]["step"] == step, saved
    # ...with the variables on the new parameter server as they were at that step: the weights, and the
    # optimizer's step count.
    assert restored["weights"] == saved[0]["weights"]
    assert restored["weights"] != first["weights"]  # not the fresh model's weights
    assert restored["iterations"] == step
    events = RunDir(str(tmp_path)).events("restore")
    assert [e["step"] for e in events if e["attempt"] == attempt] == [step]
    # The fresh cluster trained the interrupted epoch again in full (under parameter servers which batches it
    # had trained cannot be told apart: none is skipped), then the rest: the planned epochs, plus the batches
    # of the interrupted epoch that the restored checkpoint held.
    assert result["steps_per_epoch"] == STEPS_PER_EPOCH
    epoch, in_epoch = divmod(step, STEPS_PER_EPOCH)
    assert in_epoch, "the parameter server was not lost mid-epoch: nothing to redo"
    assert result["step"] == EPOCHS * STEPS_PER_EPOCH + in_epoch
    # Each checkpoint recorded where in the epochs it was: the last one, all epochs done.
    (restore,) = [e for e in events if e["attempt"] == attempt]
    assert (restore["epoch"], restore["in_epoch"]) == (epoch, in_epoch)
    history = RunDir(str(tmp_path)).checkpoint_history()
    assert history[-1]["step"] == result["step"] and (history[-1]["epoch"], history[-1]["in_epoch"]) == (EPOCHS, 0)
    redone = [h for h in history if h["step"] > step]
    assert redone and all(h["epoch"] * STEPS_PER_EPOCH + h["in_epoch"] == h["step"] - in_epoch for h in redone)
