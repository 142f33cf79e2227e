"""Fingerprints of a run's input and code, and the rerun decision they drive (no Spark, no TF).

The listings are checked against ``os.stat`` of the same files (an independent reading); the WebHDFS case
runs through the protocol emulator, whose files lie on local disk.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.run_dir import run_tag
from airflow_tfos.operators.inference import InferenceRun
from airflow_tfos.operators.run import TrainingRun
from airflow_tfos.shared.fingerprint import (
    changes,
    data_fingerprint,
    files_fingerprint,
    inference_fingerprint,
    listing_hash,
    pending_tables,
    run_fingerprint,
    unseen,
)
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import RunSpec
from airflow_tfos.shared.storage import LocalStorage
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from tests.support.fakes import FakeBackend


def write_input(folder: Path, sizes: dict[str, int]) -> None:
    for name, size in sizes.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"r" * size)


def by_stat(folder: Path, ms=round) -> dict[str, list[int]]:
    """The listing, read with os.walk/os.stat (Spark's rule: no _ or . names); ``ms``: how seconds become
    milliseconds (HDFS truncates)."""
    found = {}
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for name in names:
            if not name.startswith(("_", ".")):
                st = os.stat(Path(root, name))
                found[str(Path(root, name).relative_to(folder))] = [st.st_size, ms(st.st_mtime * 1000)]
    return found


class TestFilesFingerprint:
    def test_lists_partitions_recursively_with_sizes_and_times_skipping_markers(self, tmp_path):
        write_input(tmp_path, {"day=1/part-0.parquet": 10, "day=2/part-0.parquet": 20, "_SUCCESS": 0, ".x.crc": 3})
        found = files_fingerprint(str(tmp_path), LocalStorage())
        assert found["files"] == by_stat(tmp_path)
        assert sorted(found["files"]) == ["day=1/part-0.parquet", "day=2/part-0.parquet"]
        assert (found["count"], found["bytes"]) == (2, 30)
        assert files_fingerprint(f"file://{tmp_path}", LocalStorage())["hash"] == found["hash"]

    def test_the_same_listing_gives_the_same_hash_in_any_order(self):
        entries = {f"part-{i}.parquet": [100 + i, 1_700_000_000_000 + i] for i in range(50)}
        assert listing_hash(dict(reversed(list(entries.items())))) == listing_hash(entries)
        assert listing_hash({**entries, "part-0.parquet": [101, 1_700_000_000_000]}) != listing_hash(entries)

    @pytest.mark.parametrize("change", ["add", "remove", "rewrite_size", "rewrite_same_size"])
    def test_every_kind_of_change_is_seen_and_named(self, tmp_path, change):
        write_input(tmp_path, {"part-0.parquet": 1234, "part-1.parquet": 50})
        before = run_fingerprint({"data": {"format": "parquet", "path": str(tmp_path)}})
        again = run_fingerprint({"data": {"format": "parquet", "path": str(tmp_path)}})
        assert again["hash"] == before["hash"] and changes(before, again) == []
        if change == "add":
            write_input(tmp_path, {"part-2.parquet": 7})
            expected = "1 files added, 0 removed, 0 changed (e.g. part-2.parquet added)"
        elif change == "remove":
            (tmp_path / "part-1.parquet").unlink()
            expected = "0 files added, 1 removed, 0 changed (e.g. part-1.parquet removed)"
        elif change == "rewrite_size":
            write_input(tmp_path, {"part-0.parquet": 1301})
            expected = "0 files added, 0 removed, 1 changed (e.g. part-0.parquet size 1234 -> 1301)"
        else:  # rewritten in place with as many bytes: only the time tells
            stat = os.stat(tmp_path / "part-0.parquet")
            os.utime(tmp_path / "part-0.parquet", ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
            expected = "0 files added, 0 removed, 1 changed (e.g. part-0.parquet modified "
        after = run_fingerprint({"data": {"format": "parquet", "path": str(tmp_path)}})
        assert after["hash"] != before["hash"]
        (line,) = changes(before, after)
        assert line.startswith(f"input data ({tmp_path}): {expected}")

    def test_a_code_change_is_named_and_a_table_is_left_to_the_driver(self, tmp_path):
        spec = {"data": {"format": "table", "table": "db.t"}, "code": {"packages": ["my_training"], "hash": "a1"}}
        before = run_fingerprint(spec)
        after = run_fingerprint({**spec, "code": {"packages": ["my_training"], "hash": "b2"}})
        assert changes(before, after) == ["code my_training: content hash a1 -> b2"]
        assert before["inputs"]["data"] == {
            "kind": "table", "table": "db.t", "hash": None, "resolver": "driver",
            "note": "fingerprinted by the Spark driver",
        }  # fmt: skip
        assert pending_tables(before) == ["data"] and list(unseen(before)) == []
        scoring = inference_fingerprint({**spec, "inference": {"model_path": str(tmp_path)}})
        assert list(unseen(scoring)) == ["data (tables are not fingerprinted)"]  # no driver decides there

    def test_a_webhdfs_listing_matches_the_files_behind_the_emulator(self, emu):
        storage = WebHDFSStorage(emu.config())
        base = emu.uri("/data/day=1")
        for name, size in (("part-0.parquet", 10), ("sub/part-1.parquet", 20), ("_SUCCESS", 0)):
            storage.write_bytes(f"{base}/{name}", b"x" * size)
        found = files_fingerprint(base, storage)
        assert found["files"] == by_stat(Path(emu.local_path("/data/day=1")), ms=int)
        storage.write_bytes(f"{base}/part-0.parquet", b"y" * 11)
        assert files_fingerprint(base, storage)["files"]["part-0.parquet"][0] == 11

    def test_a_thousand_files_on_webhdfs_are_fingerprinted_in_seconds(self, emu):
        folder = Path(emu.local_path("/big"))
        write_input(folder, {f"part-{i:05d}.parquet": 100 + i % 7 for i in range(1000)})
        started = time.monotonic()
        found = files_fingerprint(emu.uri("/big"), WebHDFSStorage(emu.config()))
        seconds = time.monotonic() - started
        assert found["count"] == 1000 and found["files"] == by_stat(folder, ms=int)
        assert seconds < 20, f"fingerprinting 1,000 files on the WebHDFS emulator took {seconds:.2f} s"


def exported(rundir: RunDir, spec_hash: str) -> None:
    staging = rundir.export_staging()
    Path(staging, "saved_model.pb").write_bytes(b"model")
    rundir.publish_export(staging, spec_hash=spec_hash, step=20, metrics={"loss": 0.1})


class TestRerunDecision:
    def run(self, tmp_path: Path, data: Path) -> TrainingRun:
        spec = RunSpec(
            train_fn="my_training:main_fun",
            num_nodes=2,
            data={"format": "parquet", "path": str(data)},
            feed={"features": ["x"], "label": "y", "batch_size": 30},
            code={"packages": ["my_training"], "hash": "c0de"},
        )
        log = logging.getLogger("test_fingerprint")
        rundir = RunDir(str(tmp_path / "run"))
        return TrainingRun(run_dir=rundir.uri, spec=spec, hook=None, run_dir_contents=rundir, log=log)

    def test_same_input_is_a_no_op_changed_input_trains_from_scratch_with_the_old_export_kept(self, tmp_path, caplog):
        data = tmp_path / "data"
        write_input(data, {"part-0.parquet": 1234, "part-1.parquet": 50})
        first = self.run(tmp_path, data)
        assert first.already_done() is None
        first.before_submit()  # what a submission writes, then the driver's checkpoints and export
        rundir = first.run_dir_contents
        rundir.storage.makedirs(rundir.path("checkpoints", "ckpt-10"))
        exported(rundir, first.digest)
        assert rundir.export_success()["fingerprint"] == first.fingerprint["hash"]

        assert self.run(tmp_path, data).already_done()["fingerprint"] == first.fingerprint["hash"]

        write_input(data, {"part-0.parquet": 1301})
        rerun = self.run(tmp_path, data)
        with caplog.at_level(logging.INFO, logger="test_fingerprint"):
            assert rerun.already_done() is None
            rerun.before_submit()
        moved = sorted(Path(tmp_path, "run", "previous").iterdir())
        assert len(moved) == 1 and sorted(p.name for p in moved[0].iterdir()) == [
            "checkpoints", "export", "fingerprint.json"
        ]  # fmt: skip
        assert not Path(tmp_path, "run", "export").exists() and rundir.latest_checkpoint() is None
        assert rundir.read_fingerprint()["hash"] == rerun.fingerprint["hash"] != first.fingerprint["hash"]
        text = caplog.text
        assert "0 files added, 0 removed, 1 changed (e.g. part-0.parquet size 1234 -> 1301)" in text
        assert f"kept in {moved[0]}" in text and "Training starts from scratch" in text

    def test_a_live_application_of_changed_input_is_killed_not_reattached(self, tmp_path, caplog):
        data = tmp_path / "data"
        write_input(data, {"part-0.parquet": 100})
        backend = FakeBackend()
        first = self.run(tmp_path, data)
        first.hook = backend
        first.before_submit()
        first.run_dir_contents.write_spec(first.spec_json)
        live = backend.add("app-live", "RUNNING", tags=[run_tag(first.run_dir)])
        assert first.live_on_spec() == [live]  # same spec, input and code: reattached to

        write_input(data, {"part-0.parquet": 101})  # rewritten while the application trains
        rerun = self.run(tmp_path, data)
        rerun.hook = backend
        with caplog.at_level(logging.WARNING, logger="test_fingerprint"):
            assert rerun.live_on_spec() == []
        assert backend.killed == ["app-live"]
        assert "part-0.parquet size 100 -> 101" in caplog.text and "killing it" in caplog.text

    def test_an_export_without_a_recorded_fingerprint_stays_the_result(self, tmp_path):
        data = tmp_path / "data"
        write_input(data, {"part-0.parquet": 10})
        run = self.run(tmp_path, data)
        exported(run.run_dir_contents, run.digest)  # written before fingerprints existed
        assert "fingerprint" not in run.run_dir_contents.export_success()
        assert run.already_done() is not None


class TestUnlistedInput:
    """An input that cannot be listed (no storage for its scheme, unreachable): its changes cannot be seen, so
    each Airflow run trains again (a retry of the same run resumes); AIRFLOW_TFOS_UNLISTED_INPUT=reuse keeps the
    last export instead."""

    def run(self, tmp_path: Path, monkeypatch, run_id: str, run_dir: str = "run") -> TrainingRun:
        for name, value in (("DAG_ID", "nightly"), ("TASK_ID", "train"), ("DAG_RUN_ID", run_id)):
            monkeypatch.setenv(f"AIRFLOW_CTX_{name}", value)
        spec = RunSpec(
            train_fn="my_training:main_fun",
            num_nodes=2,
            data={"format": "parquet", "path": "s3a://events/day=1"},
            feed={"features": ["x"], "label": "y", "batch_size": 30},
        )
        rundir = RunDir(str(tmp_path / run_dir))
        log = logging.getLogger("test_fingerprint")
        return TrainingRun(run_dir=rundir.uri, spec=spec, hook=None, run_dir_contents=rundir, log=log)

    def test_the_next_airflow_run_trains_again_and_says_why_first(self, tmp_path, monkeypatch, caplog):
        monkeypatch.delenv("AIRFLOW_TFOS_UNLISTED_INPUT", raising=False)
        first = self.run(tmp_path, monkeypatch, "scheduled__2026-11-26")
        first.before_submit()
        exported(first.run_dir_contents, first.digest)

        rerun = self.run(tmp_path, monkeypatch, "scheduled__2026-11-27")
        with caplog.at_level(logging.INFO):
            assert rerun.already_done() is None
            rerun.before_submit()
        lines = [
            r.getMessage() for r in caplog.records if r.name in ("test_fingerprint", "airflow_tfos.shared.fingerprint")
        ]
        assert lines[0].startswith("input data (s3a://events/day=1) cannot be listed (ValueError: no storage for")
        assert "retraining" in lines[0] and "set AIRFLOW_TFOS_UNLISTED_INPUT=reuse" in lines[0]
        assert not any("a rerun will not see it" in line for line in lines)
        assert any("cannot be listed" in line and "Training starts from scratch" in line for line in lines)
        assert list((tmp_path / "run" / "previous").iterdir())  # the old export, kept aside

    def test_a_retry_in_the_same_airflow_run_resumes_and_keeps_its_live_application(self, tmp_path, monkeypatch):
        monkeypatch.delenv("AIRFLOW_TFOS_UNLISTED_INPUT", raising=False)
        backend = FakeBackend()
        first = self.run(tmp_path, monkeypatch, "manual__1")
        first.hook = backend
        first.before_submit()
        first.run_dir_contents.write_spec(first.spec_json)
        live = backend.add("app-live", "RUNNING", tags=[run_tag(first.run_dir)])
        retry = self.run(tmp_path, monkeypatch, "manual__1")
        retry.hook = backend
        assert retry.fingerprint["hash"] == first.fingerprint["hash"]
        assert retry.live_on_spec() == [live] and backend.killed == []
        exported(first.run_dir_contents, first.digest)
        assert self.run(tmp_path, monkeypatch, "manual__1").already_done() is not None

    def test_reuse_keeps_the_last_export_with_a_warning(self, tmp_path, monkeypatch, caplog):
        monkeypatch.setenv("AIRFLOW_TFOS_UNLISTED_INPUT", "reuse")
        first = self.run(tmp_path, monkeypatch, "scheduled__2026-11-26")
        first.before_submit()
        exported(first.run_dir_contents, first.digest)
        with caplog.at_level(logging.WARNING, logger="test_fingerprint"):
            assert self.run(tmp_path, monkeypatch, "scheduled__2026-11-27").already_done() is not None
        assert "a change of the input data" in caplog.text and "a rerun will not see it" in caplog.text


class TestInferenceRerun:
    """Predictions are redone when their input or their model changed, even at the same paths."""

    def run(self, tmp_path: Path, data: Path, model: Path) -> InferenceRun:
        rundir = RunDir(str(tmp_path / "score-run"))
        spec = RunSpec(
            kind="inference",
            num_nodes=1,
            data={"format": "parquet", "path": str(data)},
            inference={"model_path": str(model), "features": ["x"], "output_path": str(tmp_path / "out")},
        )
        log = logging.getLogger("test_fingerprint")
        return InferenceRun(
            run_dir=rundir.uri, spec=spec, hook=None, run_dir_contents=rundir, log=log,
            output_path=str(tmp_path / "out"), output_storage=LocalStorage(),
        )  # fmt: skip

    def scored(self, run: InferenceRun) -> None:
        """What a successful application leaves: the output's marker, then the operator's finish."""
        Path(run.output_path).mkdir(exist_ok=True)
        Path(run.marker).write_text("")
        app = AppState(app_id="app-1", state="FINISHED", final_status="SUCCEEDED")
        assert run.finish(app)["output_path"] == run.output_path

    def test_a_model_retrained_into_the_same_path_is_scored_again_and_an_unchanged_one_is_not(self, tmp_path, caplog):
        data, model = tmp_path / "data", tmp_path / "export"
        write_input(data, {"part-0.parquet": 100})
        write_input(model, {"saved_model.pb": 500, "variables/variables.index": 40})
        first = self.run(tmp_path, data, model)
        assert first.already_done() is None
        self.scored(first)
        assert first.run_dir_contents.read_fingerprint()["inputs"]["model"]["count"] == 2
        assert self.run(tmp_path, data, model).already_done() is not None  # same input, same model

        write_input(model, {"variables/variables.index": 44})  # retrained into the same export path
        retrained = self.run(tmp_path, data, model)
        with caplog.at_level(logging.INFO, logger="test_fingerprint"):
            assert retrained.already_done() is None
        assert "holds predictions of another input, model or code: input model (" in caplog.text
        assert "variables/variables.index size 40 -> 44" in caplog.text

        # a run that fails leaves the old fingerprint: the next try still sees the change
        assert self.run(tmp_path, data, model).already_done() is None
        self.scored(retrained)
        assert self.run(tmp_path, data, model).already_done() is not None

        write_input(data, {"part-1.parquet": 7})  # the input grew
        assert self.run(tmp_path, data, model).already_done() is None


def test_an_unlistable_inputs_recorded_error_carries_no_token_or_password(monkeypatch):
    monkeypatch.delenv("AIRFLOW_TFOS_UNLISTED_INPUT", raising=False)

    def unreachable(path):
        raise OSError(
            f"cannot reach https://alice:s3cret@nn:9871/webhdfs/v1/d?op=LISTSTATUS&delegation=TOKEN123 ({path})"
        )

    found = data_fingerprint({"format": "parquet", "path": "webhdfs://alice:s3cret@nn:9871/d"}, unreachable)
    assert found["hash"] is None and "cannot reach" in found["error"]
    assert "TOKEN123" not in found["error"] and "s3cret" not in found["error"]  # the path is spec.json's own
