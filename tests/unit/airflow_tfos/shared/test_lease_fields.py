"""The run directory's lease: an owner per task process, expiry on the reader's own clock, every field
checked, and the lease files written before still read (no Spark, no Airflow)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from airflow_tfos.shared.errors import LeaseHeldError, RunDirError
from airflow_tfos.shared.lease import (
    LEASE,
    MAX_LEASE_SECS,
    Lease,
    lease_owner,
    live_lease_of_other,
    read_lease,
    take_lease,
    wait_for_lease,
)
from airflow_tfos.shared.rundir import RunDir
from tests.unit.airflow_tfos.shared.test_lease import Clock


@pytest.fixture
def rundir(tmp_path):
    run = RunDir(str(tmp_path / "run"))
    run.make_private()
    return run


def write_raw(rundir: RunDir, data: object) -> None:
    rundir.storage.write_bytes(rundir.path(LEASE), json.dumps(data).encode())


def old_lease(**changes: object) -> dict[str, object]:
    """A lease as the code before the owner's pid and token wrote it."""
    lease = {"acquired": 100.0, "application_id": "local-20261127150000-0a1b2c3d", "backend": "local",
             "duration_secs": 180.0, "heartbeat": 100.0, "owner": "worker-3:/srv/airflow/tfos-local"}  # fmt: skip
    return {**lease, **changes}


def test_two_tasks_on_one_host_are_two_owners():
    other = subprocess.run(
        [sys.executable, "-c", "from airflow_tfos.shared.lease import lease_owner; print(lease_owner())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    mine = lease_owner()
    assert mine == lease_owner() and other != mine
    assert mine.startswith(socket.getfqdn() + ":") and other.startswith(socket.getfqdn() + ":")


def test_another_tasks_lease_on_this_host_is_not_taken_for_ones_own(rundir):
    take_lease(rundir, owner=f"{socket.getfqdn()}:1:0123456789ab", backend="local", application_id="local-x")
    assert live_lease_of_other(rundir, lease_owner()) is not None


def test_a_live_lease_of_a_holder_whose_clock_is_an_hour_behind_still_holds_the_run(rundir):
    write_raw(rundir, old_lease(acquired=time.time() - 3600, heartbeat=time.time() - 3600))
    assert live_lease_of_other(rundir, "w2") is not None


def test_a_lease_that_stays_unchanged_for_its_duration_lapses_whatever_its_holders_clock_says(rundir):
    clock = Clock()
    write_raw(rundir, old_lease(acquired=time.time() + 86400, heartbeat=time.time() + 86400, duration_secs=30))
    assert wait_for_lease(rundir, owner="w2", find_live=list, timeout_secs=60, clock=clock, sleep=clock.sleep) is None
    assert clock.now == 1_030.0


def test_a_lease_that_changes_lives_on(rundir):
    clock = Clock()

    def renewing_sleep(secs: float) -> None:  # the holder renews it while the reader waits
        clock.sleep(secs)
        take_lease(rundir, owner="w1", backend="local", application_id="local-x", duration_secs=10)

    take_lease(rundir, owner="w1", backend="local", application_id="local-x", duration_secs=10)
    with pytest.raises(LeaseHeldError, match=r"held by w1 \(application local-x, backend local\)"):
        wait_for_lease(rundir, owner="w2", find_live=list, timeout_secs=30, poll_secs=5, clock=clock,
                       sleep=renewing_sleep)  # fmt: skip


def test_a_huge_duration_is_bounded(rundir):
    clock = Clock()
    write_raw(rundir, old_lease(duration_secs=1e12))
    found = wait_for_lease(rundir, owner="w2", find_live=list, timeout_secs=MAX_LEASE_SECS + 60, poll_secs=600,
                           clock=clock, sleep=clock.sleep)  # fmt: skip
    assert found is None and clock.now == 1_000.0 + MAX_LEASE_SECS
    assert read_lease(rundir).lifetime == MAX_LEASE_SECS
    with pytest.raises(ValueError, match="at most 3600 s"):
        take_lease(rundir, owner="w1", backend="local", duration_secs=1e12)


def test_the_runs_end_recorded_after_the_lease_lapses_it_at_once_and_an_older_end_does_not(rundir):
    rundir.write_status("FAILED", application_id="app-0")  # an earlier application's end
    time.sleep(0.01)
    take_lease(rundir, owner="w1", backend="local", application_id="local-x")
    assert live_lease_of_other(rundir, "w2") is not None
    time.sleep(0.01)
    rundir.write_status("FAILED", application_id="app-1")
    assert live_lease_of_other(rundir, "w2") is None


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (old_lease(duration_secs="180"), "duration_secs"),
        (old_lease(heartbeat="yesterday"), "heartbeat"),
        (old_lease(acquired=None), "acquired"),
        (old_lease(duration_secs=True), "duration_secs"),
        (old_lease(duration_secs=-5), "duration_secs"),
        (old_lease(owner=42), "owner"),
        (old_lease(owner=""), "owner"),
        (old_lease(owner="w\n1"), "owner"),
        (old_lease(application_id=["a"]), "application_id"),
        (old_lease(backend={}), "backend"),
        ({k: v for k, v in old_lease().items() if k != "owner"}, "owner"),
        (["not", "a", "lease"], "JSON object"),
    ],
)
def test_a_malformed_lease_is_an_error_naming_the_file_and_the_field_not_a_crash(rundir, data, field):
    write_raw(rundir, data)
    with pytest.raises(RunDirError, match=rf"{field}.*lease\.json.*delete it if no application works on the run"):
        live_lease_of_other(rundir, "w2")


