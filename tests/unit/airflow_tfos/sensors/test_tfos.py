"""Sensors: states, run-directory conditions, deferring to their triggers (tested in
tests/unit/airflow_tfos/triggers/test_tfos.py)."""

from __future__ import annotations

import asyncio
import importlib
import time
from datetime import UTC, datetime

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_tfos.hooks.backends.apps import ApplicationClient
from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.sensors import TFoSCheckpointSensor, YarnApplicationSensor
from airflow_tfos.shared.rundir import RunDir
from tests.support.fakes import FakeBackend, make_context


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
        # resumed without the trigger's event (its wait was lost): it looks again, and defers again
        backend.add("application_1_0001", "ACCEPTED")
        with pytest.raises(TaskDeferred):
            sensor.execute_complete(make_context("s"))


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
