"""Triggers: what they report, serialization round trips, kill on user kill, polling pace. The sensors that defer
to them: tests/unit/airflow_tfos/sensors/test_tfos.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from airflow_tfos.hooks.backends.apps import ApplicationClient
from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.run_dir import PollPacer, progress_line
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.triggers import TFoSApplicationTrigger, TFoSRunDirTrigger
from tests.support.fakes import FakeBackend
from tests.unit.airflow_tfos.sensors.test_tfos import first_event, roundtrip


@pytest.fixture
def backend(monkeypatch):
    """Every ApplicationClient built with a spark_conn_id talks to one scripted backend."""
    fake = FakeBackend()
    monkeypatch.setattr(ApplicationClient, "tfos_hook", property(lambda self: fake))
    return fake


class TestTriggers:
    def test_application_trigger_keeps_the_last_ui_address_it_saw(self, backend):
        running = AppState("application_1_0003", "RUNNING", tracking_url="http://127.0.0.1:4041")
        backend.apps["application_1_0003"] = running
        backend.script["application_1_0003"] = [
            running,
            running,
            AppState("application_1_0003", "FINISHED", "SUCCEEDED"),
        ]
        trigger = TFoSApplicationTrigger(
            application_id="application_1_0003", spark_conn_id="spark_default", poll_interval=0.01
        )
        event = asyncio.run(first_event(trigger))
        assert event["app"]["tracking_url"] is None and event["tracking_url"] == "http://127.0.0.1:4041"

    def test_application_trigger_reports_the_end_and_kills_on_user_kill(self, backend):
        backend.add("application_1_0001", "RUNNING", tags=["tfos-x"])
        trigger = roundtrip(
            TFoSApplicationTrigger(
                application_id="application_1_0001",
                spark_conn_id="spark_default",
                poll_interval=0.01,
                kill_on_kill=True,
            )
        )
        backend.script["application_1_0001"] = [backend.apps["application_1_0001"]] * 3 + [
            AppState("application_1_0001", "FINISHED", "SUCCEEDED")
        ]
        event = asyncio.run(first_event(trigger))
        assert event["status"] == "done" and event["app"]["final_status"] == "SUCCEEDED"
        backend.add("application_1_0002", "RUNNING", tags=["tfos-y"])
        killer = TFoSApplicationTrigger(tag="tfos-y", spark_conn_id="spark_default", kill_on_kill=True)
        asyncio.run(killer.on_kill())
        assert backend.killed == ["application_1_0002"]

    def test_application_trigger_without_kill_on_kill_leaves_it_alone(self, backend):
        backend.add("application_1_0001", "RUNNING")
        asyncio.run(
            TFoSApplicationTrigger(application_id="application_1_0001", spark_conn_id="spark_default").on_kill()
        )
        assert backend.killed == []

    def test_application_trigger_gives_up_after_repeated_errors(self, backend, monkeypatch):
        monkeypatch.setattr("airflow_tfos.triggers.tfos.MAX_POLL_ERRORS", 3)

        def down(app_id):
            raise ConnectionError("every ResourceManager is down")

        backend.get_state = down
        trigger = TFoSApplicationTrigger(
            application_id="application_1_0001", spark_conn_id="spark_default", poll_interval=0.01
        )
        event = asyncio.run(first_event(trigger))
        assert event["status"] == "error" and "down" in event["message"]

    def test_run_dir_trigger_reports_an_application_that_ended_first(self, backend, tmp_path):
        backend.add("application_1_0001", "FAILED", "FAILED", diagnostics="driver died")
        trigger = roundtrip(
            TFoSRunDirTrigger(
                run_dir=str(tmp_path),
                condition={"feed": "f1"},
                application_id="application_1_0001",
                spark_conn_id="spark_default",
                poll_interval=0.01,
            )
        )
        event = asyncio.run(first_event(trigger))
        assert event["status"] == "app_ended" and event["app"]["diagnostics"] == "driver died"

    def test_application_trigger_looks_again_soon_after_the_runs_expected_end(self, backend, tmp_path, monkeypatch):
        """With a minute between polls, the end of a run whose progress says it is about to finish is still
        seen within a fraction of that: the trigger looks again just after the ETA, then backs off."""
        monkeypatch.setattr(PollPacer, "FIRST_SECS", 0.05)
        RunDir(str(tmp_path)).write_status("RUNNING", progress={"time": time.time(), "eta_secs": 0.1, "step": 9})
        running = AppState("application_1_0004", "RUNNING")
        backend.apps["application_1_0004"] = running
        backend.script["application_1_0004"] = [running] * 4 + [AppState("application_1_0004", "FINISHED", "SUCCEEDED")]
        trigger = TFoSApplicationTrigger(
            application_id="application_1_0004", spark_conn_id="spark_default", run_dir=str(tmp_path), poll_interval=60
        )
        started = time.monotonic()
        event = asyncio.run(asyncio.wait_for(first_event(trigger), timeout=20))
        assert event["status"] == "done" and time.monotonic() - started < 5

    def test_poll_pacer_follows_the_eta_then_backs_off_to_the_interval(self):
        pacer, now = PollPacer(15.0), 1000.0

        def status(eta, at=now, **fields):
            return {"state": "RUNNING", "progress": {"time": at, "eta_secs": eta, **fields}}

        assert pacer.next_secs(None, now) == 15.0  # nothing known: the interval
        assert pacer.next_secs({"state": "STARTING"}, now) == 15.0
        assert pacer.next_secs(status(100.0), now) == 15.0  # the end is further than one interval
        assert pacer.next_secs(status(6.0, at=now - 2), now) == 5.0  # 4 s left, then one more
        assert pacer.next_secs(status(0.5), now) == 1.5
        # the expected end has passed: 1, 2, 4, 8 s, then the interval
        assert [pacer.next_secs(status(3.0, at=now - 10), now) for _ in range(6)] == [1, 2, 4, 8, 15, 15]
        assert pacer.next_secs(status(30.0), now) == 15.0  # a new ETA (a slower epoch) starts over
        assert pacer.next_secs(status(50.0, finished=True), now) == 1.0  # the last step is done
        assert pacer.next_secs({"state": "SUCCEEDED"}, now) == 2.0

    def test_run_dir_trigger_times_out(self, tmp_path):
        trigger = TFoSRunDirTrigger(run_dir=str(tmp_path), condition={"export": {}}, poll_interval=0.01, timeout=0.05)
        assert asyncio.run(first_event(trigger))["status"] == "timeout"

    def test_progress_line(self):
        status = {
            "state": "RUNNING",
            "step": 40,
            "progress": {
                "step": 50,
                "total_steps": 200,
                "epoch": 1,
                "loss": 0.25,
                "steps_per_sec": 4.0,
                "eta_secs": 37.5,
            },
        }
        assert (
            progress_line(status)
            == "state RUNNING, checkpoint step 40, step 50/200 (25%), epoch 1, loss 0.2500, 4.0 steps/s, ETA 38 s"
        )
        assert progress_line(None) is None
        # no checkpoint yet (or batch inference, which never has one): no "checkpoint step 0"
        assert progress_line({"state": "RUNNING", "step": 0}) == "state RUNNING"