def test_a_nan_duration_is_refused(rundir):
    rundir.storage.write_bytes(rundir.path(LEASE), json.dumps(old_lease()).replace("180.0", "NaN").encode())
    with pytest.raises(RunDirError, match="duration_secs"):
        read_lease(rundir)


def test_lease_files_written_by_the_code_before_are_read(rundir):
    before = json.dumps(old_lease(), indent=1, sort_keys=True).encode()  # exactly as take_lease wrote it
    rundir.storage.write_bytes(rundir.path(LEASE), before)
    assert read_lease(rundir) == Lease("worker-3:/srv/airflow/tfos-local", "local-20261127150000-0a1b2c3d", "local",
                                       100.0, 100.0, 180.0)  # fmt: skip
    assert live_lease_of_other(rundir, lease_owner())[1] == 180.0
    no_duration = {k: v for k, v in old_lease(owner="worker-3").items() if k != "duration_secs"}
    write_raw(rundir, no_duration)
    assert read_lease(rundir).duration_secs == 180.0


def test_a_lease_naming_an_application_the_backend_knows_has_ended_lapses_at_once(rundir):
    clock = Clock()
    take_lease(rundir, owner="w1", backend="local", application_id="local-x", duration_secs=60)
    asked = []

    def ended(lease):
        asked.append(lease.application_id)
        return lease.application_id == "local-x"

    found = wait_for_lease(rundir, owner="w2", find_live=list, timeout_secs=120, ended=ended, clock=clock,
                           sleep=clock.sleep)  # fmt: skip
    assert found is None and clock.now == 1_000.0 and asked == ["local-x"]  # no wait: its writer is gone

    take_lease(rundir, owner="w1", backend="local", application_id="local-y", duration_secs=60)
    found = wait_for_lease(rundir, owner="w2", find_live=list, timeout_secs=120, ended=ended, clock=clock,
                           sleep=clock.sleep)  # fmt: skip
    assert found is None and clock.now == 1_060.0  # the backend cannot say it ended: waited out

    take_lease(rundir, owner="w1", backend="local", duration_secs=60)  # still submitting: names no application
    with pytest.raises(LeaseHeldError):
        wait_for_lease(rundir, owner="w2", find_live=list, timeout_secs=30, ended=lambda lease: True, clock=clock,
                       sleep=clock.sleep)  # fmt: skip
