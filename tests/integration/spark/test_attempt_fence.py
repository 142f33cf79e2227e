"""The write fence: the driver records the current TF cluster attempt in the run directory, and a chief of
an older attempt (or of another application) cannot publish a checkpoint or an export; its staged copy is
removed."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from airflow_tfos.runtime import TFClusterRun
from airflow_tfos.runtime.errors import NodeFailedError
from airflow_tfos.runtime.program.export import fence
from airflow_tfos.shared.errors import StaleAttemptError
from airflow_tfos.shared.rundir import RunDir
from tests.support import programs


def test_only_the_recorded_attempt_of_the_recorded_run_may_publish(tmp_path):
    rundir = RunDir(str(tmp_path))
    rundir.check_attempt("run-a", 0)  # nothing recorded yet: nothing to fence
    rundir.write_attempt("run-a", 1)
    rundir.check_attempt("run-a", 1)
    stale = r"attempt 0 of TF cluster run-a is stale: .*attempt.json names attempt 1"
    with pytest.raises(StaleAttemptError, match=stale):
        rundir.check_attempt("run-a", 0)
    with pytest.raises(StaleAttemptError, match="attempt 1 of run-a"):
        rundir.check_attempt("run-b", 1)  # another application took the run over


def test_a_stale_chief_publishes_nothing_and_leaves_no_staging(tmp_path, monkeypatch):
    rundir = RunDir(str(tmp_path))
    rundir.write_attempt("run-a", 2)
    staging = rundir.checkpoint_staging(40)
    rundir.storage.makedirs(staging)
    monkeypatch.setenv("AIRFLOW_TFOS_CLUSTER_ID", "run-a")
    with pytest.raises(StaleAttemptError):
        fence(SimpleNamespace(attempt=1), rundir, staging)
    assert not rundir.storage.exists(staging)
    assert rundir.latest_checkpoint() is None
    fence(SimpleNamespace(attempt=2), rundir, rundir.checkpoint_staging(41))  # the current attempt passes


@pytest.mark.integration
def test_a_stale_chief_that_reaches_its_save_after_a_newer_attempt_started_publishes_nothing(sc, tmp_path):
    """On a real cluster: the chief of attempt 0 has trained and is about to save when the run directory
    records attempt 1 (as the driver does when it starts a new TF cluster while the old one is cut off)."""
    rundir = RunDir(str(tmp_path))
    run = TFClusterRun(
        sc, programs.stale_chief_save, {"wait": 60}, num_nodes=1, run_dir=str(tmp_path), max_attempts=1
    ).start()
    deadline = time.monotonic() + 120
    while not (tmp_path / "before-save").exists() and time.monotonic() < deadline and not run.done():
        time.sleep(0.1)
    assert (tmp_path / "before-save").read_text() == "1"
    rundir.write_attempt(run.cluster_id, 1)
    (tmp_path / "go").write_text("")
    with pytest.raises(NodeFailedError) as caught:
        run.wait(120)
    # the node's error starts with the cause and names the attempt that may publish
    assert f"StaleAttemptError: attempt 0 of TF cluster {run.cluster_id} is stale" in str(caught.value)
    assert "attempt.json names attempt 1" in str(caught.value)
    # nothing published, nothing staged left behind: no checkpoint, no export
    assert rundir.latest_checkpoint() is None
    assert rundir.export_success() is None
    left = [name for name in rundir.storage.listdir(str(tmp_path)) if name.startswith(".")]
    if (tmp_path / "checkpoints").exists():
        left += rundir.storage.listdir(rundir.path("checkpoints"))
    assert left == [], left
