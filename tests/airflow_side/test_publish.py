"""TFoSPublishModelOperator: a model goes into service only if it is not worse; reruns change nothing."""

from __future__ import annotations

import os

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.registry import ModelRegistryHook
from airflow_tfos.operators import TFoSPublishModelOperator
from airflow_tfos.registry import ModelRegistry
from airflow_tfos.rundir import RunDir
from tests.airflow_side.fakes import make_context


def exported_run(tmp_path, name: str, metrics: dict, spec_hash: str = "h") -> str:
    rundir = RunDir(str(tmp_path / name))
    staging = rundir.export_staging()
    with open(os.path.join(staging, "saved_model.pb"), "w") as f:
        f.write(name)
    rundir.publish_export(staging, spec_hash=spec_hash, step=100, metrics=metrics)
    return rundir.uri


def publish(run_dir: str, registry: str, version: str, **kwargs):
    op = TFoSPublishModelOperator(task_id="publish", run_dir=run_dir, registry=registry, version=version, **kwargs)
    return op.execute(make_context("publish"))


def test_first_then_better_then_worse_model(tmp_path):
    registry = str(tmp_path / "registry")
    day1 = publish(exported_run(tmp_path, "d1", {"test_accuracy": 0.90}), registry, "20261120T000000")
    assert day1["published"] and day1["model_version"] == "20261120T000000" and day1["baseline"] is None
    better = exported_run(tmp_path, "d2", {"test_accuracy": 0.93, "baseline_test_accuracy": 0.91})
    day2 = publish(better, registry, "20261121T000000")
    assert day2["published"] and day2["baseline"] == 0.91
    assert day2["model_path"] == ModelRegistry(registry).path("versions", "20261121T000000", "model")
    worse = exported_run(tmp_path, "d3", {"test_accuracy": 0.88, "baseline_test_accuracy": 0.93})
    day3 = publish(worse, registry, "20261122T000000")
    assert not day3["published"] and "worse" in day3["reason"]
    assert day3["model_path"] == day2["model_path"]  # batch inference keeps using the model in service
    assert day3["candidate_path"].endswith("20261122T000000/model")  # kept in the registry for a look
    assert [d["published"] for d in ModelRegistry(registry).decisions()] == [True, True, False]
    hook = ModelRegistryHook(registry)
    assert hook.current_model_path() == day2["model_path"]
    assert hook.model_in_service_before("20261122T000000") == day2["model_path"]
    assert hook.model_in_service_before("20261121T000000") == day1["model_path"]


def test_rerun_of_a_published_version_changes_nothing(tmp_path):
    registry = str(tmp_path / "registry")
    run = exported_run(tmp_path, "d1", {"test_accuracy": 0.9})
    first = publish(run, registry, "20261120T000000")
    since = ModelRegistry(registry).current()["in_service_since"]
    again = publish(run, registry, "20261120T000000")
    assert again["published"] and again["reason"] == "already in service"
    assert again["model_path"] == first["model_path"]
    assert ModelRegistry(registry).current()["in_service_since"] == since
    assert len(ModelRegistry(registry).decisions()) == 1


def test_a_rerun_of_an_old_date_never_replaces_a_newer_model(tmp_path):
    registry = str(tmp_path / "registry")
    publish(exported_run(tmp_path, "d2", {"test_accuracy": 0.80}), registry, "20261121T000000")
    old = publish(exported_run(tmp_path, "d1", {"test_accuracy": 0.99}), registry, "20261120T000000")
    assert not old["published"] and "older" in old["reason"]
    assert ModelRegistry(registry).current()["version"] == "20261121T000000"


def test_fail_if_worse_fails_the_task(tmp_path):
    registry = str(tmp_path / "registry")
    publish(exported_run(tmp_path, "d1", {"test_accuracy": 0.9}), registry, "20261120T000000")
    with pytest.raises(AirflowException, match="was not published: test_accuracy 0.8000 is worse"):
        publish(exported_run(tmp_path, "d2", {"test_accuracy": 0.8}), registry, "20261121T000000", fail_if_worse=True)


def test_no_export_and_a_missing_metric_are_clear_errors(tmp_path):
    with pytest.raises(AirflowException, match="holds no complete export"):
        publish(str(tmp_path / "empty"), str(tmp_path / "registry"), "v1")
    run = exported_run(tmp_path, "d1", {"loss": 0.1})
    with pytest.raises(AirflowException, match="no 'test_accuracy'.*loss"):
        publish(run, str(tmp_path / "registry"), "v1")


def test_bad_parameters_fail_at_parse_time():
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        TFoSPublishModelOperator(task_id="p", run_dir="/r", registry="/m", tolerance=-1)
