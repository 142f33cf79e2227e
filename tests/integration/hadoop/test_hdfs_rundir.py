"""The run directory and the model registry on Hadoop's own HDFS, written through the project's WebHDFS storage
and read back with Hadoop's own Java client (``HdfsInspect``, over RPC): content, permission bits, and no
temporary name left in sight once something is published."""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import uuid

import pytest

from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.registry_gate import decide
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage import LocalStorage, join

pytestmark = pytest.mark.real_hadoop


def by_name(entries: list[dict]) -> dict[str, dict]:
    """HdfsInspect's entries by their path."""
    return {entry["path"]: entry for entry in entries}


def temporary_names(entries: list[dict]) -> list[str]:
    """Paths whose last part is a name the project writes under before it renames (``.x.tmp-``, ``.staging-``)."""
    return [e["path"] for e in entries if e["path"].rsplit("/", 1)[-1].startswith(".")]


@pytest.fixture
def run_dir(hadoop_lab) -> tuple[RunDir, str]:
    path = f"/user/{getpass.getuser()}/runs/{uuid.uuid4().hex[:8]}"
    return RunDir(hadoop_lab.uri(path)), path


def test_spec_and_status_read_back_by_hadoops_client_in_a_private_run_directory(hadoop_lab, run_dir):
    rundir, path = run_dir
    digest = rundir.write_spec({"train_fn": "pkg.mod:main", "args": {"lr": 0.1}, "workers": 2})
    rundir.write_status("RUNNING", application_id="application_1_0001", step=40)
    rundir.write_status("RUNNING", step=50)  # replaces status.json by a rename over it

    entries = hadoop_lab.inspect(path)[path]
    found = by_name(entries)
    assert found[path]["type"] == "DIRECTORY" and found[path]["permission"] == "700"
    assert found[path]["owner"] == getpass.getuser()
    spec = json.loads(found[f"{path}/spec.json"]["text"])
    status = json.loads(found[f"{path}/status.json"]["text"])
    assert spec["spec_hash"] == digest and spec["args"] == {"lr": 0.1}
    assert (status["state"], status["application_id"], status["step"]) == ("RUNNING", "application_1_0001", 50)
    assert found[f"{path}/spec.json"]["replication"] == 2
    assert temporary_names(entries) == []
    # the bytes Hadoop reads are the bytes the project reads
    ours = rundir.storage.read_bytes(rundir.path("spec.json"))
    assert found[f"{path}/spec.json"]["sha256"] == hashlib.sha256(ours).hexdigest()


def test_a_checkpoint_appears_by_rename_with_its_manifest_and_no_staging_name_left(hadoop_lab, run_dir):
    rundir, path = run_dir
    rundir.make_private()
    files = {"ckpt.index": b"index-10", "ckpt.data-00000-of-00001": os.urandom(200_000)}
    staging = rundir.checkpoint_staging(10)
    for name, data in files.items():
        rundir.storage.write_bytes(join(staging, name), data)
    staged_name = staging.rsplit("/", 1)[-1]

    before = by_name(hadoop_lab.inspect(f"{path}/checkpoints")[f"{path}/checkpoints"])
    assert f"{path}/checkpoints/{staged_name}" in before and f"{path}/checkpoints/ckpt-10" not in before

    rundir.publish_checkpoint(staging, 10, epoch=1, keep=1)
    entries = hadoop_lab.inspect(f"{path}/checkpoints")[f"{path}/checkpoints"]
    found = by_name(entries)
    for name, data in files.items():
        assert found[f"{path}/checkpoints/ckpt-10/{name}"]["sha256"] == hashlib.sha256(data).hexdigest()
    manifest = json.loads(found[f"{path}/checkpoints/manifest.json"]["text"])
    assert (manifest["latest"]["name"], manifest["latest"]["step"], manifest["latest"]["epoch"]) == ("ckpt-10", 10, 1)
    assert temporary_names(entries) == []

    # the next one replaces it (keep=1): the manifest names step 20 and ckpt-10 is gone
    staging = rundir.checkpoint_staging(20)
    rundir.storage.write_bytes(join(staging, "ckpt.index"), b"index-20")
    rundir.publish_checkpoint(staging, 20, epoch=2, keep=1)
    entries = hadoop_lab.inspect(f"{path}/checkpoints")[f"{path}/checkpoints"]
    found = by_name(entries)
    assert json.loads(found[f"{path}/checkpoints/manifest.json"]["text"])["latest"]["step"] == 20
    assert sorted(p.rsplit("/", 1)[-1] for p in found if p.count("/") == path.count("/") + 2) == [
        "ckpt-20",
        "manifest.json",
    ]
    assert found[f"{path}/checkpoints/ckpt-20/ckpt.index"]["text"] == "index-20"


def test_the_registry_puts_a_model_in_service_whose_bytes_hadoop_reads_back(hadoop_lab, tmp_path):
    export = tmp_path / "export"
    (export / "variables").mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"saved-model-bytes")
    (export / "variables" / "variables.index").write_bytes(b"variables")
    metrics = {"acc": 0.9}
    (export / "_SUCCESS").write_text(json.dumps({"spec_hash": "h", "step": 100, "metrics": metrics, "time": 1.0}))
    record = {"spec_hash": "h", "fingerprint": None, "metrics": metrics, "metric": "acc", "score": 0.9}
    path = f"/models/{uuid.uuid4().hex[:8]}"
    registry = ModelRegistry(hadoop_lab.uri(path))

    added = registry.add_version("20261127T000000", str(export), LocalStorage(), record)
    decision, _ = registry.publish(
        "20261127T000000", added, lambda current: decide(metrics, current, metric="acc", version="20261127T000000")
    )
    assert decision.publish

    entries = hadoop_lab.inspect(path)[path]
    found = by_name(entries)
    current = json.loads(found[f"{path}/current.json"]["text"])
    assert current["version"] == "20261127T000000" and current["judged"]["candidate"] == 0.9
    model_dir = current["model_path"].split("://", 1)[1].split("/", 1)[1]  # the path, without the NameNode
    assert found[f"/{model_dir}/saved_model.pb"]["sha256"] == hashlib.sha256(b"saved-model-bytes").hexdigest()
    assert found[f"/{model_dir}/variables/variables.index"]["text"] == "variables"
    assert f"{path}/current.lock" not in found  # released
    assert temporary_names(entries) == []
    assert len([p for p in found if p.startswith(f"{path}/decisions/")]) == 1
