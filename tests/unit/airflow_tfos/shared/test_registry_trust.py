"""The copy the registry puts in service is the export whose metrics were judged, and a registry that serves
another copy is named, not kept."""

from __future__ import annotations

import json
import os

import pytest

from airflow_tfos.shared.errors import RegistryError
from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.registry_gate import decide
from airflow_tfos.shared.storage import LocalStorage
from tests.unit.airflow_tfos.shared.test_registry import fake_export

OLD, VERSION = "20261120T000000", "20261121T000000"


def export(root, name: str, accuracy: float) -> tuple[str, dict]:
    """An export (its saved_model.pb holds ``name``) and the record a publisher gives ``add_version``."""
    path = fake_export(root, name, name)
    metrics = {"acc": accuracy}
    with open(os.path.join(path, "_SUCCESS"), "w") as f:
        json.dump({"spec_hash": "h", "step": 100, "metrics": metrics, "time": 1.0}, f)
    return path, {"spec_hash": "h", "fingerprint": None, "metrics": metrics, "metric": "acc", "score": accuracy}


def publish(registry: ModelRegistry, tmp_path, name: str, version: str, accuracy: float):
    path, record = export(str(tmp_path), name, accuracy)
    added = registry.add_version(version, path, LocalStorage(), record)
    return registry.publish(
        version, added, lambda current: decide(record["metrics"], current, metric="acc", version=version)
    )


def model_in_service(registry: ModelRegistry) -> bytes:
    return registry.storage.read_bytes(registry.current_model_path() + "/saved_model.pb")


def test_a_rejected_export_of_the_same_version_is_never_put_in_service_for_the_one_judged(tmp_path):
    """A backfill and the nightly run export the same version string (same spec, same input): the backfill's
    0.40 is rejected, the nightly's 0.90 is published. The model in service is the 0.90 one, by its bytes."""
    registry = ModelRegistry(str(tmp_path / "registry"))
    publish(registry, tmp_path, "base", OLD, 0.85)
    rejected, _ = publish(registry, tmp_path, "backfill", VERSION, 0.40)
    assert not rejected.publish
    accepted, in_service = publish(registry, tmp_path, "nightly", VERSION, 0.90)
    assert accepted.publish
    assert model_in_service(registry) == b"nightly"
    current = registry.current()
    assert current["score"] == 0.90 and current["judged"]["candidate"] == 0.90 == in_service["judged"]["candidate"]
    assert (
        current["content_digest"] == registry.version(VERSION, "h", None, current["content_digest"])["content_digest"]
    )
    # the rejected copy is kept beside it, a copy of its own
    copies = [n for n in registry.storage.listdir(registry.path("versions", VERSION)) if not n.startswith(".")]
    assert len(copies) == 2 and current["model_path"] != registry.path("versions", VERSION, "h", "model")
    assert registry.check_in_service(verify_content=True)["model_path"] == current["model_path"]
    # the decisions name the copy each judged
    decisions = registry.decisions()
    assert [d["content_digest"] for d in decisions[1:]] != [current["content_digest"]] * 2
    assert decisions[-1]["content_digest"] == current["content_digest"]
    assert registry.in_service_before("20261122T000000") == current["model_path"]


def test_the_same_export_added_again_reuses_its_copy(tmp_path):
    registry = ModelRegistry(str(tmp_path / "registry"))
    path, record = export(str(tmp_path), "run", 0.9)
    first = registry.add_version(VERSION, path, LocalStorage(), record)
    again = registry.add_version(VERSION, path, LocalStorage(), record)
    assert again == first and again["model_path"] == registry.path("versions", VERSION, "h", "model")


def test_an_export_whose_record_changed_while_copied_is_refused(tmp_path):
    registry = ModelRegistry(str(tmp_path / "registry"))
    path, record = export(str(tmp_path), "run", 0.4)
    judged = {**record, "metrics": {"acc": 0.9}, "score": 0.9}  # what was read before the export was replaced
    with pytest.raises(RegistryError, match="metrics.*differ.*publish again"):
        registry.add_version(VERSION, path, LocalStorage(), judged)
    assert registry.version(VERSION) is None


