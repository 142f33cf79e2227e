"""The backends as strategies: chosen once from the master, one interface, the YARN-only client. No Spark."""

from __future__ import annotations

import asyncio
import json

import pytest

from airflow_tfos.hooks.backends.apps import YARN_KILL_WAIT_SECS, ApplicationClient
from airflow_tfos.hooks.backends.base import Backend, Submission
from airflow_tfos.hooks.backends.local import LocalSparkBackend
from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.backends.yarn import YarnBackend
from airflow_tfos.hooks.tfos import TFoSHook
from airflow_tfos.hooks.yarn import YarnApplicationNotFound

APP = "application_1700000000000_0001"


class ScriptedYarnHook:
    """The YarnHook calls a backend makes, answered from memory."""

    application_user = "alice"

    def __init__(self, known: bool = True) -> None:
        self.known = known
        self.calls: list[tuple] = []

    def kill_application(self, app_id: str, timeout: float = 120) -> AppState:
        self.calls.append(("kill", app_id, timeout))
        if not self.known:
            raise YarnApplicationNotFound(app_id, "http://rm:8088")
        return AppState(app_id, "KILLED", "KILLED")

    async def akill_application(self, app_id: str, timeout: float = 120) -> AppState:
        return self.kill_application(app_id, timeout)

    def find_applications(self, tag=None, states=None, *, user=None, application_type=None) -> list[AppState]:
        self.calls.append(("find", tag, tuple(states or ()), user, application_type))
        return [AppState(APP, "RUNNING", tags=(tag,))]

    async def aapplication_user(self) -> str:
        return self.application_user

    async def afind_applications(self, tag=None, states=None, *, user=None, application_type=None):
        return self.find_applications(tag, states, user=user, application_type=application_type)


@pytest.mark.parametrize(
    ("host", "kind"),
    [("yarn", YarnBackend), ("local-cluster[2,1,1024]", LocalSparkBackend), ("spark://m:7077", LocalSparkBackend)],
)
def test_the_hook_chooses_its_backend_once_from_the_master(monkeypatch, tmp_path, host, kind):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_PICK", json.dumps({"conn_type": "spark", "host": host}))
    hook = TFoSHook(spark_conn_id="spark_pick", tracker_dir=str(tmp_path))
    chosen = hook._backend
    assert isinstance(chosen, kind) and hook._backend is chosen and hook.backend == chosen.name


def test_a_yarn_only_client_searches_as_the_application_user_and_kills_through_the_yarn_backend():
    client = ApplicationClient(yarn_conn_id="yarn_x")
    rm = client.__dict__["yarn_hook"] = ScriptedYarnHook()
    assert isinstance(client.backend, YarnBackend)
    assert [a.app_id for a in client.find("Run-1")] == [APP]
    assert [a.app_id for a in asyncio.run(client.afind("Run-1"))] == [APP]
    assert client.kill(APP).state == "KILLED"
    assert asyncio.run(client.akill(APP)).state == "KILLED"
    assert rm.calls == [
        ("find", "Run-1", (), "alice", "SPARK"),
        ("find", "Run-1", (), "alice", "SPARK"),
        ("kill", APP, YARN_KILL_WAIT_SECS),
        ("kill", APP, YARN_KILL_WAIT_SECS),
    ]


def test_killing_an_application_yarn_has_forgotten_is_a_no_op():
    backend = YarnBackend(ScriptedYarnHook(known=False))
    state = backend.kill(APP, grace_secs=5)
    assert (state.state, state.final_status) == ("KILLED", "KILLED") and "not killed" in state.diagnostics
    assert backend.hook.calls == [("kill", APP, 30)]  # never less than 30 s for the RM to report it


def test_yarn_finds_live_applications_with_the_rm_s_state_filter():
    backend = YarnBackend(ScriptedYarnHook())
    backend.find_live("run-1")
    (call,) = backend.hook.calls
    assert call[0] == "find" and "RUNNING" in call[2] and "FINISHED" not in call[2]


def test_yarn_executors_find_a_shipped_file_in_their_working_directory(tmp_path):
    assert YarnBackend(ScriptedYarnHook()).executor_path("/cache/ab/gpu.sh") == "./gpu.sh"
    assert LocalSparkBackend(None, master="local[2]").executor_path("/cache/ab/gpu.sh") == "/cache/ab/gpu.sh"


def test_a_backend_with_a_blocking_client_gets_async_twins_for_free():
    class Memory(Backend):
        name = "memory"

        def __init__(self) -> None:
            self.apps = {APP: AppState(APP, "RUNNING", tags=("t",))}

        def submit(self, submission: Submission) -> str:
            raise NotImplementedError

        def get_state(self, app_id: str) -> AppState:
            return self.apps[app_id]

        def find_by_tag(self, tag: str) -> list[AppState]:
            return [a for a in self.apps.values() if tag in a.tags]

        def kill(self, app_id: str, grace_secs: float = 30) -> AppState:
            self.apps[app_id] = AppState(app_id, "KILLED", "KILLED", tags=self.apps[app_id].tags)
            return self.apps[app_id]

    memory = Memory()
    assert asyncio.run(memory.aget_state(APP)).state == "RUNNING"
    assert [a.app_id for a in asyncio.run(memory.afind_by_tag("t"))] == [APP]
    assert [a.app_id for a in memory.find_live("t")] == [APP]
    assert asyncio.run(memory.akill(APP)).state == "KILLED"
    assert memory.find_live("t") == []
