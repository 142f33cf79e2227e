"""What only the ResourceManager emulator does, over raw HTTP: applications whose state a test sets or that a local
process backs, HA by a switch, faults, refused users, the conf servlet. The REST API itself (shapes, filters, the
kill, errors) is asked of the emulator and of Hadoop's own RM alike in
``tests/integration/hadoop/test_yarn_conformance.py``."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from urllib.parse import urlsplit

import pytest

from airflow_tfos.testing.yarn import ResourceManagerEmulator


def call(url: str, path: str, method: str = "GET", body: dict | None = None, headers: dict | None = None):
    """One raw HTTP request; returns (status, headers, body text)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    finally:
        conn.close()


def get_json(url: str, path: str, **kwargs):
    status, _, text = call(url, path, **kwargs)
    return status, json.loads(text)


@pytest.fixture
def rm():
    with ResourceManagerEmulator(kill_delay=0.2) as emulator:
        yield emulator


@pytest.fixture
def ha_rm():
    with ResourceManagerEmulator(ha=True, kill_delay=0.0) as emulator:
        yield emulator


class TestShapes:
    def test_cluster_info_says_which_rm_is_active(self, ha_rm):
        for index, expected in ((0, "ACTIVE"), (1, "STANDBY")):
            status, payload = get_json(ha_rm.url(index), "/ws/v1/cluster/info")
            assert status == 200
            assert payload["clusterInfo"]["haState"] == expected
            assert payload["clusterInfo"]["state"] == "STARTED"

    def test_application_ids_follow_the_yarn_form(self, rm):
        first, second = rm.add_application("a"), rm.add_application("b")
        assert re.fullmatch(rf"application_{rm.cluster_timestamp}_0001", first)
        assert second.endswith("_0002")

    def test_apps_filters(self, rm):
        running = rm.add_application("a", tags=["Run-1"], user="alice", queue="ml")
        done = rm.add_application("b", tags=["run-2"], state="FINISHED", user="bob")

        def ids(query: str) -> list[str]:
            apps = get_json(rm.url(), f"/ws/v1/cluster/apps?{query}")[1]["apps"]
            return [app["id"] for app in apps["app"]] if apps else []

        assert ids("states=finished") == [done]
        assert ids("states=RUNNING,FINISHED") == [running, done]
        assert ids("applicationTags=RUN-1") == [running]
        assert ids("applicationTags=run-1,run-2") == [running, done]
        assert ids("applicationTags=other") == []
        assert ids("user=bob") == [done]
        assert ids("queue=ml") == [running]

    def test_state_machine_keeps_final_status_undefined_until_the_end(self, rm):
        app_id = rm.add_application("a", state="ACCEPTED")
        assert rm.application(app_id)["finalStatus"] == "UNDEFINED"
        rm.set_state(app_id, "RUNNING")
        rm.set_state(app_id, "FINISHED", "FAILED", "exit 1")
        app = rm.application(app_id)
        assert (app["state"], app["finalStatus"], app["diagnostics"]) == ("FINISHED", "FAILED", "exit 1")
        assert app["finishedTime"] >= app["startedTime"] and app["trackingUI"] == "History"
        with pytest.raises(ValueError, match="has ended"):
            rm.set_state(app_id, "RUNNING")
        with pytest.raises(ValueError, match="UNDEFINED"):
            rm.add_application("b", state="RUNNING", final_status="SUCCEEDED")
        with pytest.raises(ValueError, match="final status"):
            rm.add_application("c", state="KILLED", final_status="SUCCEEDED")


