"""The write fence: the driver records the current TF cluster attempt in the run directory, and a chief of
an older attempt (or of another application) cannot publish a checkpoint or an export; its staged copy is
removed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from airflow_tfos.runtime.checkpoint import fence
from airflow_tfos.shared.errors import StaleAttemptError
from airflow_tfos.shared.rundir import RunDir


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
    monkeypatch.setenv("AIRFLOW_TFOS_RUN_ID", "run-a")
    with pytest.raises(StaleAttemptError):
        fence(SimpleNamespace(attempt=1), rundir, staging)
    assert not rundir.storage.exists(staging)
    assert rundir.latest_checkpoint() is None
    fence(SimpleNamespace(attempt=2), rundir, rundir.checkpoint_staging(41))  # the current attempt passes
