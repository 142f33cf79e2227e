"""A serving driver in its own process: a bad feed fails alone, and every way the driver ends is in status.json."""

from __future__ import annotations

import subprocess
import time

import pytest

from airflow_tfos.shared.rundir import RunDir
from tests.conftest import REPO
from tests.support.helpers import driver_command, run_driver

pytestmark = pytest.mark.integration

FEED = {"features": ["x"], "label": "y", "batch_size": 30}


@pytest.fixture(scope="module")
def datasets(spark, tmp_path_factory):
    """Parquet data with the fed columns (x, y), and the same rows with the label under another name."""
    root = tmp_path_factory.mktemp("serving-data")
    frame = spark.range(0, 600, numPartitions=3).selectExpr(
        "array(cast(rand(1) as double), cast(rand(2) as double)) as x"
    )
    frame = frame.selectExpr("x", "3 * x[0] - 2 * x[1] + 1 as y")
    frame.write.parquet(str(root / "good"))
    frame.withColumnRenamed("y", "labels").write.parquet(str(root / "renamed"))
    return {"good": str(root / "good"), "renamed": str(root / "renamed"), "missing": str(root / "no-such-data")}


def wait_for(condition, within: float, driver: subprocess.Popen) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if driver.poll() is not None:
            raise AssertionError(f"the driver ended with {driver.returncode}: {driver.stderr.read()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:.0f} s")
        time.sleep(0.3)


def test_bad_feeds_fail_alone_and_the_cluster_serves_a_good_one(tmp_path, datasets):
    rundir = RunDir(str(tmp_path / "run"))
    rundir.write_spec(
        {
            "train_fn": "tests.support.programs:spec_training",
            "args": {"epochs": 1, "every": 5},
            "num_nodes": 2,
            "input_mode": "SPARK",
            "feed": FEED,
            "serve": True,
        }
    )
    rundir.request_feed("renamed-label", {"data": {"format": "parquet", "path": datasets["renamed"]}})
    rundir.request_feed("missing-path", {"data": {"format": "parquet", "path": datasets["missing"]}})
    rundir.request_feed("bad-args", {"data": {"format": "parquet", "path": datasets["good"]}, "args": "epochs=1"})
    (tmp_path / "run" / "feeds" / "not-an-object.json").write_text('["not", "a", "request"]')
    driver = subprocess.Popen(driver_command(rundir.uri), cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: rundir.feed_result("bad-args") is not None, 180, driver)
        assert rundir.read_status()["state"] == "RUNNING"  # still serving after three bad feeds
        rundir.request_feed("good", {"data": {"format": "parquet", "path": datasets["good"]}})
        wait_for(lambda: rundir.feed_result("good") is not None, 300, driver)
        rundir.request_stop("test")
        _, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err[-4000:]
    assert rundir.read_status()["state"] == "SUCCEEDED"
    renamed = rundir.feed_result("renamed-label")
    assert renamed["exit_code"] == 2
    assert renamed["error"].startswith("column 'y' is not in the training DataFrame (its columns: x, labels)")
    missing = rundir.feed_result("missing-path")
    assert missing["exit_code"] == 2 and missing["error"].startswith("cannot read data")
    assert "args must be a JSON object or list" in rundir.feed_result("bad-args")["error"]
    assert "not an object" in rundir.feed_result("not-an-object")["error"]
    good = rundir.feed_result("good")
    assert "error" not in good and good["step"] == 10  # 300 rows a node in batches of 30, one epoch
    assert rundir.pending_feeds() == []


def test_a_cluster_setting_the_runtime_refuses_exits_2_with_the_error_in_status(tmp_path, datasets):
    rundir = RunDir(str(tmp_path / "run"))
    spec = {
        "train_fn": "tests.support.programs:spec_training",
        "num_nodes": 2,
        "input_mode": "SPARK",
        "data": {"format": "parquet", "path": datasets["good"]},
        "feed": FEED,
        "keras": "keras4",
    }
    rundir.write_spec(spec)
    done = run_driver(rundir.uri, timeout=240)
    assert done.returncode == 2, done.stderr[-3000:]
    status = rundir.read_status()
    assert status["state"] == "FAILED" and status["exit_code"] == 2
    assert "keras must be one of" in status["error"]
