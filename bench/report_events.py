"""The training report of a long run on HDFS: its events as single files, against folded into batch files.

Starts the WebHDFS emulator (airflow_tfos/testing/webhdfs.py) on 127.0.0.1 and makes two run directories
with the same ``--events`` step-metric events: one as the nodes write them (one file per event, written into
the emulator's backing folder directly, so that setting up is quick), one as the driver leaves them after
its folds (:mod:`airflow_tfos.shared.event_log`: batch files of ``--batch`` events). Then it times
:func:`airflow_tfos.runtime.report.write_report` on each through ``WebHDFSStorage`` and counts the requests
the emulator received; also the fold itself (the driver's work) of the single files.

    python bench/report_events.py [--events 10000] [--batch 1000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_tfos.runtime.report import write_report
from airflow_tfos.shared import event_log
from airflow_tfos.shared.rundir import EVENTS, RunDir
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.testing.webhdfs import WebHDFSEmulator


def event(step: int) -> dict:
    return {"kind": "step_metrics", "step": step, "epoch": step // 500, "loss": 1.0 / (step + 1), "time": 1e9 + step}


def timed_report(emulator: WebHDFSEmulator, rundir: RunDir) -> tuple[float, int]:
    emulator.requests.clear()
    started = time.monotonic()
    write_report(rundir)
    return time.monotonic() - started, len(emulator.requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1000)
    options = parser.parse_args()
    with WebHDFSEmulator() as emulator:
        emulator.requests = type(emulator.requests)(maxlen=10 * options.events + 1000)
        storage = WebHDFSStorage(emulator.config())
        spec = {"kind": "train", "train_fn": "m:f", "num_nodes": 2}

        singles = RunDir(emulator.uri("/runs/singles"), storage=storage)
        singles.write_spec(spec)
        folder = Path(emulator.local_path(f"/runs/singles/{EVENTS}"))
        folder.mkdir(parents=True, exist_ok=True)
        for step in range(options.events):
            (folder / event_log.new_name("step_metrics")).write_text(json.dumps(event(step)))

        folded = RunDir(emulator.uri("/runs/folded"), storage=storage)
        folded.write_spec(spec)
        for start in range(0, options.events, options.batch):
            steps = range(start, min(start + options.batch, options.events))
            folded.add_events([("step_metrics", event(s)) for s in steps])

        single_secs, single_requests = timed_report(emulator, singles)
        folded_secs, folded_requests = timed_report(emulator, folded)
        emulator.requests.clear()
        started = time.monotonic()
        count = singles.compact_events()
        fold_secs, fold_requests = time.monotonic() - started, len(emulator.requests)
        after_secs, after_requests = timed_report(emulator, singles)

    print(f"report of {options.events} events on the WebHDFS emulator:")
    print(f"  one file per event:         {single_secs:7.2f} s, {single_requests:6d} requests")
    print(f"  folded into batch files:    {folded_secs:7.2f} s, {folded_requests:6d} requests")
    print(
        f"  fold of the {count} files:   {fold_secs:7.2f} s, {fold_requests:6d} requests (by the driver, while it runs)"
    )
    print(f"  after that fold:            {after_secs:7.2f} s, {after_requests:6d} requests")
    print(f"report_ratio single/folded: {single_secs / folded_secs:.1f}x")


if __name__ == "__main__":
    main()
