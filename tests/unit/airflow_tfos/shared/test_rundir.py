"""The run directory contract, on local storage and on HDFS (the WebHDFS emulator)."""

from __future__ import annotations

import json
import os
import time

import pytest

from airflow_tfos.shared.driver_requests import stop_applies
from airflow_tfos.shared.errors import RunDirError
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import spec_hash
from airflow_tfos.shared.staging import discard_stale, replace_dir
from airflow_tfos.shared.storage import LocalStorage, join
from tests.conftest import run_dir_for


@pytest.fixture(params=["local", "webhdfs"])
def rundir(request, tmp_path):
    """A run directory on local disk, or on HDFS; ``.backing`` is its folder on this machine."""
    return run_dir_for(request, tmp_path, "")


def test_spec_hash_ignores_key_order_and_its_own_field(rundir):
    spec = {"train_fn": "pkg.mod:main", "args": {"b": 2, "a": 1}, "workers": 2}
    digest = rundir.write_spec(spec)
    assert digest == spec_hash({"workers": 2, "args": {"a": 1, "b": 2}, "train_fn": "pkg.mod:main"})
    assert rundir.read_spec()["spec_hash"] == digest
    assert spec_hash(rundir.read_spec()) == digest
    assert spec_hash({**spec, "workers": 3}) != digest


def test_status_keeps_earlier_fields_and_beats(rundir):
    rundir.write_status("STARTING", application_id="app-1", attempt=0)
    status = rundir.write_status("RUNNING", step=40)
    assert status["application_id"] == "app-1" and status["step"] == 40 and status["state"] == "RUNNING"
    assert status["heartbeat"] > 0
    with pytest.raises(ValueError, match="unknown run state 'DONE'"):
        rundir.write_status("DONE")


