"""What the run directory reads back is not trusted: names from JSON and listings, and who may read it."""

from __future__ import annotations

import json
import logging
import os
import stat

import pytest

from airflow_tfos.hooks.errors import RunConfigError
from airflow_tfos.hooks.run_dir import normalize_run_dir, place_run_dir
from airflow_tfos.shared.errors import RunDirError, WebHDFSError
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage import LocalStorage, is_plain_name
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.testing.webhdfs_namespace import Namespace
from tests.conftest import run_dir_for

FAST = {"retries": 0, "backoff": 0.05, "timeout": 5.0, "deadline": 10.0}


@pytest.fixture(params=["local", "webhdfs"])
def rundir(request, tmp_path):
    """A run directory on local disk or on HDFS; ``.backing`` is its folder on this machine."""
    return run_dir_for(request, tmp_path, "runs", FAST)


def victim_beside(rundir) -> str:
    """A directory two levels above the run directory's checkpoints, with a file in it."""
    victim = os.path.join(os.path.dirname(rundir.backing), "victim")
    os.makedirs(victim, exist_ok=True)
    with open(os.path.join(victim, "precious.txt"), "w") as f:
        f.write("keep me")
    return victim


def write_manifest(rundir, history) -> None:
    rundir.storage.write_bytes(rundir.path("checkpoints", "manifest.json"), json.dumps({"history": history}).encode())


def test_plain_names():
    assert is_plain_name("ckpt-3") and is_plain_name(".staging-x") and is_plain_name("a..b")
    for bad in ("", ".", "..", "a/b", "../x", "/x", "a\0b", None, 3):
        assert not is_plain_name(bad), bad


def test_a_manifest_naming_a_path_outside_makes_publishing_refuse_and_delete_nothing(rundir):
    victim = victim_beside(rundir)
    write_manifest(rundir, [{"name": "../../victim", "step": 1}, {"name": "ckpt-2", "step": 2}])
    staging = rundir.checkpoint_staging(10)
    rundir.storage.write_bytes(f"{staging}/weights", b"w")

    with pytest.raises(RunDirError, match=r"manifest\.json.*'\.\./\.\./victim'.*remove that entry"):
        rundir.publish_checkpoint(staging, 10, keep=1)

    assert os.path.isfile(os.path.join(victim, "precious.txt"))  # the old code deleted it (keep=1)
    assert json.loads(rundir.storage.read_bytes(rundir.path("checkpoints", "manifest.json")))["history"][0]["name"] == (
        "../../victim"
    )  # nothing was rewritten either


def test_restores_skip_manifest_entries_that_are_not_checkpoint_names(rundir, caplog):
    victim_beside(rundir)
    staging = rundir.checkpoint_staging(5)
    rundir.storage.write_bytes(f"{staging}/weights", b"w")
    rundir.publish_checkpoint(staging, 5)
    good = {"name": "ckpt-5", "step": 5}
    write_manifest(rundir, [good, {"name": "../../victim", "step": 9}, {"name": "ckpt-7", "step": "7; rm"}, "x"])

    with caplog.at_level(logging.WARNING, logger="airflow_tfos.shared.checkpoint_manifest"):
        latest = rundir.latest_checkpoint()
        history = rundir.checkpoint_history()

    assert latest is not None and latest.step == 5 and latest.path == rundir.path("checkpoints", "ckpt-5")
    assert [h["name"] for h in history] == ["ckpt-5"]
    assert "'../../victim'" in caplog.text and "not a checkpoint directory" in caplog.text


def test_paths_inside_the_run_directory_only(rundir):
    for bad in ("..", "checkpoints/../../x", "", "a//b", "a\0b"):
        with pytest.raises(RunDirError, match="plain name"):
            rundir.path(bad)
    assert rundir.path("control/stop.json").endswith("/run/control/stop.json")


def test_a_feed_request_naming_another_feed_id_is_skipped_and_bad_ids_are_refused(rundir, caplog):
    assert rundir.request_feed("good-1", {"data": None})
    rundir.storage.write_bytes(
        rundir.path("feeds", "evil.json"), json.dumps({"feed_id": "../../victim", "requested": 0}).encode()
    )
    with caplog.at_level(logging.WARNING, logger="airflow_tfos.shared.driver_requests"):
        pending = rundir.pending_feeds()
    assert [r["feed_id"] for r in pending] == ["good-1"]
    assert "evil.json" in caplog.text

    for bad in ("../../victim", "a/b", "", ".hidden"):
        with pytest.raises(ValueError, match="feed id"):
            rundir.mark_feed_done(bad, step=1)
        with pytest.raises(ValueError, match="feed id"):
            rundir.feed_result(bad)
    assert not os.path.exists(os.path.join(os.path.dirname(rundir.backing), "victim.done.json"))


def mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_local_run_directories_are_private_to_their_owner(tmp_path):
    fresh = RunDir(str(tmp_path / "base" / "fresh"))
    fresh.write_spec({"train_fn": "m:f"})
    assert mode(tmp_path / "base" / "fresh") == 0o700

    existing = tmp_path / "existing"
    existing.mkdir(mode=0o755)
    os.chmod(existing, 0o755)
    RunDir(f"file://{existing}", storage=LocalStorage()).write_spec({"train_fn": "m:f"})
    assert mode(existing) == 0o700


