"""A feed request (``feeds/<id>.json``, which whoever can write the run directory can plant) makes the driver run
only what the verified spec allows: a data function the spec names, Spark's own reader options, a plain table."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_tfos.runtime.driver.entry import feed_request_input
from airflow_tfos.shared.errors import FeedRefusedError
from airflow_tfos.shared.events import FEED_REFUSED
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import SpecError, parse_spec
from tests.conftest import REPO
from tests.runtime.test_driver_entrypoint import driver_command
from tests.runtime.test_driver_serving import wait_for

FEED = {"features": ["x"], "label": "y", "batch_size": 30}
SERVING = {
    "train_fn": "tests.runtime.programs:spec_training",
    "num_nodes": 2,
    "input_mode": "SPARK",
    "feed": FEED,
    "serve": True,
}


def request(data: dict, feed_id: str = "planted") -> dict:
    return {"feed_id": feed_id, "requested": 1.0, "data": data}


def test_a_data_function_the_spec_does_not_name_is_refused_before_it_is_imported(tmp_path, monkeypatch):
    marker = tmp_path / "imported"
    (tmp_path / "planted_feed_module.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef frame(spark): ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    planted = request({"format": "function", "function": "planted_feed_module:frame"})
    with pytest.raises(FeedRefusedError, match=r"^feed data.function 'planted_feed_module:frame' is not a data "):
        feed_request_input(parse_spec(SERVING), planted)
    assert not marker.exists() and "planted_feed_module" not in sys.modules
    with pytest.raises(FeedRefusedError, match="add it to feed_functions of the operator that launches the run"):
        feed_request_input(parse_spec(SERVING), request({"format": "function", "function": "pydoc:pipepager"}))


def test_the_spec_allows_its_own_data_functions_and_its_feed_functions():
    spec = parse_spec(
        {
            **SERVING,
            "data": {"format": "function", "function": "tests.runtime.programs:training_frame"},
            "feed_functions": ["tests.runtime.programs:other_frame"],
        }
    )
    for function in ("tests.runtime.programs:training_frame", "tests.runtime.programs:other_frame"):
        data = {"format": "function", "function": function, "options": {"day": "2026-11-21"}}
        assert feed_request_input(spec, request(data)) == (data, None)
    with pytest.raises(FeedRefusedError, match=r"allowed: tests.runtime.programs:other_frame, tests.runtime"):
        feed_request_input(spec, request({"format": "function", "function": "tests.runtime.programs:spec_training"}))


def test_the_spec_checks_its_feed_functions():
    with pytest.raises(SpecError, match=r"feed_functions\[0\] must look like 'package.module:function'"):
        parse_spec({**SERVING, "feed_functions": ["pydoc.pipepager"]})
    with pytest.raises(SpecError, match=r"field 'feed_functions' has the wrong type str"):
        parse_spec({**SERVING, "feed_functions": "pydoc:pipepager"})


@pytest.mark.parametrize(
    "options",
    [
        {"fs.file.impl": "org.example.Planted", "fs.file.impl.disable.cache": "true"},
        {"parquet.crypto.factory.class": "org.example.Planted"},
        {"io.compression.codecs": "org.example.Planted"},
    ],
)
def test_reader_options_that_reach_the_hadoop_configuration_are_refused(options):
    data = {"format": "parquet", "path": "/data/day", "options": options}
    with pytest.raises(FeedRefusedError, match=r"cannot be set by a feed request: a feed may set only Spark's parquet"):
        feed_request_input(parse_spec(SERVING), request(data))


def test_sparks_own_reader_options_and_plain_tables_are_served():
    spec = parse_spec(SERVING)
    for data in (
        {"format": "parquet", "path": "/data/day", "options": {"mergeSchema": "true", "pathGlobFilter": "*.parquet"}},
        {"format": "csv", "path": "/data/day.csv", "options": {"sep": ";", "header": False, "inferSchema": True}},
        {"format": "table", "table": "spark_catalog.sales.day"},
    ):
        assert feed_request_input(spec, request(data))[0] == data


def test_a_quoted_table_name_that_could_name_a_data_source_class_is_refused():
    data = {"format": "table", "table": "`org.example.Planted`.`/data/day`"}
    with pytest.raises(FeedRefusedError, match="is not a plain table name"):
        feed_request_input(parse_spec(SERVING), request(data))


@pytest.mark.integration
def test_a_planted_function_request_does_not_run_and_its_refusal_is_recorded(tmp_path):
    """The attack as reported: a request naming ``pydoc:pipepager`` with a command. The serving driver (its
    spec verified with --spec-hash) refuses it unimported, records the refusal, and serves on."""
    rundir = RunDir(str(tmp_path / "run"))
    digest = rundir.write_spec(SERVING)
    marker = tmp_path / "command-ran"
    rundir.request_feed(
        "planted",
        {"data": {"format": "function", "function": "pydoc:pipepager", "options": {"cmd": f"id > {marker}"}}},
    )
    command = driver_command(rundir.uri)
    command[command.index("local-cluster[2,1,1024]")] = "local[1]"  # no TF cluster starts: one JVM is enough
    driver = subprocess.Popen([*command, "--spec-hash", digest], cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: rundir.feed_result("planted") is not None, 180, driver)
        assert rundir.read_status()["state"] == "RUNNING"  # it serves on: nothing of the request ran
        rundir.request_stop("test")
        _, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert not marker.exists(), "the planted command ran"
    done = rundir.feed_result("planted")
    assert done["refused"] is True and done["exit_code"] == 2
    assert done["error"].startswith("feed data.function 'pydoc:pipepager' is not a data function the run's spec")
    assert [e["feed_id"] for e in rundir.events(FEED_REFUSED)] == ["planted"]
    assert driver.returncode == 0, err[-4000:]
