"""The run directory's lease (expiry, renewal by the driver's heartbeat, adopt vs wait) and the operator's use
of it: unit tests on a local run directory (no Spark). The standalone master's view of applications:
tests/unit/airflow_tfos/hooks/backends/test_standalone.py."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta
from types import SimpleNamespace

import pytest

from airflow_tfos.shared.errors import LeaseHeldError, RunDirError
from airflow_tfos.shared.lease import (
    LEASE,
    Lease,
    LeaseWatch,
    lease_timeout,
    live_lease_of_other,
    read_lease,
    take_lease,
    wait_for_lease,
)
from airflow_tfos.shared.rundir import RunDir
from tests.support.fakes import FakeBackend, make_context, use_backend
from tests.unit.airflow_tfos.test_operators import exporting, train_op


class Clock:
    """A clock that moves only when the code under test sleeps."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, secs: float) -> None:
        self.slept.append(secs)
        self.now += secs


@pytest.fixture
def rundir(tmp_path):
    run = RunDir(str(tmp_path / "run"))
    run.make_private()
    return run


def test_a_lease_is_written_atomically_as_json_and_read_back(rundir):
    lease = take_lease(rundir, owner="w1:/t", backend="local", application_id="local-x", duration_secs=30, now=100.0)
    assert read_lease(rundir) == lease == Lease("w1:/t", "local-x", "local", 100.0, 100.0, 30.0)
    on_disk = json.loads(rundir.storage.read_bytes(rundir.path(LEASE)))
    assert on_disk["owner"] == "w1:/t" and on_disk["heartbeat"] == 100.0
    assert [name for name in rundir.storage.listdir(rundir.uri) if "tmp" in name] == []


def test_renewing_ones_own_lease_keeps_when_it_was_acquired(rundir):
    take_lease(rundir, owner="w1", backend="local", now=100.0)
    renewed = take_lease(rundir, owner="w1", backend="local", application_id="local-x", now=150.0)
    assert (renewed.acquired, renewed.heartbeat) == (100.0, 150.0)
    taken = take_lease(rundir, owner="w2", backend="local", application_id="local-y", now=160.0)
    assert (taken.acquired, taken.owner) == (160.0, "w2")


def test_a_lease_lapses_its_duration_after_the_last_change_the_reader_saw_of_it_or_of_the_drivers_heartbeat():
    lease, watch = Lease("w1", "a", "local", acquired=100.0, heartbeat=100.0, duration_secs=30.0), LeaseWatch()
    assert watch.remaining(lease, None, status_after_lease=False, now=5.0) == 30.0  # first seen now
    assert watch.remaining(lease, None, status_after_lease=False, now=25.0) == 10.0
    beating = {"state": "RUNNING", "heartbeat": 1.0}  # the driver's clock: never compared with the reader's
    assert watch.remaining(lease, beating, status_after_lease=True, now=30.0) == 30.0  # renewed by the driver
    assert watch.remaining(lease, beating, status_after_lease=True, now=60.0) == 0.0
    ended = {"state": "FAILED", "heartbeat": 2.0}
    assert LeaseWatch().remaining(lease, ended, status_after_lease=True, now=0.0) == 0.0  # the driver recorded the end
    assert LeaseWatch().remaining(lease, ended, status_after_lease=False, now=0.0) == 30.0  # an older run's end


def test_only_a_live_lease_of_another_owner_holds_the_run(rundir):
    assert live_lease_of_other(rundir, "w2", now=0.0) is None  # no lease
    take_lease(rundir, owner="w1", backend="local", duration_secs=30, now=100.0)
    watch = LeaseWatch()
    assert live_lease_of_other(rundir, "w1", watch, now=110.0) is None  # one's own
    assert live_lease_of_other(rundir, "w2", watch, now=110.0)[1] == 30.0
    assert live_lease_of_other(rundir, "w2", watch, now=140.0) is None  # unchanged for 30 s: lapsed
    rundir.write_status("RUNNING", application_id="app-1")  # the driver beats
    assert live_lease_of_other(rundir, "w2", watch, now=141.0) is not None


def test_a_live_application_of_another_workers_lease_is_adopted_without_waiting(rundir):
    clock = Clock()
    take_lease(rundir, owner="w1", backend="local", application_id="local-a", duration_secs=60, now=clock())
    found = wait_for_lease(rundir, owner="w2", find_live=lambda: ["app-1"], timeout_secs=30, clock=clock,
                           sleep=clock.sleep)  # fmt: skip
    assert found == "app-1" and clock.slept == []


