"""The stall watchdog's decisions, driven by a fake clock (no Spark, no TF)."""

from __future__ import annotations

import threading

import pytest

from airflow_tfos.runtime.driver.stage import retryable as _retryable
from airflow_tfos.runtime.driver.watchdog import StallMonitor, StallWatchdog, reports_from
from airflow_tfos.runtime.errors import StallError
from airflow_tfos.runtime.program.progress import ProgressTracker, node_phase


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _train(dog: StallWatchdog, clock: Clock, steps: dict[str, int], secs: float) -> None:
    clock.now += secs
    for node, step in steps.items():
        dog.observe(node, step)


def test_fires_after_timeout_naming_the_stalled_node_and_its_last_step():
    clock = Clock()
    dog = StallWatchdog(30, clock)
    for i in range(1, 6):
        _train(dog, clock, {"chief:0": i * 10, "worker:0": i * 10}, 1)
    # worker:0 freezes at step 50; chief:0 waits on it in the all-reduce and stops one step later
    _train(dog, clock, {"chief:0": 51, "worker:0": 50}, 1)
    clock.now += 28
    assert dog.check() is None  # chief advanced 28 s ago, worker 29 s ago: not yet
    clock.now += 2
    report = dog.check()
    assert report is not None
    assert [(n.node, n.step) for n in report.nodes] == [("chief:0", 51), ("worker:0", 50)]
    assert "worker:0 (last step 50" in report.message() and "stall_timeout" in report.message()


def test_names_only_the_node_stuck_much_longer_than_the_rest():
    clock = Clock()
    dog = StallWatchdog(10, clock)
    dog.observe("worker:1", 7)
    dog.observe("chief:0", 7)
    clock.now += 1
    dog.observe("chief:0", 8)  # worker:1 froze at 7; chief:0 goes on alone until it waits for it
    clock.now += 8
    dog.observe("chief:0", 9)
    clock.now += 10
    report = dog.check()
    assert [(n.node, n.step) for n in report.nodes] == [("worker:1", 7)]
    assert report.nodes[0].secs == pytest.approx(19)


def test_quiet_phases_never_fire_and_restart_the_clock():
    clock = Clock()
    dog = StallWatchdog(5, clock)
    dog.observe("chief:0", 3)
    for phase in ("checkpointing", "exporting", "restoring", "evaluating", "waiting_for_data"):
        dog.observe("chief:0", 3, phase)
        clock.now += 60  # a slow save, far past the timeout
        assert dog.check() is None, phase
        dog.observe("chief:0", 3)  # back to training, same step
        clock.now += 4
        assert dog.check() is None, phase  # the timeout counts from the end of the quiet phase
    clock.now += 1
    assert dog.check() is not None


def test_one_node_checkpointing_holds_off_all():
    clock = Clock()
    dog = StallWatchdog(5, clock)
    dog.observe("chief:0", 3, "checkpointing")
    dog.observe("worker:0", 3)
    clock.now += 100
    assert dog.check() is None


def test_a_step_that_waited_on_a_checkpointing_peer_is_not_slow():
    clock = Clock()
    dog = StallWatchdog(5, clock)
    dog.observe("chief:0", 10)
    dog.observe("worker:0", 10)
    dog.observe("chief:0", 10, "checkpointing")
    clock.now += 12  # worker:0 waits in step 11's all-reduce while the chief saves
    dog.observe("chief:0", 10)
    dog.observe("worker:0", 11)
    assert not dog.disabled
    clock.now += 5
    assert dog.check() is not None


def test_nodes_before_their_first_step_are_not_judged():
    clock = Clock()
    dog = StallWatchdog(5, clock)
    dog.observe("chief:0", None, "starting")
    clock.now += 100
    assert dog.check() is None
    dog.observe("chief:0", 0, "training")
    clock.now += 4.9
    assert dog.check() is None
    clock.now += 0.2
    assert dog.check().nodes[0].step == 0