def test_hdfs_run_directories_are_private_to_their_owner(emulator):
    owner = WebHDFSStorage(emulator.config(user="alice", **FAST))
    other = WebHDFSStorage(emulator.config(user="mallory", **FAST))
    rundir = RunDir(emulator.uri("/private/base/run"), storage=owner)
    before = len(emulator.requests)
    rundir.write_spec({"train_fn": "m:f"})

    asked = [(r.op, r.query.get("permission")) for r in list(emulator.requests)[before:] if r.op != "GETFILESTATUS"]
    assert ("MKDIRS", "700") in asked and ("SETPERMISSION", "700") in asked
    assert emulator.permission("/private/base/run") == "700"
    assert emulator.permission("/private/base") == "755"  # the parents are not made private
    assert json.loads(owner.read_bytes(rundir.path("spec.json")))["train_fn"] == "m:f"
    with pytest.raises(PermissionError, match="mallory"):
        other.read_bytes(rundir.path("spec.json"))
    with pytest.raises(PermissionError, match="mallory"):
        other.write_bytes(rundir.path("control/stop.json"), b"{}")

    # a run directory that existed with the default permission is made private too
    owner.makedirs(emulator.uri("/private/old"))
    assert emulator.permission("/private/old") == "755"
    RunDir(emulator.uri("/private/old"), storage=owner).write_spec({"train_fn": "m:f"})
    assert emulator.permission("/private/old") == "700"


def test_emulator_setpermission_is_for_the_owner_and_takes_octal_only(emulator):
    owner = WebHDFSStorage(emulator.config(user="alice", **FAST))
    other = WebHDFSStorage(emulator.config(user="mallory", **FAST))
    owner.makedirs(emulator.uri("/perm/x"))
    with pytest.raises(PermissionError, match="not the owner"):
        other._call("SETPERMISSION", "/perm/x", lambda c: c.set_permission("/perm/x", "777"))
    with pytest.raises(WebHDFSError, match="permission"):
        owner._call("SETPERMISSION", "/perm/x", lambda c: c.set_permission("/perm/x", "9z"))
    owner._call("SETPERMISSION", "/perm/x", lambda c: c.set_permission("/perm/x", "750"))
    assert emulator.permission("/perm/x") == "750"


def test_a_download_refuses_names_a_namenode_should_never_list(emulator, tmp_path, monkeypatch, caplog):
    storage = WebHDFSStorage(emulator.config(**FAST))
    storage.write_bytes(emulator.uri("/listing/model/evil"), b"x")
    storage.write_bytes(emulator.uri("/listing/model/fine"), b"y")
    real_status = Namespace.status

    def tampered(self, path, suffix=""):
        status = real_status(self, path, suffix)
        return {**status, "pathSuffix": "../../escaped"} if suffix == "evil" else status

    monkeypatch.setattr(Namespace, "status", tampered)
    target = tmp_path / "a" / "b" / "download"
    with pytest.raises(WebHDFSError, match=r"'\.\./\.\./escaped'.*not a plain file name"):
        storage.get_dir(emulator.uri("/listing/model"), str(target))
    assert not (tmp_path / "a" / "escaped").exists() and not (tmp_path / "escaped").exists()

    with caplog.at_level(logging.WARNING, logger="airflow_tfos.shared.storage.webhdfs_client"):
        assert storage.listdir(emulator.uri("/listing/model")) == ["fine"]
    assert "../../escaped" in caplog.text


@pytest.mark.parametrize(
    ("given", "normalized"),
    [
        ("/data/runs/x/", "/data/runs/x"),
        ("hdfs://ns//runs/./x", "hdfs://ns/runs/x"),
        ("hdfs:///runs/x", "hdfs:///runs/x"),
        ("file:///data/x", "file:///data/x"),
        ("WEBHDFS://nn:9870/r", "webhdfs://nn:9870/r"),
    ],
)
def test_run_dirs_are_normalised(given, normalized):
    assert normalize_run_dir(given) == normalized


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("", "absolute path or a URI"),
        ("runs/x", "absolute path or a URI"),
        ("/data/../etc", r"'\.\.' segment"),
        ("hdfs://ns/runs/..", r"'\.\.' segment"),
        ("hdfs://ns", "no absolute path"),
        ("/", "root of its file system"),
        ("webhdfs://nn:9870/", "root of its file system"),
        ("file://relative/x", "names a host"),
    ],
)
def test_bad_run_dirs_are_refused(given, message):
    with pytest.raises(RunConfigError, match=message):
        normalize_run_dir(given)


def test_the_base_bounds_by_whole_segments_scheme_and_host():
    base = "hdfs://ns/tfos-runs"
    assert place_run_dir("hdfs://ns/tfos-runs/a/b", base, must_be_under_base=True) == "hdfs://ns/tfos-runs/a/b"
    for outside in ("hdfs://ns/tfos-runs-other/a", "hdfs://other/tfos-runs/a", "/tfos-runs/a", "hdfs://ns/tfos-runs"):
        with pytest.raises(RunConfigError, match=r"\[tfos\] run_dir_base.*allow_run_dir_outside_base=True"):
            place_run_dir(outside, base, must_be_under_base=True)
    assert place_run_dir("file:///b/x", "/b", must_be_under_base=True) == "file:///b/x"  # local either way
    assert place_run_dir("/elsewhere/x", base, must_be_under_base=False) == "/elsewhere/x"
