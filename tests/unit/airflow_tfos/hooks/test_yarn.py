"""YarnHook against the ResourceManager emulator: every method, sync and async, HA, faults and bad input."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import time

import pytest

from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.yarn import (
    ContainerLimit,
    YarnApplicationNotFound,
    YarnAuthError,
    YarnError,
    YarnHook,
    YarnProtocolError,
    YarnUnavailableError,
)
from airflow_tfos.testing.yarn import ResourceManagerEmulator

CONN_ID = "yarn_test"
FAST = {"timeout": 2, "retry_backoff": 0.05, "max_retries": 3, "max_retry_seconds": 5}


@pytest.fixture
def connect(monkeypatch):
    """Point connection ``yarn_test`` at some RM addresses (through AIRFLOW_CONN_*); return a fresh hook."""

    def _connect(addresses: list[str], login: str | None = "alice", **extra) -> YarnHook:
        conn = {"conn_type": "yarn", "host": ",".join(addresses), "extra": {**FAST, **extra}}
        if login:
            conn["login"] = login
        monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(conn))
        return YarnHook(yarn_conn_id=CONN_ID)

    return _connect


@pytest.fixture
def rm():
    with ResourceManagerEmulator(kill_delay=0.3) as emulator:
        yield emulator


@pytest.fixture
def ha_rm():
    with ResourceManagerEmulator(ha=True, kill_delay=0.3) as emulator:
        yield emulator


class TestReadAndFind:
    def test_get_application(self, rm, connect):
        app_id = rm.add_application("train", tags=["Run-1"])
        hook = connect(rm.addresses)
        state = hook.get_application(app_id)
        assert isinstance(state, AppState)
        assert (state.app_id, state.state, state.final_status, state.name) == (app_id, "RUNNING", "UNDEFINED", "train")
        assert state.tags == ("run-1",) and state.tracking_url.endswith(f"/proxy/{app_id}/")
        assert rm.requests[-1].query["user.name"] == ["alice"]

    def test_aget_application(self, rm, connect):
        app_id = rm.add_application("train", state="FINISHED", final_status="FAILED", diagnostics="boom")
        state = asyncio.run(connect(rm.addresses).aget_application(app_id))
        assert (state.state, state.final_status, state.diagnostics) == ("FINISHED", "FAILED", "boom")
        assert not state.is_successful and state.is_terminal

    def test_find_applications_by_tag_ignores_case(self, rm, connect):
        mine = rm.add_application("a", tags=["Run-1"])
        rm.add_application("b", tags=["run-2"])
        hook = connect(rm.addresses)
        assert [a.app_id for a in hook.find_applications(tag="RUN-1")] == [mine]
        assert rm.requests[-1].query["applicationTags"] == ["run-1"]
        assert [a.app_id for a in asyncio.run(hook.afind_applications(tag="run-1"))] == [mine]
        assert hook.find_applications(tag="nobody") == []

    def test_find_applications_of_one_user_and_type(self, rm, connect):
        mine = rm.add_application("a", tags=["run-1"], user="alice")
        rm.add_application("b", tags=["run-1"], user="mallory")  # anyone can set any tag
        rm.add_application("c", tags=["run-1"], user="alice", application_type="MAPREDUCE")
        hook = connect(rm.addresses)
        found = hook.find_applications(tag="run-1", user="alice", application_type="SPARK")
        assert [(a.app_id, a.user, a.application_type) for a in found] == [(mine, "alice", "SPARK")]
        assert rm.requests[-1].query["user"] == ["alice"] and rm.requests[-1].query["applicationTypes"] == ["SPARK"]
        found = asyncio.run(hook.afind_applications(tag="run-1", user="alice", application_type="spark"))
        assert [a.app_id for a in found] == [mine]
        assert len(hook.find_applications(tag="run-1")) == 3

    def test_the_application_user_is_the_extra_then_the_login(self, rm, connect, monkeypatch):
        assert connect(rm.addresses, application_user="etl").application_user == "etl"
        assert connect(rm.addresses).application_user == "alice"
        monkeypatch.setenv("HADOOP_USER_NAME", "hdfs-etl")
        assert connect(rm.addresses, login=None).application_user == "hdfs-etl"

    def test_find_applications_by_states(self, rm, connect):
        running = rm.add_application("a", tags=["t"])
        done = rm.add_application("b", tags=["t"], state="FINISHED")
        hook = connect(rm.addresses)
        assert [a.app_id for a in hook.find_applications(tag="t", states=["running", "ACCEPTED"])] == [running]
        assert [a.app_id for a in hook.find_applications(states={"FINISHED"})] == [done]
        assert len(hook.find_applications()) == 2
        with pytest.raises(ValueError, match="SLEEPING"):
            hook.find_applications(states=["SLEEPING"])

    def test_get_max_allocation_from_the_conf_servlet(self, connect):
        with ResourceManagerEmulator(max_allocation_mb=12288, max_allocation_vcores=6) as rm:
            hook = connect(rm.addresses)
            assert hook.get_max_allocation() == ContainerLimit(memory_mb=12288, vcores=6)
            assert asyncio.run(hook.aget_max_allocation()) == ContainerLimit(12288, 6)
            assert not any(r.path.endswith("new-application") for r in rm.requests)

    def test_get_max_allocation_falls_back_to_new_application(self, connect):
        with ResourceManagerEmulator(max_allocation_mb=4096, max_allocation_vcores=2, conf_forbidden=True) as rm:
            assert connect(rm.addresses).get_max_allocation() == ContainerLimit(4096, 2)
            assert rm.requests[-1].path.endswith("new-application")


class TestKill:
    def test_kill_goes_through_202_until_killed(self, rm, connect):
        app_id = rm.add_application("a")
        started = time.monotonic()
        state = connect(rm.addresses).kill_application(app_id, timeout=10, poll_interval=0.05)
        assert (state.state, state.final_status) == ("KILLED", "KILLED")
        assert time.monotonic() - started >= 0.3
        puts = [r for r in rm.requests if r.method == "PUT"]
        assert len(puts) >= 2  # a 202 first, then the 200

    def test_akill_application(self, rm, connect):
        app_id = rm.add_application("a")
        state = asyncio.run(connect(rm.addresses).akill_application(app_id, timeout=10, poll_interval=0.05))
        assert state.state == "KILLED"

    @pytest.mark.parametrize("final", ["FINISHED", "FAILED", "KILLED"])
    def test_kill_of_an_ended_application_is_a_no_op(self, rm, connect, final):
        app_id = rm.add_application("a", state=final)
        state = connect(rm.addresses).kill_application(app_id)
        assert state.state == final
        assert not [r for r in rm.requests if r.method == "PUT"]

    def test_kill_that_does_not_complete_times_out(self, connect):
        with ResourceManagerEmulator(kill_delay=60) as rm:
            app_id = rm.add_application("a")
            started = time.monotonic()
            with pytest.raises(YarnError, match=f"{app_id} is not killed .* state FINAL_SAVING"):
                connect(rm.addresses).kill_application(app_id, timeout=0.5, poll_interval=0.1)
            assert time.monotonic() - started < 3


class TestHighAvailability:
    def test_follows_the_standby_redirect(self, ha_rm, connect):
        app_id = ha_rm.add_application("a")
        standby_first = [ha_rm.addresses[1], ha_rm.addresses[0]]
        hook = connect(standby_first)  # the standby is asked first; its redirect names the active RM
        assert hook.get_application(app_id).state == "RUNNING"
        assert [r.rm for r in ha_rm.requests] == [1, 0]
        assert ha_rm.requests[-1].query["user.name"] == ["alice"]
        hook.get_application(app_id)  # the active RM is remembered
        assert [r.rm for r in ha_rm.requests] == [1, 0, 0]
        assert asyncio.run(connect(standby_first).aget_application(app_id)).app_id == app_id

    def test_kill_through_the_standby_redirect(self, ha_rm, connect):
        app_id = ha_rm.add_application("a")
        hook = connect([ha_rm.addresses[1], ha_rm.addresses[0]])
        assert hook.kill_application(app_id, timeout=10, poll_interval=0.05).state == "KILLED"

    def test_a_redirect_to_an_address_not_in_the_connection_is_refused(self, ha_rm, connect):
        app_id = ha_rm.add_application("a")
        active = f"http://{ha_rm.addresses[0]}"
        hook = connect([ha_rm.addresses[1]], max_retries=1)  # only the standby: its redirect names another host
        for call in (lambda: hook.get_application(app_id), lambda: asyncio.run(hook.aget_application(app_id))):
            with pytest.raises(YarnUnavailableError) as refused:
                call()
            message = str(refused.value)
            assert f"redirected to {active}, which is not a ResourceManager of connection {CONN_ID!r}" in message
            assert "extra 'rm_addresses'" in message
        assert {r.rm for r in ha_rm.requests} == {1}  # the active RM, never configured, was never asked

    def test_failover_between_calls(self, ha_rm, connect):
        app_id = ha_rm.add_application("a")
        hook = connect(ha_rm.addresses)
        hook.get_application(app_id)
        ha_rm.failover()
        ha_rm.stop_rm(0)  # the former active is gone: connection refused, then the next RM
        assert hook.get_application(app_id).app_id == app_id
        assert asyncio.run(hook.aget_application(app_id)).app_id == app_id

    def test_standby_without_redirect_moves_to_the_next_rm(self, connect):
        with ResourceManagerEmulator(ha=True, standby_mode="error") as rm:
            app_id = rm.add_application("a")
            rm.failover()
            hook = connect(rm.addresses)
            assert hook.get_application(app_id).app_id == app_id
            assert [r.rm for r in rm.requests] == [0, 1]
            assert asyncio.run(hook.aget_application(app_id)).app_id == app_id


class TestFaults:
    def test_5xx_is_retried(self, rm, connect):
        app_id = rm.add_application("a")
        rm.fail_next(2, status=503)
        assert connect(rm.addresses).get_application(app_id).app_id == app_id
        rm.fail_next(2, status=500)
        assert asyncio.run(connect(rm.addresses).aget_application(app_id)).app_id == app_id

    def test_dropped_connections_are_retried(self, rm, connect):
        app_id = rm.add_application("a")
        rm.drop_next(2)
        assert connect(rm.addresses).get_application(app_id).app_id == app_id
        rm.drop_next(2)
        assert asyncio.run(connect(rm.addresses).aget_application(app_id)).app_id == app_id

    def test_a_slow_answer_times_out_and_is_retried(self, rm, connect):
        app_id = rm.add_application("a")
        rm.slow_next(1, seconds=3)
        started = time.monotonic()
        assert connect(rm.addresses, timeout=0.5).get_application(app_id).app_id == app_id
        assert time.monotonic() - started < 2.5

    def test_persistent_5xx_gives_up_within_the_bounds(self, rm, connect):
        rm.fail_next(100, status=502)
        with pytest.raises(YarnUnavailableError, match="HTTP 502"):
            connect(rm.addresses, max_retries=2).get_application("application_1_0001")
        assert len(rm.requests) == 3  # one try and two retries

    def test_every_rm_down_names_every_address_and_the_connection(self, ha_rm, connect):
        addresses = ha_rm.addresses
        ha_rm.stop_rm(0)
        ha_rm.stop_rm(1)
        hook = connect(addresses, max_retry_seconds=1.5, retry_backoff=0.2, max_retries=10)
        started = time.monotonic()
        with pytest.raises(YarnUnavailableError) as failure:
            hook.get_application("application_1_0001")
        assert time.monotonic() - started < 4
        for address in addresses:
            assert f"http://{address}: connection refused" in str(failure.value)
        assert repr(CONN_ID) in str(failure.value)
        started = time.monotonic()
        with pytest.raises(YarnUnavailableError, match="connection refused"):
            asyncio.run(hook.afind_applications(tag="x"))
        assert time.monotonic() - started < 4


class TestBadInput:
    def test_unknown_application(self, rm, connect):
        hook = connect(rm.addresses)
        with pytest.raises(YarnApplicationNotFound) as failure:
            hook.get_application("application_1_0042")
        assert failure.value.app_id == "application_1_0042" and failure.value.address == rm.url()
        assert "application_1_0042" in str(failure.value) and rm.url() in str(failure.value)
        with pytest.raises(YarnApplicationNotFound):
            asyncio.run(hook.akill_application("application_1_0042"))

    def test_not_an_application_id(self, rm, connect):
        with pytest.raises(ValueError, match="not a YARN application id"):
            connect(rm.addresses).get_application("job_1_1")

    @pytest.mark.parametrize("body", ["truncated", "html"])
    def test_malformed_json_names_the_address(self, rm, connect, body):
        app_id = rm.add_application("a")
        rm.malformed_next(1, body=body)
        with pytest.raises(YarnProtocolError, match="a proxy answered instead of the ResourceManager") as failure:
            connect(rm.addresses).get_application(app_id)
        assert rm.url() in str(failure.value)
        rm.malformed_next(1, body=body)
        with pytest.raises(YarnProtocolError):
            asyncio.run(connect(rm.addresses).aget_application(app_id))

    def test_wrong_credentials(self, connect):
        with ResourceManagerEmulator(allowed_users={"alice"}, anonymous_allowed=False) as rm:
            with pytest.raises(YarnAuthError, match=r"HTTP 403.*login \(user.name\)") as failure:
                connect(rm.addresses, login="mallory").find_applications()
            assert repr(CONN_ID) in str(failure.value)
            with pytest.raises(YarnAuthError, match="HTTP 401"):
                asyncio.run(connect(rm.addresses, login=None).afind_applications())

    def test_kill_needs_a_user(self, rm, connect):
        app_id = rm.add_application("a")
        with pytest.raises(YarnAuthError, match="HTTP 403"):
            connect(rm.addresses, login=None).kill_application(app_id)

    @pytest.mark.parametrize(
        ("conn", "message"),
        [
            ({"host": ""}, "names no ResourceManager"),
            ({"host": "rm1", "extra": {"auth": "ldap"}}, "must be 'simple' or 'kerberos'"),
            ({"host": "rm1", "schema": "ftp"}, "must be 'http' or 'https'"),
            ({"host": "rm1", "extra": {"timeout": "soon"}}, "must be numbers"),
        ],
    )
    def test_bad_connections_say_what_to_fix(self, monkeypatch, conn, message):
        monkeypatch.setenv("AIRFLOW_CONN_YARN_BAD", json.dumps({"conn_type": "yarn", **conn}))
        with pytest.raises(YarnError, match=message):
            YarnHook(yarn_conn_id="yarn_bad").get_application("application_1_0001")

    def test_the_connection_password_never_reaches_logs_or_the_rm(self, rm, connect, monkeypatch, caplog):
        app_id = rm.add_application("a")
        monkeypatch.setenv(
            "AIRFLOW_CONN_YARN_SECRET",
            json.dumps({"conn_type": "yarn", "host": rm.addresses[0], "login": "alice", "password": "s3cr3t-pw"}),
        )
        rm.fail_next(1)
        with caplog.at_level(logging.DEBUG):
            YarnHook(yarn_conn_id="yarn_secret").get_application(app_id)
        assert "s3cr3t-pw" not in caplog.text
        assert all("s3cr3t-pw" not in json.dumps([r.query, r.headers]) for r in rm.requests)


class TestKerberos:
    def test_sync_uses_spnego_auth(self, rm, connect):
        hook = connect(rm.addresses, auth="kerberos")
        assert hook._rms._session.auth == hook._rms._spnego
        assert hook.settings.auth == "kerberos"

    def test_async_without_a_ticket_is_a_clear_auth_error(self, rm, connect, tmp_path, monkeypatch):
        monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/no-cache")
        monkeypatch.setenv("KRB5_CONFIG", str(tmp_path / "krb5.conf"))
        (tmp_path / "krb5.conf").write_text("[libdefaults]\n dns_lookup_kdc = false\n dns_lookup_realm = false\n")
        hook = connect(rm.addresses, auth="kerberos")
        with pytest.raises(YarnAuthError, match="kinit"):
            asyncio.run(asyncio.wait_for(hook.aget_application("application_1_0001"), 20))


def test_a_process_backed_application_is_watched_and_killed_through_the_hook(rm, connect):
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
    code += "time.sleep(30)"
    process = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        app_id = rm.add_process_application(process, "spark-driver", tags=["run-7"])
        hook = connect(rm.addresses)
        (found,) = hook.find_applications(tag="RUN-7", states=["RUNNING"])
        assert found.app_id == app_id and found.state == "RUNNING"
        time.sleep(0.3)  # the driver has started its child in its group
        state = hook.kill_application(app_id, timeout=10, poll_interval=0.1)
        assert (state.state, state.final_status) == ("KILLED", "KILLED")
        assert process.poll() is not None
        deadline = time.monotonic() + 5
        while True:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, "the driver's process group outlived the kill"
            time.sleep(0.05)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def test_no_airflow_database_is_needed(rm, tmp_path):
    """The hook runs with an Airflow home that has no database at all."""
    app_id = rm.add_application("a")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "home"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{tmp_path}/missing-dir/airflow.db",
        "AIRFLOW_CONN_YARN_TEST": json.dumps({"conn_type": "yarn", "host": rm.addresses[0], "login": "alice"}),
    }
    code = "from airflow_tfos.hooks.yarn import YarnHook; "
    code += f"print(YarnHook(yarn_conn_id='yarn_test').get_application({app_id!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{app_id} RUNNING" in done.stdout
    assert not (tmp_path / "missing-dir").exists()
