"""Sensors and triggers: states, run-directory conditions, serialization round trips, kill on user kill."""

from __future__ import annotations

import asyncio
import importlib
import time
from datetime import UTC, datetime

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_tfos.hooks.backends.apps import ApplicationClient
from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.run_dir import PollPacer, progress_line
from airflow_tfos.sensors import TFoSCheckpointSensor, YarnApplicationSensor
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.triggers import TFoSApplicationTrigger, TFoSRunDirTrigger
from tests.airflow_side.fakes import FakeBackend, make_context


@pytest.fixture
def backend(monkeypatch):
    """Every ApplicationClient built with a spark_conn_id talks to one scripted backend."""
    fake = FakeBackend()
    monkeypatch.setattr(ApplicationClient, "tfos_hook", property(lambda self: fake))
    return fake


def roundtrip(trigger):
    path, kwargs = trigger.serialize()
    module, name = path.rsplit(".", 1)
    again = getattr(importlib.import_module(module), name)(**kwargs)
    assert again.serialize() == (path, kwargs)
    return again


async def first_event(trigger, timeout=10.0):
    async def first():
        async for event in trigger.run():
            return event.payload
        return None

    return await asyncio.wait_for(first(), timeout)


class TestYarnApplicationSensor:
    def test_needs_an_id_or_a_tag(self):
        with pytest.raises(ValueError, match="application_id or tag"):
            YarnApplicationSensor(task_id="s")

    def test_unknown_target_state(self):
        with pytest.raises(ValueError, match="target_states must be YARN states"):
            YarnApplicationSensor(task_id="s", application_id="a", target_states=["DONE"])

    def test_reaches_the_target(self, backend):
        backend.add("application_1_0001", "RUNNING")
        sensor = YarnApplicationSensor(
            task_id="s", application_id="application_1_0001", target_states=["RUNNING"], spark_conn_id="spark_default"
        )
        result = sensor.poke(make_context("s"))
        assert result.is_done and result.xcom_value["state"] == "RUNNING"

    def test_fails_at_once_with_diagnostics(self, backend):
        backend.add(
            "application_1_0001", "FAILED", "FAILED", diagnostics="Container killed by YARN for exceeding memory limits"
        )
        sensor = YarnApplicationSensor(task_id="s", application_id="application_1_0001", spark_conn_id="spark_default")
        with pytest.raises(AirflowException, match="exceeding memory limits"):
            sensor.poke(make_context("s"))

    def test_finished_but_failed_is_a_failure(self, backend):
        backend.add("application_1_0001", "FINISHED", "FAILED", diagnostics="User application exited with status 1")
        sensor = YarnApplicationSensor(task_id="s", application_id="application_1_0001", spark_conn_id="spark_default")
        with pytest.raises(AirflowException, match="FINISHED/FAILED"):
            sensor.poke(make_context("s"))

    def test_by_tag_waits_until_an_application_appears(self, backend):
        sensor = YarnApplicationSensor(
            task_id="s", tag="tfos-abc", target_states=["RUNNING"], spark_conn_id="spark_default"
        )
        assert not sensor.poke(make_context("s")).is_done
        backend.add("application_1_0002", "RUNNING", tags=["tfos-abc"])
        assert sensor.poke(make_context("s")).is_done

    def test_deferrable_defers_then_maps_the_event(self, backend):
        backend.add("application_1_0001", "ACCEPTED")
        sensor = YarnApplicationSensor(
            task_id="s",
            application_id="application_1_0001",
            target_states=["RUNNING"],
            spark_conn_id="spark_default",
            deferrable=True,
        )
        with pytest.raises(TaskDeferred) as deferred:
            sensor.execute(make_context("s"))
        trigger = roundtrip(deferred.value.trigger)
        backend.add("application_1_0001", "RUNNING")
        event = asyncio.run(first_event(trigger))
        assert sensor.execute_complete(make_context("s"), event)["state"] == "RUNNING"
        killed = {
            "status": "done",
            "app": AppState("application_1_0001", "KILLED", "KILLED", diagnostics="by user").to_json(),
        }
        with pytest.raises(AirflowException, match="by user"):
            sensor.execute_complete(make_context("s"), killed)


class TestCheckpointSensor:
    def test_only_published_checkpoints_count(self, tmp_path):
        rundir = RunDir(str(tmp_path))
        rundir.checkpoint_staging(50)  # half-written: never named by the manifest
        sensor = TFoSCheckpointSensor(task_id="c", run_dir=str(tmp_path), min_step=10)
        assert not sensor.poke(make_context("c")).is_done
        rundir.publish_checkpoint(rundir.checkpoint_staging(5), 5)
        assert not sensor.poke(make_context("c")).is_done
        rundir.publish_checkpoint(rundir.checkpoint_staging(20), 20)
        result = sensor.poke(make_context("c"))
        assert result.is_done and result.xcom_value["step"] == 20
        assert result.xcom_value["path"].endswith("checkpoints/ckpt-20")

    def test_newer_than(self, tmp_path):
        rundir = RunDir(str(tmp_path))
        rundir.publish_checkpoint(rundir.checkpoint_staging(5), 5)
        cutoff = datetime.now(UTC)
        sensor = TFoSCheckpointSensor(task_id="c", run_dir=str(tmp_path), newer_than=cutoff.isoformat())
        assert not sensor.poke(make_context("c")).is_done
        time.sleep(0.01)
        rundir.publish_checkpoint(rundir.checkpoint_staging(6), 6)
        assert sensor.poke(make_context("c")).xcom_value["step"] == 6

    def test_export(self, tmp_path):
        rundir = RunDir(str(tmp_path))
        sensor = TFoSCheckpointSensor(task_id="c", run_dir=str(tmp_path), export=True)
        assert not sensor.poke(make_context("c")).is_done
        rundir.publish_export(rundir.export_staging(), spec_hash="h", step=9, metrics={"accuracy": 0.9})
        assert sensor.poke(make_context("c")).xcom_value["step"] == 9

    def test_bad_run_dir_at_parse_time(self):
        with pytest.raises(ValueError, match="absolute path or a URI"):
            TFoSCheckpointSensor(task_id="c", run_dir="relative/dir")

    def test_deferred_trigger_fires_on_a_checkpoint(self, tmp_path):
        rundir = RunDir(str(tmp_path))
        sensor = TFoSCheckpointSensor(
            task_id="c", run_dir=str(tmp_path), min_step=3, deferrable=True, poke_interval=0.05
        )
        with pytest.raises(TaskDeferred) as deferred:
            sensor.execute(make_context("c"))
        trigger = roundtrip(deferred.value.trigger)

        async def publish_then_wait():
            task = asyncio.ensure_future(first_event(trigger))
            await asyncio.sleep(0.2)
            await asyncio.to_thread(lambda: rundir.publish_checkpoint(rundir.checkpoint_staging(3), 3))
            return await task

        event = asyncio.run(publish_then_wait())
        assert sensor.execute_complete(make_context("c"), event)["step"] == 3


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