def test_a_copy_whose_content_changed_after_it_was_judged_is_named(tmp_path):
    registry = ModelRegistry(str(tmp_path / "registry"))
    publish(registry, tmp_path, "good", VERSION, 0.9)
    registry.storage.write_bytes(registry.current_model_path() + "/saved_model.pb", b"swapped")
    registry.check_in_service()  # the records agree
    with pytest.raises(RegistryError, match=rf"{VERSION}/h/model.*content"):
        registry.check_in_service(verify_content=True)


def write_json(path, record) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f)


def old_copy(registry: ModelRegistry, version: str, content: str, accuracy: float) -> dict:
    """A copy as the registry wrote it before copies had a content digest."""
    model = registry.path("versions", version, "h", "model")
    os.makedirs(model)
    with open(os.path.join(model, "saved_model.pb"), "w") as f:
        f.write(content)
    record = {
        "source_run_dir": f"/runs/{content}",
        "spec_hash": "h",
        "fingerprint": None,
        "step": 100,
        "metrics": {"acc": accuracy},
        "metric": "acc",
        "score": accuracy,
        "version": version,
        "model_path": model,
        "copied_at": 1.0,
    }
    write_json(registry.path("versions", version, "h", "_SUCCESS"), record)
    return record


def old_decision(registry: ModelRegistry, n: int, version: str, published: bool, candidate: float, baseline, copy):
    write_json(
        registry.path("decisions", f"{n:020d}-{version}.json"),
        {
            "version": version,
            "published": published,
            "reason": "as the gate said",
            "candidate": candidate,
            "baseline": baseline,
            "time": float(n),
            "model_path": copy["model_path"],
            "spec_hash": "h",
            "fingerprint": None,
        },
    )


def old_registry_serving_a_rejected_copy(root) -> ModelRegistry:
    """A registry as the earlier publisher left it after the backfill/nightly case: the nightly's 0.90 was
    judged and published, but current.json points at the backfill's rejected 0.40 copy."""
    registry = ModelRegistry(str(root))
    base = old_copy(registry, OLD, "base", 0.85)
    old_decision(registry, 1, OLD, True, 0.85, None, base)
    backfill = old_copy(registry, VERSION, "backfill", 0.40)
    old_decision(registry, 2, VERSION, False, 0.40, 0.85, backfill)
    old_decision(registry, 3, VERSION, True, 0.90, 0.85, backfill)  # judged the nightly, put the backfill in
    write_json(registry.path("current.json"), {**backfill, "in_service_since": 3.0})
    return registry


def test_an_old_registry_serving_a_rejected_copy_is_named(tmp_path):
    registry = old_registry_serving_a_rejected_copy(tmp_path / "registry")
    with pytest.raises(RegistryError) as caught:
        registry.check_in_service()
    message = str(caught.value)
    assert f"{VERSION}/h/model" in message and "0.4" in message and "0.9" in message
    assert "roll_back()" in message and "publish again" in message


def test_an_old_registry_is_rolled_back_to_the_last_copy_judged_then_published_again(tmp_path):
    registry = old_registry_serving_a_rejected_copy(tmp_path / "registry")
    back = registry.roll_back()
    assert back["version"] == OLD and model_in_service(registry) == b"base"
    assert registry.check_in_service(verify_content=True)["version"] == OLD
    assert registry.decisions()[-1]["reason"].startswith("rolled back")
    decision, _ = publish(registry, tmp_path, "nightly", VERSION, 0.90)
    assert decision.publish and model_in_service(registry) == b"nightly"
    assert registry.current_model_path() != registry.path("versions", VERSION, "h", "model")


def test_an_old_registry_serving_the_copy_it_judged_is_still_read_and_trusted(tmp_path):
    registry = ModelRegistry(str(tmp_path / "registry"))
    base = old_copy(registry, OLD, "base", 0.85)
    old_decision(registry, 1, OLD, True, 0.85, None, base)
    write_json(registry.path("current.json"), {**base, "in_service_since": 1.0})
    assert registry.check_in_service(verify_content=True)["version"] == OLD
    decision, _ = publish(registry, tmp_path, "nightly", VERSION, 0.90)
    assert decision.publish and model_in_service(registry) == b"nightly"
    assert registry.check_in_service(verify_content=True)["version"] == VERSION
