"""Faults that must not stop the driver's control plane: storage outages, malformed feed requests, bad input."""

from __future__ import annotations

import logging
import time

import pytest

from airflow_tfos.runtime.driver.entry import feed_request_input
from airflow_tfos.runtime.driver.heartbeat import DriverWatch
from airflow_tfos.shared.feed import Feed
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import _FEED_FIELDS, SpecError, parse_spec
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from tests.conftest import wait_for


def test_the_heartbeat_outlives_a_storage_outage_and_says_so_once(caplog):
    caplog.set_level(logging.INFO, logger="airflow_tfos.driver")
    with WebHDFSEmulator() as hdfs:
        storage = WebHDFSStorage(hdfs.config(retries=1, backoff=0.01, timeout=1.0, deadline=2.0))
        rundir = RunDir(hdfs.uri("/runs/outage"), storage=storage)
        rundir.publish_checkpoint(rundir.checkpoint_staging(3), 3)
        spec = parse_spec({"train_fn": "pkg.mod:main", "num_nodes": 1})
        watch = DriverWatch(rundir, spec, {"application_id": "app-1"}, 0.05)
        watch.start()
        try:
            wait_for(lambda: rundir.read_status() is not None, 10, "a first heartbeat")
            # Looking the checkpoint up fails past the client's retries: a raw OSError, not a RunDirError.
            hdfs.drop_next(1_000_000, op="GETFILESTATUS")
            time.sleep(1.5)
            assert watch.is_alive()
            hdfs.clear_faults()
            recovered = time.time()
            wait_for(lambda: rundir.read_status()["heartbeat"] > recovered, 10, "a heartbeat after the outage")
            assert rundir.read_status()["state"] == "RUNNING" and rundir.read_status()["step"] == 3
            rundir.request_stop("after the outage")
            wait_for(watch.stopping.is_set, 10, "the stop request seen")
        finally:
            watch.finished.set()
            watch.join(10)
    outage = [r for r in caplog.records if "cannot update status.json" in r.getMessage()]
    back = [r for r in caplog.records if "status.json is updated again" in r.getMessage()]
    assert len(outage) == 1 and outage[0].levelno == logging.WARNING, [r.getMessage() for r in caplog.records]
    assert "WebHDFS" in outage[0].getMessage() or "Error" in outage[0].getMessage()
    assert len(back) == 1


def spark_spec(**extra):
    return parse_spec({"train_fn": "pkg.mod:main", "num_nodes": 2, "serve": True, "feed": {"features": ["x"]}, **extra})


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"feed_id": "f", "requested": 1.0, "data": {"format": "parquet", "path": "/d"}, "lable": 1}, "unknown field"),
        ({"feed_id": "f", "requested": 1.0, "data": ["/d"]}, "data must be a JSON object"),
        ({"feed_id": "f", "requested": 1.0, "data": {"format": "parquet"}}, "needs 'path'"),
        ({"feed_id": "f", "requested": 1.0, "data": {"format": "xls", "path": "/d"}}, "format must be one of"),
        ({"feed_id": "f", "requested": 1.0, "args": "epochs=2"}, "args must be a JSON object or list"),
        ({"feed_id": "f", "requested": 0.0, "invalid": "it holds a list, not an object"}, "cannot be read"),
    ],
)
def test_a_bad_feed_request_is_refused_naming_what_is_wrong(request_, message):
    with pytest.raises(SpecError, match=message):
        feed_request_input(spark_spec(), request_)


def test_a_good_feed_request_gives_its_data_and_args():
    data = {"format": "parquet", "path": "/d"}
    request = {"feed_id": "f", "requested": 1.0, "data": data, "args": {"epochs": 2}}
    assert feed_request_input(spark_spec(args={"epochs": 1}), request) == (data, {"epochs": 2})
    assert feed_request_input(spark_spec(args={"epochs": 1}), {"feed_id": "g", "requested": 1.0}) == (
        None,
        {"epochs": 1},
    )


def test_malformed_request_files_are_pending_with_why_not_a_crash(tmp_path):
    rundir = RunDir(str(tmp_path / "run"))
    rundir.request_feed("good", {"data": {"format": "parquet", "path": "/d"}})
    (tmp_path / "run" / "feeds" / "list.json").write_text("[1, 2]")
    (tmp_path / "run" / "feeds" / "broken.json").write_text("{not json")
    (tmp_path / "run" / "feeds" / "untimed.json").write_text('{"data": null}')
    pending = {r["feed_id"]: r for r in rundir.pending_feeds()}
    assert set(pending) == {"good", "list", "broken", "untimed"}
    assert "invalid" not in pending["good"]
    assert "not an object" in pending["list"]["invalid"]
    assert "not valid JSON" in pending["broken"]["invalid"]
    assert "no time of request" in pending["untimed"]["invalid"]
    rundir.mark_feed_done("list", error="x", exit_code=2)
    rundir.withdraw_feed("good")
    assert {r["feed_id"] for r in rundir.pending_feeds()} == {"broken", "untimed"}
    assert rundir.feed_result("good") is None


@pytest.mark.parametrize(
    ("feed", "message"),
    [
        ({"features": ["x"], "lable": "y"}, "unknown field.*lable"),
        ({"label": "y"}, "needs 'features'"),
        ({"features": ["x"], "batch_size": "64"}, "'batch_size' has the wrong type str"),
        ({"features": ["x"], "shuffle_window": True}, "'shuffle_window' has the wrong type bool"),
        ({"features": [1, 2]}, "must name columns"),
    ],
)
def test_bad_feed_settings_are_spec_errors_not_type_errors(feed, message):
    with pytest.raises(SpecError, match=message):
        spark_spec(feed=feed)


def test_the_spec_knows_every_feed_field():
    assert set(_FEED_FIELDS) == set(Feed.__dataclass_fields__)


def test_a_serving_driver_without_feed_requests_for_serve_idle_secs_stops_by_itself(tmp_path):
    from airflow_tfos.runtime.driver import entry as driver

    rundir = RunDir(str(tmp_path / "run"))
    spec = parse_spec({"train_fn": "pkg.mod:main_fun", "num_nodes": 2, "serve": True, "serve_idle_secs": 0.3})
    watch = DriverWatch(rundir, spec, {"application_id": "app-1", "spec_hash": "abc"}, 60.0)
    started = time.monotonic()
    assert driver._serve(None, spec, rundir, None, watch, "abc", "trained") == "trained"
    assert time.monotonic() - started < 3.0  # stopped after the idle time, not after a stop request
    assert watch.idle and watch.stopping.is_set()
    (event,) = rundir.events("idle_stop")
    assert event["serve_idle_secs"] == 0.3 and event["idle_secs"] >= 0.3
    assert rundir.read_status()["serving"] is True