def test_checkpoints_publish_keep_the_last_k_and_name_the_latest(rundir):
    for step in (10, 20, 30, 40):
        staging = rundir.checkpoint_staging(step)
        rundir.storage.write_bytes(join(staging, "data"), str(step).encode())
        rundir.publish_checkpoint(staging, step, epoch=step // 20, keep=2)
    latest = rundir.latest_checkpoint()
    assert (latest.step, latest.epoch) == (40, 2)
    assert sorted(rundir.storage.listdir(rundir.path("checkpoints"))) == ["ckpt-30", "ckpt-40", "manifest.json"]
    assert rundir.storage.read_bytes(join(latest.path, "data")) == b"40"


def test_a_half_written_checkpoint_is_never_used(rundir):
    rundir.publish_checkpoint(rundir.checkpoint_staging(5), 5)
    rundir.checkpoint_staging(9)  # a crash while writing step 9: never published
    assert rundir.latest_checkpoint().step == 5
    assert rundir.discard_staging() == 1
    assert rundir.latest_checkpoint().step == 5


def test_a_checkpoint_named_in_the_manifest_but_gone_falls_back_to_the_previous(rundir):
    rundir.publish_checkpoint(rundir.checkpoint_staging(1), 1)
    rundir.publish_checkpoint(rundir.checkpoint_staging(2), 2)
    rundir.storage.delete(rundir.path("checkpoints", "ckpt-2"))
    assert rundir.latest_checkpoint().step == 1


def test_no_checkpoint_yet(rundir):
    assert rundir.latest_checkpoint() is None


def test_feed_requests_are_served_in_order_each_once(rundir):
    assert rundir.request_feed("day-1", {"data": "/d/1", "epochs": 2})
    assert rundir.request_feed("day-2", {"data": "/d/2", "epochs": 1})
    assert not rundir.request_feed("day-1", {"data": "/other"})  # idempotent by id
    assert [f["feed_id"] for f in rundir.pending_feeds()] == ["day-1", "day-2"]
    rundir.mark_feed_done("day-1", rows=100)
    assert [f["feed_id"] for f in rundir.pending_feeds()] == ["day-2"]
    assert rundir.feed_result("day-1")["rows"] == 100
    with pytest.raises(ValueError, match="feed id"):
        rundir.request_feed("../escape", {})


def test_stop_request(rundir):
    assert rundir.stop_requested() is None
    rundir.request_stop("nightly window over")
    assert rundir.stop_requested()["reason"] == "nightly window over"


def test_a_stop_request_applies_to_its_application_or_to_those_started_before_it(rundir):
    started = time.time()
    rundir.request_stop("shutdown task", application_id="app-old")
    assert rundir.stop_requested()["application_id"] == "app-old"  # unfiltered: as written
    assert rundir.stop_requested(application_ids={"app-new"}, started=started - 60) is None
    assert rundir.stop_requested(application_ids={"app-old"}, started=started + 60)["reason"] == "shutdown task"
    rundir.request_stop("by hand")  # names no application: for those already started when it was written
    assert rundir.stop_requested(application_ids={"app-new"}, started=started - 60)["reason"] == "by hand"
    assert rundir.stop_requested(application_ids={"app-new"}, started=time.time() + 1) is None
    rundir.clear_stop()
    assert rundir.stop_requested() is None


def test_stop_applies_reads_requests_written_before_scoping():
    assert stop_applies({"reason": "x", "requested": 100.0}, {"a"}, started=50.0)
    assert not stop_applies({"reason": "x", "requested": 100.0}, {"a"}, started=150.0)
    assert not stop_applies({"reason": "x"}, {"a"}, started=0.0)


def test_export_appears_whole_with_its_success_marker(rundir):
    staging = rundir.export_staging()
    rundir.storage.write_bytes(join(staging, "saved_model.pb"), b"model")
    assert rundir.export_success() is None  # nothing visible while it is being written
    final = rundir.publish_export(staging, spec_hash="abc", step=300, metrics={"accuracy": 0.97})
    assert rundir.storage.exists(final + "/saved_model.pb")
    assert rundir.export_success()["spec_hash"] == "abc"
    assert rundir.export_success()["metrics"] == {"accuracy": 0.97}


def test_a_replacing_export_leaves_no_staging_or_aside_directory_behind(rundir):
    first = rundir.export_staging()
    rundir.storage.write_bytes(join(first, "saved_model.pb"), b"old")
    rundir.publish_export(first, spec_hash="old", step=10, metrics={})
    crashed = rundir.export_staging()  # a writer that died half-way
    rundir.storage.write_bytes(join(crashed, "saved_model.pb"), b"half")
    second = rundir.export_staging()
    rundir.storage.write_bytes(join(second, "saved_model.pb"), b"new")
    final = rundir.publish_export(second, spec_hash="new", step=20, metrics={})
    assert rundir.storage.read_bytes(final + "/saved_model.pb") == b"new"
    assert rundir.export_success()["spec_hash"] == "new"
    assert [n for n in rundir.storage.listdir(rundir.uri) if n.startswith(".")] == []


class _RenameFails(LocalStorage):
    """Local storage whose renames of a staging directory into ``target`` fail (a full quota, a lost connection...)."""

    def __init__(self, target: str):
        self.target = target

    def rename(self, src: str, dst: str) -> None:
        if dst.rstrip("/") == self.target and "/.staging-" in src:
            raise OSError("quota exceeded")
        super().rename(src, dst)


def test_an_export_that_cannot_be_put_in_place_leaves_the_old_one_whole(tmp_path):
    rundir = RunDir(str(tmp_path / "run"))
    old = rundir.export_staging()
    rundir.storage.write_bytes(join(old, "saved_model.pb"), b"old")
    rundir.publish_export(old, spec_hash="old", step=10, metrics={})
    failing = RunDir(rundir.uri, storage=_RenameFails(rundir.path("export")))
    new = failing.export_staging()
    failing.storage.write_bytes(join(new, "saved_model.pb"), b"new")
    with pytest.raises(OSError, match="quota"):
        failing.publish_export(new, spec_hash="new", step=20, metrics={})
    assert rundir.export_success()["spec_hash"] == "old"
    assert rundir.storage.read_bytes(rundir.path("export", "saved_model.pb")) == b"old"


def test_replace_dir_swaps_a_directory_in_by_renames(tmp_path):
    storage = LocalStorage()
    final, staging = str(tmp_path / "out"), str(tmp_path / ".staging-out-1")
    storage.write_bytes(final + "/part-0", b"old")
    storage.write_bytes(staging + "/part-0", b"new")
    replace_dir(storage, staging, final)
    assert storage.read_bytes(final + "/part-0") == b"new" and sorted(os.listdir(tmp_path)) == ["out"]
    storage.write_bytes(str(tmp_path / ".staging-out-2/part-0"), b"left by a crash")
    assert discard_stale(storage, str(tmp_path), "out") == [str(tmp_path / ".staging-out-2")]


def test_events_come_back_in_time_order(rundir):
    rundir.add_event("attempt", attempt=0)
    rundir.add_event("restore", step=40)
    rundir.add_event("attempt", attempt=1)
    assert [e["kind"] for e in rundir.events()] == ["attempt", "restore", "attempt"]
    assert [e["attempt"] for e in rundir.events("attempt")] == [0, 1]


def test_foreign_json_is_a_clear_error(rundir):
    os.makedirs(rundir.backing)
    with open(os.path.join(rundir.backing, "status.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(RunDirError, match="status.json is not valid JSON"):
        rundir.read_status()


def test_unwritable_run_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(RunDirError, match=r"^Not a directory \(cannot create the run directory .*/file/run private"):
        RunDir(str(blocker / "run")).write_spec({"a": 1})
    with pytest.raises(RunDirError, match=r"^Not a directory \(cannot read .*/file/run/status.json\)$"):
        RunDir(str(blocker / "run")).write_status("STARTING")


def test_everything_written_is_json(rundir):
    rundir.write_spec({"a": 1})
    rundir.write_status("RUNNING")
    rundir.request_feed("f", {})
    rundir.add_event("x")
    for folder, _, files in os.walk(rundir.backing):
        for name in files:
            with open(os.path.join(folder, name)) as f:
                json.load(f)


def test_refused_hdfs_writes_are_a_clear_error(emulator):
    emulator.make_read_only("/locked")
    rundir = RunDir(emulator.uri("/locked/run"))
    with pytest.raises(
        RunDirError, match=r"^HDFS refused MKDIRS .*; grant .*\(cannot create the run directory .*/locked/run private"
    ):
        rundir.write_spec({"a": 1})
    assert rundir.read_spec() is None  # reads are allowed; nothing half-written is there


def test_the_spec_an_application_works_on(rundir):
    rundir.write_spec({"train_fn": "a.b:c", "num_nodes": 2})
    written = rundir.read_spec()["spec_hash"]
    assert rundir.application_spec_hash("application_1_0001") == written  # not started: spec.json's
    rundir.add_event("application", application_id="application_1_0001", spec_hash="older")
    assert rundir.application_spec_hash("application_1_0001") == "older"  # what its driver read
    rundir.write_status("RUNNING", application_id="application_1_0002", spec_hash="newer")
    assert rundir.application_spec_hash("application_1_0002") == "newer"


def test_a_nodes_end_keeps_the_step_of_its_own_attempt_only(rundir):
    rundir.write_node_progress("worker:0", {"worker": "worker:0", "run_id": "c1", "attempt": 0, "step": 42})
    ended = rundir.mark_node_ended("worker:0", run_id="c1", attempt=0)
    assert (ended["step"], ended["phase"], ended["attempt"]) == (42, "finished", 0)
    assert abs(ended["ended"] - time.time()) < 5
    assert rundir.node_progress() == [ended]
    # a new attempt's node that reported no step yet: the old attempt's step is not its own
    again = rundir.mark_node_ended("worker:0", run_id="c1", attempt=1)
    assert again["step"] is None and again["attempt"] == 1
    other = rundir.mark_node_ended("chief:0", run_id="c2", attempt=0)
    assert other["worker"] == "chief:0" and other["step"] is None
