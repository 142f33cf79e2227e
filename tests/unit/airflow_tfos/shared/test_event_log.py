"""The run's events folded into batch files: the same events in the same order, read in a few requests."""

from __future__ import annotations

import logging
import time

import pytest

from airflow_tfos.runtime.report import write_report
from airflow_tfos.shared import event_log
from airflow_tfos.shared.rundir import EVENTS, RunDir
from airflow_tfos.shared.storage import LocalStorage
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage

log = logging.getLogger(__name__)
KINDS = ("step_metrics", "worker_steps", "checkpoint")


def record(rundir: RunDir, count: int, start: int = 0) -> list[dict]:
    return [rundir.add_event(KINDS[i % 3], step=i, loss=1.0 / (i + 1)) for i in range(start, start + count)]


def test_folded_events_read_back_the_same_in_order_and_by_kind(tmp_path):
    rundir = RunDir(str(tmp_path / "run"))
    written = record(rundir, 250)
    before, checkpoints = rundir.events(), rundir.events("checkpoint")
    assert [e["step"] for e in before] == list(range(250))
    assert rundir.compact_events(min_files=300) == 0  # below the threshold: nothing folded
    assert rundir.compact_events(min_files=200) == 250
    names = sorted(p.name for p in (tmp_path / "run" / EVENTS).iterdir())
    assert len(names) == 1 and names[0].startswith("batch-") and names[0].endswith(".jsonl")
    assert rundir.events() == before == written
    assert rundir.events("checkpoint") == checkpoints and len(checkpoints) == 83
    later = record(rundir, 3, start=250)  # events after a fold sort after the folded ones
    assert rundir.events()[-3:] == later and len(rundir.events()) == 253
    assert rundir.compact_events() == 3 and len(list((tmp_path / "run" / EVENTS).iterdir())) == 2
    assert [e["step"] for e in rundir.events()] == list(range(253))


def test_several_events_at_once_are_one_file(tmp_path):
    rundir = RunDir(str(tmp_path / "run"))
    rundir.add_event("attempt", attempt=1)
    rundir.add_events([("step_metrics", {"step": s}) for s in range(5)])
    assert len(list((tmp_path / "run" / EVENTS).iterdir())) == 2
    assert [(e["kind"], e.get("step")) for e in rundir.events()] == [("attempt", None)] + [
        ("step_metrics", s) for s in range(5)
    ]


class FoldsWhileListed(LocalStorage):
    """A storage on which the driver folds the events right after a reader listed them."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        self.folder, self.folds = folder, 0

    def listdir(self, path: str) -> list[str]:
        names = super().listdir(path)
        if path.rstrip("/").endswith(self.folder) and self.folds == 0:
            self.folds += 1
            event_log.compact(LocalStorage(), path)
        return names


def test_a_reader_that_listed_just_before_a_fold_still_gets_every_event_once(tmp_path):
    rundir = RunDir(str(tmp_path / "run"))
    written = record(rundir, 40)
    racing = RunDir(str(tmp_path / "run"), storage=FoldsWhileListed(EVENTS))
    assert racing.events() == written
    assert racing.storage.folds == 1 and len(list((tmp_path / "run" / EVENTS).iterdir())) == 1


def requests_to(emu, folder: str) -> list:
    return [r for r in emu.requests if r.path.startswith(folder)]


def test_a_report_of_ten_thousand_events_on_webhdfs_reads_a_handful_of_files(emu):
    """10,000 events as a long run leaves them (folded by its driver, and a few written since): the report
    is made in a few seconds, with one request per batch file."""
    storage = WebHDFSStorage(emu.config())
    rundir = RunDir(emu.uri("/runs/long"), storage=storage)
    rundir.write_spec({"kind": "train", "train_fn": "m:f", "num_nodes": 2})
    for batch in range(10):  # what ten folds leave: 1,000 events each
        rundir.add_events([("step_metrics", {"step": s, "epoch": s // 500, "loss": 1.0 / (s + 1)})
                           for s in range(batch * 1000, (batch + 1) * 1000)])  # fmt: skip
    for s in range(10_000, 10_020):  # written since the last fold
        rundir.add_event("step_metrics", step=s, epoch=20, loss=1.0 / (s + 1))
    emu.requests.clear()
    started = time.monotonic()
    events = rundir.events()
    read_secs = time.monotonic() - started
    event_requests = requests_to(emu, "/runs/long/events")
    assert [e["step"] for e in events] == list(range(10_020))
    opens = [r for r in event_requests if r.op == "OPEN" and r.server.startswith("namenode")]
    assert len(opens) == 30 and len([r for r in event_requests if r.op == "LISTSTATUS"]) == 1

    emu.requests.clear()
    started = time.monotonic()
    write_report(rundir)
    report_secs = time.monotonic() - started
    assert len(requests_to(emu, "/runs/long/events")) <= 2 * (30 + 1)  # namenode and datanode per file
    assert report_secs < 5, f"the report of 10,020 events took {report_secs:.1f} s"
    log.info("10,020 events: read in %.2f s, report in %.2f s, %d requests", read_secs, report_secs, len(emu.requests))


@pytest.mark.parametrize("count", [120])
def test_the_driver_folds_event_files_on_webhdfs_and_readers_see_the_same(emu, count):
    storage = WebHDFSStorage(emu.config())
    rundir = RunDir(emu.uri("/runs/fold"), storage=storage)
    written = record(rundir, count)
    assert rundir.compact_events(min_files=count) == count
    emu.requests.clear()
    assert rundir.events() == written
    assert len([r for r in emu.requests if r.op == "OPEN" and r.server.startswith("namenode")]) == 1
