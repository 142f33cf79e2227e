"""The model registry: publish decisions, atomic versions, the model a run starts from (local and WebHDFS)."""

from __future__ import annotations

import json
import os

import pytest

from airflow_tfos.shared.errors import RegistryError
from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.registry_gate import decide
from airflow_tfos.shared.storage import LocalStorage
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.testing.webhdfs import WebHDFSEmulator

FAST = {"retries": 2, "backoff": 0.05, "timeout": 2.0, "deadline": 20.0}


class TestDecide:
    def test_the_first_model_is_published(self):
        d = decide({"acc": 0.9}, None, metric="acc", version="20261120T000000")
        assert d.publish and d.candidate == 0.9 and d.baseline is None and "no model" in d.reason

    def test_the_baseline_measured_on_the_same_data_wins_over_the_recorded_score(self):
        current = {"version": "20261120T000000", "score": 0.99}
        d = decide({"acc": 0.95, "baseline_acc": 0.94}, current, metric="acc", version="20261121T000000")
        assert d.publish and d.baseline == 0.94 and "same evaluation data" in d.reason

    def test_worse_than_the_recorded_score_is_not_published(self):
        current = {"version": "20261120T000000", "score": 0.95}
        d = decide({"acc": 0.93}, current, metric="acc", version="20261121T000000")
        assert not d.publish and "worse than 0.9500" in d.reason

    def test_tolerance_and_lower_is_better(self):
        current = {"version": "a", "score": 0.50}
        assert decide(
            {"loss": 0.505}, current, metric="loss", higher_is_better=False, tolerance=0.01, version="b"
        ).publish
        assert not decide(
            {"loss": 0.52}, current, metric="loss", higher_is_better=False, tolerance=0.01, version="b"
        ).publish
        assert decide({"loss": 0.40}, current, metric="loss", higher_is_better=False, version="b").publish

    def test_an_older_version_never_replaces_the_one_in_service(self):
        current = {"version": "20261121T000000", "score": 0.5}
        d = decide({"acc": 0.99}, current, metric="acc", version="20261120T000000")
        assert not d.publish and "older" in d.reason

    def test_a_missing_metric_names_the_ones_there_are(self):
        with pytest.raises(RegistryError, match="no 'acc'.*loss"):
            decide({"loss": 1.0}, None, metric="acc", version="v")


def fake_export(root, name: str, content: str) -> str:
    export = os.path.join(root, name, "export")
    os.makedirs(os.path.join(export, "variables"))
    with open(os.path.join(export, "saved_model.pb"), "w") as f:
        f.write(content)
    with open(os.path.join(export, "variables", "variables.index"), "w") as f:
        f.write(content * 2)
    return export


def exercise(registry: ModelRegistry, tmp_path) -> None:
    local = LocalStorage()
    assert registry.current() is None and registry.in_service_before("99999999") is None
    first = fake_export(str(tmp_path), "run1", "one")
    added = registry.add_version("20261120T000000", first, local, {"spec_hash": "h1", "score": 0.9})
    registry.set_current(added)
    registry.record_decision("20261120T000000", decide({"acc": 0.9}, None, metric="acc", version="20261120T000000"))
    assert registry.current_model_path() == registry.path("versions", "20261120T000000", "h1", "model")
    assert (
        registry.storage.read_bytes(registry.path("versions", "20261120T000000", "h1", "model", "saved_model.pb"))
        == b"one"
    )
    assert (
        registry.storage.read_bytes(
            registry.path("versions", "20261120T000000", "h1", "model", "variables", "variables.index")
        )
        == b"oneone"
    )
    # the same export again: nothing copied, the same record
    assert registry.add_version("20261120T000000", first, local, {"spec_hash": "h1"})["copied_at"] == added["copied_at"]
    # the next day: published; a run of that day (or a rerun) starts from the day before's model
    second = fake_export(str(tmp_path), "run2", "two")
    registry.set_current(registry.add_version("20261121T000000", second, local, {"spec_hash": "h2", "score": 0.95}))
    registry.record_decision(
        "20261121T000000", decide({"acc": 0.95}, registry.current(), metric="acc", version="20261121T000000")
    )
    assert registry.in_service_before("20261121T000000") == registry.path("versions", "20261120T000000", "h1", "model")
    assert registry.in_service_before("20261122T000000") == registry.path("versions", "20261121T000000", "h2", "model")
    assert registry.in_service_before("20261120T000000") is None
    assert [d["version"] for d in registry.decisions()] == ["20261120T000000", "20261121T000000"]
    assert not [n for n in registry.storage.listdir(registry.path("versions", "20261121T000000")) if ".tmp-" in n]
    # another export under the same version and spec (a backfill and the nightly run): a copy of its own
    other = registry.add_version(
        "20261120T000000", fake_export(str(tmp_path), "b", "other"), local, {"spec_hash": "h1"}
    )
    assert other["model_path"] != added["model_path"] and other["content_digest"] != added["content_digest"]
    assert registry.storage.read_bytes(other["model_path"] + "/saved_model.pb") == b"other"
    assert registry.add_version("20261120T000000", first, local, {"spec_hash": "h1"}) == added
    with pytest.raises(RegistryError, match="cannot name a directory"):
        registry.add_version("../x", first, local, {})


def test_registry_on_local_disk(tmp_path):
    exercise(ModelRegistry(str(tmp_path / "registry")), tmp_path)
    current = json.loads((tmp_path / "registry" / "current.json").read_text())
    assert current["version"] == "20261121T000000" and current["spec_hash"] == "h2"


def test_registry_on_webhdfs(tmp_path):
    with WebHDFSEmulator() as emulator:
        storage = WebHDFSStorage(emulator.config(**FAST))
        exercise(ModelRegistry(emulator.uri("/models/digits"), storage=storage), tmp_path)
        assert os.path.isfile(emulator.local_path("/models/digits/versions/20261121T000000/h2/model/saved_model.pb"))


def test_a_broken_current_json_says_what_to_fix(tmp_path):
    (tmp_path / "current.json").write_text("{not json")
    with pytest.raises(RegistryError, match="current.json is not valid JSON"):
        ModelRegistry(str(tmp_path)).current()


def test_a_registry_written_before_copies_per_spec_is_still_read(tmp_path):
    registry = ModelRegistry(str(tmp_path / "registry"))
    old = {
        "version": "20261120T000000",
        "spec_hash": "h0",
        "model_path": registry.path("versions", "20261120T000000", "model"),
    }
    registry.storage.write_bytes(registry.path("versions", "20261120T000000", "_SUCCESS"), json.dumps(old).encode())
    assert registry.version("20261120T000000") == old == registry.version("20261120T000000", "h0")
    assert registry.version("20261120T000000", "h1") is None
    added = registry.add_version(
        "20261120T000000", fake_export(str(tmp_path), "run1", "one"), LocalStorage(), {"spec_hash": "h1"}
    )
    assert registry.version("20261120T000000", "h1") == added and registry.version("20261120T000000", "h0") == old