def test_a_step_longer_than_the_timeout_turns_the_watchdog_off(caplog):
    clock = Clock()
    dog = StallWatchdog(5, clock)
    dog.observe("chief:0", 1)
    clock.now += 6
    dog.observe("chief:0", 2)
    assert dog.disabled and dog.longest_step == 6
    assert "raise stall_timeout" in caplog.text
    clock.now += 1000
    assert dog.check() is None


def test_a_restore_to_an_older_step_is_a_fresh_start():
    clock = Clock()
    dog = StallWatchdog(5, clock)
    dog.observe("chief:0", 40)
    clock.now += 4
    dog.observe("chief:0", 30)
    clock.now += 4
    assert dog.check() is None


def test_finished_nodes_are_not_stalled():
    clock = Clock()
    dog = StallWatchdog(5, clock)
    dog.observe("chief:0", 40)
    dog.observe("chief:0", 40, "finished")
    clock.now += 100
    assert dog.check() is None


def test_bad_settings_name_what_to_change():
    with pytest.raises(ValueError, match="unknown phase 'saving' for chief:0"):
        StallWatchdog(1).observe("chief:0", 1, "saving")


def test_a_stall_is_retried_from_the_checkpoint():
    assert _retryable(StallError("training stalled"))


def test_reports_from_progress_records():
    records = [
        {"worker": "chief:0", "step": 12, "phase": "checkpointing"},
        {"worker": "worker:0", "step": 0},
        None,
        {"step": 3},
    ]
    assert reports_from(records) == [("chief:0", 12, "checkpointing"), ("worker:0", 0, "starting")]


class _Ctx:
    job_name, task_index, is_chief, executor_id, attempt, run_dir = "chief", 0, True, 0, 0, None


def test_the_tracker_reports_its_phases():
    tracker = ProgressTracker(_Ctx())
    assert tracker.snapshot()["phase"] == "starting"
    tracker.begin(0)
    tracker.step()
    assert tracker.snapshot()["phase"] == "training"
    with node_phase("checkpointing"):
        assert tracker.snapshot()["phase"] == "checkpointing"
    assert tracker.snapshot()["phase"] == "training"
    tracker.epoch_end(step=1)
    assert tracker.snapshot()["phase"] == "waiting_for_data"  # the next epoch's input is starting
    tracker.step()
    assert tracker.snapshot()["phase"] == "training"
    tracker.finish()
    assert tracker.snapshot()["phase"] == "finished"


def test_the_monitor_calls_back_once_with_the_report():
    records = [{"worker": "chief:0", "step": 5, "phase": "training"}]
    fired: list = []
    done = threading.Event()

    def on_stall(report):
        fired.append(report)
        done.set()

    monitor = StallMonitor(lambda: records, 0.3, on_stall, poll=0.05)
    monitor.start()
    assert done.wait(5)
    monitor.join(5)
    assert [(n.node, n.step) for n in fired[0].nodes] == [("chief:0", 5)]
    assert len(fired) == 1


def test_every_node_writes_its_step_and_phase_for_the_driver(tmp_path, monkeypatch):
    from airflow_tfos.shared.rundir import RunDir

    monkeypatch.setenv("AIRFLOW_TFOS_CLUSTER_ID", "r1")

    class Worker(_Ctx):
        job_name, is_chief, run_dir = "worker", False, str(tmp_path)

    tracker = ProgressTracker(Worker())
    tracker.begin(0)
    tracker.step(step=4)
    tracker.flush()
    [record] = RunDir(str(tmp_path)).node_progress()
    assert (record["worker"], record["step"], record["phase"], record["run_id"]) == ("worker:0", 4, "training", "r1")
    with node_phase("exporting"):
        tracker.flush()
        assert RunDir(str(tmp_path)).node_progress()[0]["phase"] == "exporting"
    assert not (tmp_path / "progress.json").exists()  # only the chief writes progress.json
