"""The driver entrypoint (what spark-submit runs) on a real local cluster."""

from __future__ import annotations

import subprocess
import time

import pytest

from airflow_tfos.shared.rundir import RunDir
from tests.conftest import REPO
from tests.support.helpers import driver_command, run_driver, training_spec


@pytest.fixture(scope="module")
def data_path(spark, tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "linear"
    frame = spark.range(0, 600, numPartitions=3).selectExpr(
        "array(cast(rand(1) as double), cast(rand(2) as double)) as x"
    )
    frame.selectExpr("x", "3 * x[0] - 2 * x[1] + 1 as y").write.parquet(str(path))
    return str(path)


@pytest.mark.integration
def test_driver_trains_serves_feeds_exports_and_is_idempotent(tmp_path, data_path):
    rundir = RunDir(str(tmp_path / "run"))
    digest = rundir.write_spec(training_spec(data_path))
    rundir.request_feed("extra-1", {"data": {"format": "parquet", "path": data_path}, "args": {"epochs": 3}})
    rundir.request_stop("left by an earlier application's shutdown", application_id="app-earlier")
    done = run_driver(rundir.uri)  # the stop request meant for another application does not stop it
    assert done.returncode == 0, done.stderr[-4000:]
    status = rundir.read_status()
    assert status["state"] == "SUCCEEDED" and status["application_id"].startswith("app-")
    assert status["step"] == 30  # 10 steps a epoch (300 rows per node / 30): 2 epochs, then the feed's 3rd
    assert rundir.export_success()["spec_hash"] == digest
    assert rundir.export_success()["step"] == 30
    assert rundir.feed_result("extra-1")["step"] == 30 and rundir.pending_feeds() == []
    assert len(rundir.events("restore")) == 1  # the feed's cluster resumed from the first one's checkpoint
    attempts = len(rundir.events("attempt"))

    started = time.monotonic()
    again = run_driver(rundir.uri)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "nothing to do" in again.stderr
    assert time.monotonic() - started < 60
    assert len(rundir.events("attempt")) == attempts  # no new TF cluster


@pytest.mark.integration
def test_a_stop_request_stops_at_the_next_checkpoint(tmp_path, data_path):
    rundir = RunDir(str(tmp_path / "run"))
    rundir.write_spec(training_spec(data_path, args={"epochs": 50, "every": 5, "sleep": 0.2}, stop_grace_secs=60))
    driver = subprocess.Popen(driver_command(rundir.uri), cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (tmp_path / "run" / "progress-chief-0.json").exists():
            time.sleep(0.2)
        rundir.request_stop("test")
        requested = time.monotonic()
        _, err = driver.communicate(timeout=180)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err[-3000:]
    assert time.monotonic() - requested < 60
    assert rundir.read_status()["state"] == "STOPPED"
    assert rundir.events("stopped")
    assert rundir.latest_checkpoint() is not None
    assert rundir.export_success() is None


@pytest.mark.integration
def test_missing_input_fails_with_exit_2_and_keeps_the_published_checkpoints(tmp_path):
    rundir = RunDir(str(tmp_path / "run"))
    rundir.publish_checkpoint(rundir.checkpoint_staging(7), 7)
    rundir.write_spec(training_spec(str(tmp_path / "no-such-data")))
    done = run_driver(rundir.uri)
    assert done.returncode == 2
    assert "cannot read data" in rundir.read_status()["error"]
    assert rundir.latest_checkpoint().step == 7