class TestKill:
    def test_kill_answers_202_until_killed_then_200(self, rm):
        app_id = rm.add_application("a")
        path = f"/ws/v1/cluster/apps/{app_id}/state?user.name=alice"
        status, headers, text = call(rm.url(), path, "PUT", {"state": "KILLED"})
        assert (status, json.loads(text)) == (202, {"state": "FINAL_SAVING"})  # the RM's own state, as Hadoop 3.5
        assert headers["location"].endswith(f"/ws/v1/cluster/apps/{app_id}")
        deadline = time.monotonic() + 5
        while (answer := get_json(rm.url(), path, method="PUT", body={"state": "KILLED"}))[0] == 202:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert answer == (200, {"state": "KILLED"})
        assert get_json(rm.url(), f"/ws/v1/cluster/apps/{app_id}/state") == (200, {"state": "KILLED"})
        assert rm.application(app_id)["finalStatus"] == "KILLED"

    def test_killing_a_finished_application_answers_its_state(self, rm):
        app_id = rm.add_application("a", state="FINISHED")
        path = f"/ws/v1/cluster/apps/{app_id}/state?user.name=alice"
        assert get_json(rm.url(), path, method="PUT", body={"state": "KILLED"}) == (200, {"state": "FINISHED"})
        assert rm.application(app_id)["state"] == "FINISHED"

    def test_only_killed_is_a_target_state_and_a_user_is_needed(self, rm):
        app_id = rm.add_application("a", state="ACCEPTED")
        path = f"/ws/v1/cluster/apps/{app_id}/state"
        status, payload = get_json(rm.url(), path + "?user.name=a", method="PUT", body={"state": "FINISHED"})
        assert status == 400 and "Only 'KILLED'" in payload["RemoteException"]["message"]
        status, payload = get_json(rm.url(), path, method="PUT", body={"state": "KILLED"})
        assert status == 403 and payload["RemoteException"]["exception"] == "AuthorizationException"


class TestHighAvailability:
    def test_standby_redirects_rest_calls_to_the_active_rm(self, ha_rm):
        path = "/ws/v1/cluster/apps?states=RUNNING&user.name=alice"
        status, headers, text = call(ha_rm.url(1), path)
        assert status == 307
        assert headers["location"] == ha_rm.url(0) + path
        assert "standby RM" in text

    def test_failover_swaps_the_roles(self, ha_rm):
        app_id = ha_rm.add_application("a")
        ha_rm.failover()
        assert call(ha_rm.url(0), f"/ws/v1/cluster/apps/{app_id}")[0] == 307
        assert get_json(ha_rm.url(1), f"/ws/v1/cluster/apps/{app_id}")[1]["app"]["id"] == app_id
        assert get_json(ha_rm.url(0), "/ws/v1/cluster/info")[1]["clusterInfo"]["haState"] == "STANDBY"

    def test_standby_without_redirect_answers_an_error(self):
        with ResourceManagerEmulator(ha=True, standby_mode="error") as rm:
            status, _, text = call(rm.url(1), "/ws/v1/cluster/apps")
            assert status == 503 and "standby RM" in text

    def test_a_stopped_rm_refuses_connections_until_restarted(self, rm):
        rm.stop_rm(0)
        with pytest.raises(ConnectionRefusedError):
            call(rm.url(), "/ws/v1/cluster/info")
        rm.start_rm(0)
        assert call(rm.url(), "/ws/v1/cluster/info")[0] == 200


class TestFaults:
    def test_fail_next_is_bounded(self, rm):
        rm.fail_next(2, status=503)
        assert [call(rm.url(), "/ws/v1/cluster/info")[0] for _ in range(3)] == [503, 503, 200]

    def test_drop_next_closes_without_an_answer(self, rm):
        rm.drop_next(1)
        with pytest.raises((http.client.RemoteDisconnected, ConnectionResetError)):
            call(rm.url(), "/ws/v1/cluster/info")
        assert call(rm.url(), "/ws/v1/cluster/info")[0] == 200

    def test_slow_next_delays_the_answer(self, rm):
        rm.slow_next(1, seconds=0.5)
        started = time.monotonic()
        assert call(rm.url(), "/ws/v1/cluster/info")[0] == 200
        assert time.monotonic() - started >= 0.5

    def test_malformed_next_sends_what_a_broken_proxy_sends(self, rm):
        rm.malformed_next(1)
        rm.malformed_next(1, body="html")
        for _ in range(2):
            status, _, text = call(rm.url(), "/ws/v1/cluster/info")
            assert status == 200
            with pytest.raises(ValueError):
                json.loads(text)
        assert json.loads(call(rm.url(), "/ws/v1/cluster/info")[2])["clusterInfo"]

    def test_a_fault_can_target_one_rm(self, ha_rm):
        ha_rm.fail_next(1, rm=1)
        assert call(ha_rm.url(0), "/ws/v1/cluster/info")[0] == 200
        assert call(ha_rm.url(1), "/ws/v1/cluster/info")[0] == 500


