"""One spec object from the operator to the node: its JSON form, its field list, the cluster started from it."""

from __future__ import annotations

import json

import pytest

from airflow_tfos.runtime.driver.launcher import TFClusterRun
from airflow_tfos.shared.feed import Feed
from airflow_tfos.shared.spec import RunSpec, SpecError, parse_spec


def test_a_spec_reads_back_as_the_same_object():
    spec = RunSpec(train_fn="pkg.mod:main", num_nodes=3, num_ps=1, args={"a": 1}, serve=True, serve_idle_secs=None)
    assert parse_spec(spec.to_json()) == spec
    assert spec.to_json()["serve_idle_secs"] is None  # a serving spec says it has no idle limit


def test_fields_at_their_default_that_are_written_only_when_set_stay_out_of_the_json():
    written = RunSpec(train_fn="pkg.mod:main", num_nodes=2).to_json()
    assert not {"serve", "serve_idle_secs", "code", "kind", "inference", "spec_hash"} & set(written)


def test_an_inference_spec_writes_only_what_inference_uses():
    spec = RunSpec(kind="inference", num_nodes=2, data={"format": "parquet", "path": "/d"}, inference={"x": 1})
    assert set(spec.to_json()) == {"kind", "num_nodes", "data", "inference", "env"}


def test_the_field_list_parse_spec_checks_is_the_objects():
    with pytest.raises(SpecError, match="unknown field"):
        parse_spec({"num_nodes": 1, "train_fn": "a:b", "nope": 1})
    with pytest.raises(SpecError, match="'stop_grace_secs' has the wrong type"):
        parse_spec({"num_nodes": 1, "train_fn": "a:b", "stop_grace_secs": "1"})


def test_the_driver_starts_the_cluster_from_the_spec():
    spec = RunSpec(
        train_fn="pkg.mod:main",
        num_nodes=2,
        num_ps=1,
        eval_node=True,
        timeout=60,
        keras="tf_keras",
        env={"A": "1"},
        feed={"features": ["x"], "label": "y", "batch_size": 8},
        max_attempts=2,
        warm_start="/m",
    )
    frame = type("Frame", (), {"mapInArrow": None})()
    run = TFClusterRun.from_spec(object(), spec, print, {"e": 1}, run_dir="/r", env={"B": "2"}, data=frame)
    # num_nodes counts the nodes that train, as the operator's does (and its executor request, one per
    # node: num_nodes + num_ps + the evaluator); the parameter server and the evaluator come on top
    assert sorted(r.job_name for r in run.roles) == ["chief", "evaluator", "ps", "worker"]
    settings = (run.spec.timeout, run.spec.keras, run.spec.max_attempts, run.spec.warm_start, run.run_dir)
    assert settings == (60, "tf_keras", 2, "/m", "/r")
    assert run.feed == Feed(features=["x"], label="y", batch_size=8)
    assert run.env["A"] == "1" and run.env["B"] == "2" and run.spec is spec


def test_the_feed_options_for_real_tables_reach_the_feed_through_spec_json():
    feed = {
        "features": ["vec", "text", "tokens", "words"],
        "label": ["a", "b"],
        "weight": "w",
        "fill": {"text": ""},
        "pad": {"tokens": [4, 0]},
        "ragged": ["words"],
        "densify": ["vec"],
        "batch_size": 8,
    }
    spec = parse_spec(json.loads(json.dumps(RunSpec(train_fn="p.m:f", num_nodes=2, feed=feed).to_json())))
    built = Feed(**spec.feed)
    assert (built.label, built.weight, built.ragged, built.densify) == (("a", "b"), "w", ("words",), ("vec",))
    assert (built.fill, built.pad) == ({"text": ""}, {"tokens": [4, 0]})
    with pytest.raises(SpecError, match="feed field 'label' must name columns"):
        parse_spec({"num_nodes": 1, "train_fn": "a:b", "feed": {"features": ["x"], "label": ["y", 2]}})
    with pytest.raises(SpecError, match="feed field 'weight' has the wrong type"):
        parse_spec({"num_nodes": 1, "train_fn": "a:b", "feed": {"features": ["x"], "weight": ["w"]}})


def test_a_cluster_started_from_python_checks_its_settings_as_spec_json_is_checked():
    # TFClusterRun builds its spec from its arguments and checks it once, with the spec's own check and error.
    for settings, message in (
        ({"keras": "keras2"}, "keras must be one of auto, tf_keras, keras3"),
        ({"stall_timeout": 0}, "stall_timeout must be positive seconds or null"),
        ({"timeout": -1}, "timeout must be positive seconds or null"),
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"gpus_per_node": -1}, "gpus_per_node must be 0 or more"),
    ):
        with pytest.raises(SpecError, match=message):
            TFClusterRun(object(), print, num_nodes=2, **settings)
    run = TFClusterRun(object(), print, num_nodes=3, num_ps=1, stall_timeout=30, warm_start="")
    assert (run.spec.num_nodes, run.spec.num_ps, run.spec.stall_timeout, run.spec.warm_start) == (2, 1, 30, None)
