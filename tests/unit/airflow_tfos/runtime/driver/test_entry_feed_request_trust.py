"""A feed request (``feeds/<id>.json``, which whoever can write the run directory can plant) makes the driver run
only what the verified spec allows: a data function the spec names, Spark's own reader options, a plain table."""

from __future__ import annotations

import sys

import pytest

from airflow_tfos.runtime.driver.entry import feed_request_input
from airflow_tfos.shared.errors import FeedRefusedError
from airflow_tfos.shared.spec import SpecError, parse_spec

FEED = {"features": ["x"], "label": "y", "batch_size": 30}
SERVING = {
    "train_fn": "tests.support.programs:spec_training",
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
            "data": {"format": "function", "function": "tests.support.programs:training_frame"},
            "feed_functions": ["tests.support.programs:other_frame"],
        }
    )
    for function in ("tests.support.programs:training_frame", "tests.support.programs:other_frame"):
        data = {"format": "function", "function": function, "options": {"day": "2026-11-21"}}
        assert feed_request_input(spec, request(data)) == (data, None)
    with pytest.raises(FeedRefusedError, match=r"allowed: tests.support.programs:other_frame, tests.support"):
        feed_request_input(spec, request({"format": "function", "function": "tests.support.programs:spec_training"}))


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