class TestAuthAndConf:
    def test_unknown_users_are_refused(self):
        with ResourceManagerEmulator(allowed_users={"alice"}, anonymous_allowed=False) as rm:
            assert call(rm.url(), "/ws/v1/cluster/apps?user.name=alice")[0] == 200
            assert call(rm.url(), "/ws/v1/cluster/apps?user.name=mallory")[0] == 403
            assert call(rm.url(), "/ws/v1/cluster/apps")[0] == 401

    def test_conf_servlet_gives_the_maximum_allocation(self):
        with ResourceManagerEmulator(max_allocation_mb=16384, max_allocation_vcores=8) as rm:
            json_accept = {"Accept": "application/json"}
            status, payload = get_json(rm.url(), "/conf?name=yarn.scheduler.maximum-allocation-mb", headers=json_accept)
            assert (status, payload["property"]["value"]) == (200, "16384")
            status, payload = get_json(rm.url(), "/conf", headers=json_accept)
            values = {p["key"]: p["value"] for p in payload["properties"]}
            assert values["yarn.scheduler.maximum-allocation-vcores"] == "8"
            assert call(rm.url(), "/conf?name=no.such.key", headers=json_accept)[0] == 404
            assert call(rm.url(), "/conf")[2].startswith("<?xml")

    def test_new_application_gives_the_maximum_resource_capability(self):
        with ResourceManagerEmulator(max_allocation_mb=4096, max_allocation_vcores=2, conf_forbidden=True) as rm:
            assert call(rm.url(), "/conf")[0] == 403
            path = "/ws/v1/cluster/apps/new-application"
            status, payload = get_json(rm.url(), path + "?user.name=alice", method="POST")
            assert status == 200
            assert payload["maximum-resource-capability"] == {"memory": 4096, "vCores": 2}
            assert payload["application-id"].startswith("application_")
            assert call(rm.url(), path, "POST")[0] == 403


def _sleeper(seconds: float, *, code: int = 0, ignore_term: bool = False, child: bool = False) -> subprocess.Popen:
    lines = ["import signal, subprocess, sys, time"]
    if ignore_term:
        lines.append("signal.signal(signal.SIGTERM, signal.SIG_IGN)")
    if child:
        lines.append(f"subprocess.Popen([sys.executable, '-c', 'import time; time.sleep({seconds})'])")
    lines += [f"time.sleep({seconds})", f"sys.exit({code})"]
    return subprocess.Popen([sys.executable, "-c", "\n".join(lines)], start_new_session=True)


def _wait_state(rm: ResourceManagerEmulator, app_id: str, state: str, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    while (app := rm.application(app_id))["state"] != state:
        assert time.monotonic() < deadline, f"{app_id} stayed {app['state']}, expected {state}"
        time.sleep(0.05)
    return app


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


class TestProcessApplications:
    def test_state_follows_the_exit_code(self, rm):
        ok, bad = _sleeper(0.3), _sleeper(0.3, code=3)
        ok_id = rm.add_process_application(ok, "ok", tags=["T"])
        bad_id = rm.add_process_application(bad, "bad")
        assert rm.application(ok_id)["state"] == "RUNNING"
        assert _wait_state(rm, ok_id, "FINISHED")["finalStatus"] == "SUCCEEDED"
        app = _wait_state(rm, bad_id, "FAILED")
        assert app["finalStatus"] == "FAILED" and "code 3" in app["diagnostics"]

    def test_kill_terminates_the_process_group(self, rm):
        process = _sleeper(30, child=True)
        time.sleep(0.3)  # let it start its child
        app_id = rm.add_process_application(process, "driver")
        path = f"/ws/v1/cluster/apps/{app_id}/state?user.name=alice"
        assert call(rm.url(), path, "PUT", {"state": "KILLED"})[0] in (200, 202)
        assert _wait_state(rm, app_id, "KILLED")["finalStatus"] == "KILLED"
        assert process.returncode == -signal.SIGTERM
        deadline = time.monotonic() + 5
        while not _group_gone(process.pid):
            assert time.monotonic() < deadline, "the process group outlived the kill"
            time.sleep(0.05)

    def test_a_process_ignoring_sigterm_gets_sigkill_after_the_grace(self):
        with ResourceManagerEmulator(kill_grace=0.5) as rm:
            process = _sleeper(30, ignore_term=True)
            time.sleep(0.3)
            app_id = rm.add_process_application(process.pid, "stubborn")
            call(rm.url(), f"/ws/v1/cluster/apps/{app_id}/state?user.name=a", "PUT", {"state": "KILLED"})
            assert rm.application(app_id)["state"] == "RUNNING"
            _wait_state(rm, app_id, "KILLED", timeout=5)
            assert _group_gone(process.pid)
