"""The driver entrypoint (what spark-submit runs) on a real local cluster, and spec checking."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import SpecError, parse_spec
from tests.conftest import REPO
from tests.runtime.helpers import training_spec


def driver_command(run_dir) -> list[str]:
    return [
        sys.executable, "-m", "airflow_tfos.runtime.driver", "--run-dir", str(run_dir),
        "--master", "local-cluster[2,1,1024]", "--heartbeat-secs", "0.5",
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=768m",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
        "--conf", f"spark.executorEnv.PYTHONPATH={os.environ['PYTHONPATH']}",
    ]  # fmt: skip


def run_driver(run_dir, timeout=400) -> subprocess.CompletedProcess:
    return subprocess.run(driver_command(run_dir), cwd=REPO, capture_output=True, text=True, timeout=timeout)


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


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"train_fn": "a.b:c", "num_nodes": 2, "epochs": 3}, "unknown field"),
        ({"num_nodes": 2}, "lacks required field"),
        ({"train_fn": "not-an-import-path", "num_nodes": 2}, "must look like 'package.module:function'"),
        ({"train_fn": "no_such_module_xyz:main", "num_nodes": 2}, "cannot import train_fn"),
        ({"train_fn": "tests.runtime.programs:nope", "num_nodes": 2}, "has no 'nope'"),
        (
            {
                "train_fn": "tests.runtime.programs:spec_training",
                "num_nodes": 2,
                "data": {"format": "parquet", "path": "/no/such/data"},
                "feed": {"features": ["x"], "lable": "y"},
            },
            "feed has unknown field(s): lable",
        ),
    ],
)
def test_a_bad_spec_fails_with_exit_2_and_the_error_in_status(tmp_path, spec, message):
    rundir = RunDir(str(tmp_path / "run"))
    rundir.write_spec(spec)
    done = run_driver(rundir.uri, timeout=120)
    assert done.returncode == 2
    assert message in done.stderr
    assert rundir.read_status()["state"] == "FAILED" and message in rundir.read_status()["error"]


@pytest.mark.integration
def test_missing_input_fails_with_exit_2_and_keeps_the_published_checkpoints(tmp_path):
    rundir = RunDir(str(tmp_path / "run"))
    rundir.publish_checkpoint(rundir.checkpoint_staging(7), 7)
    rundir.write_spec(training_spec(str(tmp_path / "no-such-data")))
    done = run_driver(rundir.uri)
    assert done.returncode == 2
    assert "cannot read data" in rundir.read_status()["error"]
    assert rundir.latest_checkpoint().step == 7


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"train_fn": "a:b", "num_nodes": 0}, "num_nodes must be at least 1"),
        ({"train_fn": "a:b", "num_nodes": True}, "must be an integer"),
        ({"train_fn": "a:b", "num_nodes": 1, "input_mode": "PANDAS"}, "input_mode must be one of"),
        ({"train_fn": "a:b", "num_nodes": 1, "data": {"format": "parquet"}}, "needs 'path'"),
        ({"train_fn": "a:b", "num_nodes": 1, "data": {"format": "parquet", "path": "/x"}}, "needs 'feed'"),
    ],
)
def test_spec_checks_name_the_field(spec, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(spec)


def test_spec_round_trips_as_json():
    spec = parse_spec(json.loads(json.dumps({"train_fn": "pkg.mod:main", "num_nodes": 3, "args": [1, 2]})))
    assert (spec.num_nodes, spec.args, spec.input_mode) == (3, [1, 2], "SPARK")
