"""Warm start on a real local cluster: a run starts from another run's exported model when it has no
checkpoint of its own; a missing model means training from scratch; a checkpoint always wins."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_tfos.runtime import NodeFailedError, run
from airflow_tfos.runtime.errors import WarmStartError
from airflow_tfos.runtime.program.export import find_warm_start
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from tests.support import programs
from tests.support.helpers import read_records

ARGS = {"steps_per_epoch": 10, "epochs": 2, "every": 5, "lr": 0.1}


def first_loss(rundir: RunDir, attempt: int = 0) -> float:
    points = sorted((e for e in rundir.events("step_metrics") if e["attempt"] == attempt), key=lambda e: e["step"])
    return points[0]["loss"]


@pytest.fixture(scope="module")
def run_a(sc, tmp_path_factory):
    """Run A: its warm start names a path with no model, so it trains from scratch; then it exports."""
    run_dir = tmp_path_factory.mktemp("run-a")
    missing = str(run_dir.parent / "no-model-here")
    result = run(sc, programs.tracked_training, ARGS, num_nodes=2, run_dir=str(run_dir), warm_start=missing)
    return run_dir, missing, result


def fake_export(rundir: RunDir, step: int) -> str:
    staging = rundir.export_staging()
    rundir.storage.write_bytes(f"{staging}/saved_model.pb", b"not read here")
    return rundir.publish_export(staging, spec_hash="h", step=step, metrics={"loss": 0.5})


def test_find_warm_start_takes_a_run_directory_or_a_model_directory(tmp_path):
    run_dir = RunDir(str(tmp_path / "run"))
    assert find_warm_start(run_dir.uri) is None  # nothing there yet: the first night
    export = fake_export(run_dir, 42)
    assert find_warm_start(run_dir.uri) == (export, run_dir.export_success())
    assert find_warm_start(f"file://{export}/")[0] == f"file://{export}"
    assert find_warm_start(f"file://{export}/")[1]["step"] == 42
    with WebHDFSEmulator() as emu:
        remote = RunDir(emu.uri("/models/yesterday"))
        fake_export(remote, 7)
        path, success = find_warm_start(remote.uri)
        assert path == f"{remote.uri}/export" and success["step"] == 7
        assert find_warm_start(emu.uri("/models/none")) is None
    with pytest.raises(WarmStartError, match="no storage for 's3://b/m'"):
        find_warm_start("s3://b/m")


@pytest.mark.integration
def test_a_missing_warm_start_model_trains_from_scratch_and_says_so(run_a):
    run_dir, missing, result = run_a
    assert result["warm_started"] is None and result["step"] == 20
    rundir = RunDir(str(run_dir))
    assert [e["path"] for e in rundir.events("warm_start_missing")] == [missing]
    assert not rundir.events("warm_start")
    starts = read_records(str(run_dir), "start0")
    assert {r["warm_started"] for r in starts.values()} == {None}
    assert rundir.export_success()["step"] == 20


@pytest.mark.integration
def test_a_run_starts_from_the_exported_weights_and_a_retry_resumes_from_its_checkpoint(sc, run_a, tmp_path):
    a_dir, _, _ = run_a
    a_final = read_records(str(a_dir), "final")["chief:0"]["weights"]
    # B names A's run directory: its export/ is used. B's worker fails on attempt 0 at step 7.
    result = run(sc, programs.tracked_training, {**ARGS, "fail_at": 7}, num_nodes=2, run_dir=str(tmp_path),
                 warm_start=str(a_dir), max_attempts=2)  # fmt: skip
    export = f"{a_dir}/export"
    assert result["step"] == 20 and result["attempt"] == 1
    first = read_records(str(tmp_path), "start0")
    assert set(first) == {"chief:0", "worker:0"}
    for record in first.values():  # every worker, before the first update, holds exactly A's weights
        assert record["start"] == 0 and record["warm_started"] == export
        for mine, theirs in zip(record["weights"], a_final, strict=True):
            np.testing.assert_allclose(mine, theirs, rtol=0, atol=0)
    retry = read_records(str(tmp_path), "start1")
    assert {(r["start"], r["warm_started"]) for r in retry.values()} == {(5, None)}  # the checkpoint won
    rundir = RunDir(str(tmp_path))
    [event] = rundir.events("warm_start")
    assert (event["path"], event["requested"], event["source_step"], event["attempt"]) == (export, str(a_dir), 20, 0)
    assert [(e["step"], e["attempt"]) for e in rundir.events("restore")] == [(5, 1)]
    assert rundir.export_success()["metrics"]["warm_started"] is None  # the retry resumed; it did not warm-start
    # A's model is far better than a fresh one: B's first step loses a fraction of what A's first did.
    assert first_loss(rundir) < first_loss(RunDir(str(a_dir))) / 10


@pytest.mark.integration
def test_a_warm_start_model_of_another_shape_fails_naming_both_shapes(sc, run_a, tmp_path):
    a_dir, _, _ = run_a
    with pytest.raises(NodeFailedError) as failure:
        run(sc, programs.tracked_training, {**ARGS, "units": 3}, num_nodes=2, run_dir=str(tmp_path),
            warm_start=f"file://{a_dir}/export", max_attempts=1)  # fmt: skip
    message = str(failure.value)
    assert "WarmStartError" in message and "does not fit this model" in message
    assert "(4, 1) (1,)" in message and "(4, 3) (3,)" in message
    assert "train from scratch (warm_start=None)" in message
