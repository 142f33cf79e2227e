"""The end watch: when every node that decides a run's end has recorded its end and the stage still runs
``grace`` seconds later on the driver's clock, it reports the hung stage once; records of other clusters or
attempts, or a node that has not ended, never count."""

from __future__ import annotations

import threading

from airflow_tfos.runtime.driver.ended import EndWatch, HungStage, ended_nodes


def record(worker: str, *, ended: float | None, attempt: int = 1, run_id: str = "c1", step: int = 60) -> dict:
    found = {"worker": worker, "run_id": run_id, "attempt": attempt, "step": step, "phase": "training"}
    return {**found, "phase": "finished", "ended": ended} if ended is not None else found


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watch(records: list, clock: Clock, fired: list, deciders=("chief:0", "worker:0")) -> EndWatch:
    return EndWatch(lambda: records, "c1", 1, deciders, fired.append, grace=10, clock=clock)


def test_only_this_attempts_ended_records_count():
    records = [
        record("chief:0", ended=5.0),
        record("worker:0", ended=6.0, attempt=0),  # the attempt before
        record("worker:1", ended=7.0, run_id="c0"),  # another cluster's run in the same directory
        record("worker:2", ended=None),  # still training
        None,
        {"worker": "", "run_id": "c1", "attempt": 1, "ended": 3.0},
    ]
    assert ended_nodes(records, "c1", 1) == {"chief:0": 5.0}


def test_the_grace_runs_on_the_drivers_clock_from_when_every_decider_was_seen_ended():
    clock, fired = Clock(), []
    records = [record("chief:0", ended=1.0), record("worker:0", ended=None)]
    w = watch(records, clock, fired)
    assert w.check() is None and w.all_ended_at is None  # worker:0 still trains
    clock.now += 30
    records[1] = record("worker:0", ended=2.0)  # nodes' clocks say long ago: not the driver's
    assert w.check() is None and w.all_ended_at == 130.0
    clock.now += 9.9
    assert w.check() is None
    clock.now += 0.1
    hung = w.check()
    assert hung == HungStage({"chief:0": 1.0, "worker:0": 2.0}, 10)
    assert hung.message().startswith(
        "every TF node ended (chief:0, worker:0) but Spark's stage did not within 10 s: an executor does not answer"
    )


def test_a_node_that_decides_nothing_is_not_waited_for():
    # under parameter servers the chief decides: the workers and the ps run until released
    clock, fired = Clock(), []
    w = watch([record("chief:0", ended=1.0)], clock, fired, deciders=("chief:0",))
    assert w.check() is None
    clock.now += 10
    assert w.check() is not None


def test_unreadable_records_are_read_again_next_time():
    clock, calls = Clock(), []

    def read():
        calls.append(1)
        if len(calls) == 1:
            raise OSError("namenode in safe mode")
        return [record("chief:0", ended=1.0)]

    w = EndWatch(read, "c1", 1, ["chief:0"], lambda hung: None, grace=0, clock=clock)
    assert w.check() is None
    assert w.check() is not None


def test_the_thread_reports_once_and_not_after_stop():
    fired, reported = [], threading.Event()
    w = EndWatch(
        lambda: [record("chief:0", ended=1.0)],
        "c1",
        1,
        ["chief:0"],
        lambda hung: (fired.append(hung), reported.set()),
        grace=0,
        poll=0.01,
    )
    w.start()
    assert reported.wait(5)
    w.join(5)
    assert len(fired) == 1 and not w.is_alive()
    stopped = EndWatch(lambda: [record("chief:0", ended=1.0)], "c1", 1, ["chief:0"], fired.append, grace=0, poll=5)
    stopped.start()
    stopped.stop()
    stopped.join(5)
    assert len(fired) == 1  # the stage ended first: nothing reported
