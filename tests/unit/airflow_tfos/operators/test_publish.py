"""TFoSPublishModelOperator: a model goes into service only if it is not worse; reruns change nothing."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.registry import ModelRegistryHook
from airflow_tfos.operators import TFoSPublishModelOperator
from airflow_tfos.shared.errors import RegistryError
from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.rundir import RunDir
from tests.support.fakes import make_context


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
    assert day2["model_path"] == ModelRegistry(registry).path("versions", "20261121T000000", "h", "model")
    worse = exported_run(tmp_path, "d3", {"test_accuracy": 0.88, "baseline_test_accuracy": 0.93})
    day3 = publish(worse, registry, "20261122T000000")
    assert not day3["published"] and "worse" in day3["reason"]
    assert day3["model_path"] == day2["model_path"]  # batch inference keeps using the model in service
    assert day3["candidate_path"].endswith("20261122T000000/h/model")  # kept in the registry for a look
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


def test_the_same_version_retrained_on_rewritten_input_is_a_copy_of_its_own_with_its_fingerprint(tmp_path):
    registry = str(tmp_path / "registry")
    run = RunDir(str(tmp_path / "d1"))
    versions = []
    for fingerprint in ("f1", "f2", "f2"):  # trained, input rewritten and retrained, published again
        run.write_fingerprint({"hash": fingerprint})
        exported_run(tmp_path, "d1", {"test_accuracy": 0.9})
        versions.append(publish(run.uri, registry, "20261120T000000", tolerance=1.0))
    first, retrained, again = versions
    assert first["model_path"].endswith("20261120T000000/h-f1/model")
    assert retrained["published"] and retrained["model_path"].endswith("20261120T000000/h-f2/model")
    assert again["reason"] == "already in service" and again["model_path"] == retrained["model_path"]
    current = ModelRegistry(registry).current()
    assert current["fingerprint"] == "f2" == run.export_success()["fingerprint"]
    assert [d["fingerprint"] for d in ModelRegistry(registry).decisions()] == ["f1", "f2"]


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


def model_in_service(registry: str) -> bytes:
    registry_ = ModelRegistry(registry)
    return registry_.storage.read_bytes(registry_.current_model_path() + "/saved_model.pb")


def test_republishing_a_version_in_service_with_another_spec_never_touches_the_model_in_service(tmp_path):
    registry = str(tmp_path / "registry")
    first = publish(
        exported_run(tmp_path, "good", {"test_accuracy": 0.95}, spec_hash="h1"), registry, "20261120T000000"
    )
    assert model_in_service(registry) == b"good"
    worse = exported_run(tmp_path, "worse", {"test_accuracy": 0.50}, spec_hash="h2")  # the DAG changed, a rerun
    again = publish(worse, registry, "20261120T000000")
    assert not again["published"]
    assert model_in_service(registry) == b"good"  # the copy in service was neither deleted nor replaced
    assert again["model_path"] == first["model_path"] != again["candidate_path"]
    stored = ModelRegistry(registry).storage.read_bytes(again["candidate_path"] + "/saved_model.pb")
    assert stored == b"worse"  # the candidate is kept beside it, under its own spec hash


def test_two_concurrent_publishers_never_put_an_older_model_back_in_service(tmp_path, monkeypatch):
    """A nightly run and a backfill of an older date publish at once; both read current.json before either
    wrote it. The backfill's copy is slow: it ends after the nightly one is in service."""
    registry = str(tmp_path / "registry")
    publish(exported_run(tmp_path, "d20", {"test_accuracy": 0.80}), registry, "20261120T000000")
    original = ModelRegistry.add_version
    both_read = threading.Barrier(2, timeout=30)

    def add_version(self, version, *args, **kwargs):
        both_read.wait()  # both publishers have read current.json (version 20) and judged against it
        if version == "20261121T000000":  # the backfill: its copy ends once the nightly one is in service
            deadline = time.monotonic() + 30
            while (self.current() or {}).get("version") != "20261122T000000" and time.monotonic() < deadline:
                time.sleep(0.02)
        return original(self, version, *args, **kwargs)

    monkeypatch.setattr(ModelRegistry, "add_version", add_version)
    results, errors = {}, []

    def run(name: str, version: str, accuracy: float) -> None:
        try:
            results[version] = publish(exported_run(tmp_path, name, {"test_accuracy": accuracy}), registry, version)
        except Exception as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=("d22", "20261122T000000", 0.90)),
        threading.Thread(target=run, args=("d21", "20261121T000000", 0.85)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert results["20261122T000000"]["published"]
    assert not results["20261121T000000"]["published"] and "older" in results["20261121T000000"]["reason"]
    assert ModelRegistry(registry).current()["version"] == "20261122T000000"
    assert model_in_service(registry) == b"d22"
    assert not ModelRegistry(registry).storage.exists(ModelRegistry(registry).path("current.lock"))


def test_a_lock_left_by_a_dead_publisher_is_taken_over(tmp_path, monkeypatch):
    import airflow_tfos.shared.registry as registry_module

    registry = ModelRegistry(str(tmp_path / "registry"))
    registry.storage.write_bytes(registry.path("current.lock"), b'{"token": "dead", "time": 0}')
    monkeypatch.setattr(registry_module, "LOCK_STALE_SECS", 1.0)
    with registry.lock(timeout=5):
        assert json.loads(registry.storage.read_bytes(registry.path("current.lock")))["token"] != "dead"
    assert not registry.storage.exists(registry.path("current.lock"))


def test_a_held_lock_makes_a_second_publisher_wait_then_give_up(tmp_path):
    registry = ModelRegistry(str(tmp_path / "registry"))
    with registry.lock(), pytest.raises(RegistryError, match="held by another publisher"), registry.lock(timeout=0.3):
        pass


def test_a_backfill_rejected_under_the_nightly_version_is_not_what_the_nightly_puts_in_service(tmp_path):
    """A backfill and the nightly run publish the same version string (same spec, same input): the gate rejects
    the backfill's 0.40 and accepts the nightly's 0.90; the model in service is the nightly's, by its bytes."""
    registry = str(tmp_path / "registry")
    publish(exported_run(tmp_path, "base", {"test_accuracy": 0.85}), registry, "20261120T000000")
    backfill = publish(exported_run(tmp_path, "backfill", {"test_accuracy": 0.40}), registry, "20261121T000000")
    assert not backfill["published"]
    nightly = publish(exported_run(tmp_path, "nightly", {"test_accuracy": 0.90}), registry, "20261121T000000")
    assert nightly["published"] and nightly["candidate"] == 0.90
    assert model_in_service(registry) == b"nightly"
    assert nightly["model_path"] == nightly["candidate_path"] != backfill["candidate_path"]
    current = ModelRegistry(registry).current()
    assert current["score"] == 0.90 and current["judged"]["candidate"] == 0.90
    again = publish(exported_run(tmp_path, "nightly", {"test_accuracy": 0.90}), registry, "20261121T000000")
    assert again["reason"] == "already in service" and again["model_path"] == nightly["model_path"]


def test_a_registry_serving_a_rejected_copy_fails_the_task_and_names_it(tmp_path):
    from tests.unit.airflow_tfos.shared.test_registry_trust import old_registry_serving_a_rejected_copy

    registry = old_registry_serving_a_rejected_copy(tmp_path / "registry")
    run = exported_run(tmp_path, "d22", {"test_accuracy": 0.95})
    with pytest.raises(AirflowException, match=r"20261121T000000/h/model.*roll_back\(\).*publish again"):
        publish(run, registry.uri, "20261122T000000")
    assert registry.current()["version"] == "20261121T000000"  # nothing judged against it, nothing published
    assert len(registry.decisions()) == 3