def test_an_invisible_application_is_waited_out_until_its_lease_lapses(rundir, caplog):
    clock = Clock()
    take_lease(rundir, owner="w1", backend="local", application_id="local-a", duration_secs=12, now=clock())
    with caplog.at_level(logging.INFO):
        found = wait_for_lease(rundir, owner="w2", find_live=list, timeout_secs=60, poll_secs=5, clock=clock,
                               sleep=clock.sleep)  # fmt: skip
    assert found is None and clock.now == 1_012.0 and clock.slept == [5, 5, 2]
    said = [r.getMessage() for r in caplog.records if "held by" in r.getMessage()]
    assert len(said) == 1 and "w1 (application local-a, backend local), which lapses in 12 s" in said[0]


def test_a_lease_that_outlives_the_timeout_fails_naming_its_holder_and_what_to_do(rundir):
    clock = Clock()
    take_lease(rundir, owner="w1", backend="yarn", application_id="application_1_2", duration_secs=600, now=clock())
    with pytest.raises(LeaseHeldError, match=r"held by w1 \(application application_1_2, backend yarn\)") as err:
        wait_for_lease(rundir, owner="w2", find_live=list, timeout_secs=20, poll_secs=5, clock=clock, sleep=clock.sleep)
    assert "not starting a second writer" in str(err.value) and rundir.path(LEASE) in str(err.value)
    assert clock.now == 1_020.0


def test_a_lease_that_is_not_json_names_the_file(rundir):
    rundir.storage.write_bytes(rundir.path(LEASE), b"{oops")
    with pytest.raises(RunDirError, match=r"lease\.json"):
        read_lease(rundir)


def test_the_wait_is_bounded_by_the_tasks_execution_timeout():
    assert lease_timeout(SimpleNamespace(task=SimpleNamespace(execution_timeout=timedelta(minutes=2)))) == 120.0
    assert lease_timeout(SimpleNamespace(task=SimpleNamespace(execution_timeout=None)), default=9) == 9
    assert lease_timeout(object(), default=7) == 7


def test_the_operator_submits_nothing_while_another_workers_invisible_application_holds_the_lease(tmp_path):
    op, backend = train_op(tmp_path, execution_timeout=timedelta(seconds=1)), FakeBackend()
    use_backend(op, backend)
    rundir = RunDir(str(tmp_path))
    take_lease(rundir, owner="other-worker", backend="local", application_id="local-x", duration_secs=600)
    context = make_context()
    context["ti"].task = op
    started = time.monotonic()
    with pytest.raises(LeaseHeldError, match=r"held by other-worker \(application local-x"):
        op.execute(context)
    assert backend.submitted == [] and 0.9 <= time.monotonic() - started < 5
    assert read_lease(rundir).owner == "other-worker"


def test_the_operator_submits_once_the_other_workers_lease_lapses_and_then_holds_it(tmp_path):
    op, backend = train_op(tmp_path, execution_timeout=timedelta(seconds=10)), FakeBackend()
    use_backend(op, backend)
    rundir = RunDir(str(tmp_path))
    exporting(backend, rundir, op.request_hash())
    take_lease(rundir, owner="other-worker", backend="local", duration_secs=0.5)
    context = make_context()
    context["ti"].task = op
    started = time.monotonic()
    result = op.execute(context)
    assert len(backend.submitted) == 1 and time.monotonic() - started >= 0.5
    lease = read_lease(rundir)
    assert (lease.owner, lease.application_id, lease.backend) == (
        "fake-worker",
        result["application_id"],
        FakeBackend.backend,
    )


def test_a_retry_after_a_driver_that_died_without_recording_its_end_submits_without_waiting(tmp_path):
    op, backend = train_op(tmp_path, execution_timeout=timedelta(seconds=60)), FakeBackend()
    use_backend(op, backend)
    rundir = RunDir(str(tmp_path))
    exporting(backend, rundir, op.request_hash())
    backend.add("local-dead", "FAILED", "FAILED")  # the earlier try's application: its driver was SIGKILLed
    rundir.write_status("RUNNING", application_id="local-dead")  # ... so status.json still says it runs
    take_lease(rundir, owner="earlier-try", backend="local", application_id="local-dead", duration_secs=600)
    context = make_context()
    context["ti"].task = op
    started = time.monotonic()
    result = op.execute(context)
    assert len(backend.submitted) == 1 and time.monotonic() - started < 5  # the lease's 600 s not waited out
    assert read_lease(rundir).application_id == result["application_id"] != "local-dead"
