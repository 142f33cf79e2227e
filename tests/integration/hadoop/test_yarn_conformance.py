"""The ResourceManager's REST API as the project's client relies on it, asked of the RM emulator and of Hadoop's
own ResourceManager (the lab) with the same raw requests: the cluster's info, an application's record while it
waits for its master and once killed, the list and its filters, the kill, and each error. What the emulator
answers differently from Hadoop fails here; what only the emulator can do (HA by a switch, faults, applications
backed by local processes) is tested in ``tests/unit/airflow_tfos/testing/test_yarn.py``.

On the lab the application is submitted through the REST API itself (``new-application``, then ``POST apps``)
with ``sleep`` as its master's command: a container that never registers, so the application stays ACCEPTED
until it is killed, without Spark."""

from __future__ import annotations

import getpass
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import requests

from airflow_tfos.hooks.backends.state import YARN_STATES
from airflow_tfos.testing.yarn import ResourceManagerEmulator

pytestmark = pytest.mark.real_hadoop

#: The fields of an application the project reads or shows (Hadoop sends more).
APP_KEYS = {
    "id", "user", "name", "queue", "state", "finalStatus", "progress", "trackingUI", "diagnostics",
    "applicationType", "applicationTags", "startedTime", "finishedTime", "elapsedTime", "clusterId",
    "launchTime", "allocatedMB", "allocatedVCores", "runningContainers",
}  # fmt: skip
CLUSTER_INFO_KEYS = {"id", "startedOn", "state", "haState", "resourceManagerVersion", "hadoopVersion"}


@dataclass
class Target:
    """A ResourceManager under test: its REST base URL, and how to get an application waiting for its master."""

    kind: str
    url: str
    user: str
    #: submits an application of ``user`` tagged ``tag`` that stays ACCEPTED; returns its id
    submit_waiting: Callable[[str], str]

    def get(self, path: str, **params):
        return requests.get(f"{self.url}{path}", params=params, timeout=30)

    def put_state(self, app_id: str, state: str):
        return requests.put(
            f"{self.url}/ws/v1/cluster/apps/{app_id}/state",
            json={"state": state},
            params={"user.name": self.user},
            timeout=30,
        )


def _submit_through_rest(url: str, user: str, tag: str) -> str:
    new = requests.post(f"{url}/ws/v1/cluster/apps/new-application", params={"user.name": user}, timeout=30)
    assert new.status_code == 200, new.text
    app_id = new.json()["application-id"]
    body = {
        "application-id": app_id,
        "application-name": "protocol",
        "application-type": "SPARK",
        "application-tags": {"tag": [tag]},
        "queue": "default",
        "am-container-spec": {"commands": {"command": "sleep 600"}},
        "resource": {"memory": 128, "vCores": 1},
        "max-app-attempts": 1,
    }
    submitted = requests.post(f"{url}/ws/v1/cluster/apps", params={"user.name": user}, json=body, timeout=30)
    assert submitted.status_code == 202, submitted.text
    return app_id


@pytest.fixture(params=["emulator", "hadoop"])
def target(request):
    if request.param == "emulator":
        with ResourceManagerEmulator(kill_delay=0.5) as rm:

            def waiting(tag: str) -> str:
                return rm.add_application("protocol", tags=[tag], state="ACCEPTED", user=getpass.getuser())

            yield Target("emulator", rm.url(), getpass.getuser(), waiting)
        return
    lab = request.getfixturevalue("hadoop_lab")
    url, user = lab.description["rm_web"], getpass.getuser()
    submitted: list[str] = []

    def waiting(tag: str) -> str:
        app_id = _submit_through_rest(url, user, tag)
        submitted.append(app_id)
        return app_id

    yield Target("hadoop", url, user, waiting)
    for app_id in submitted:  # nothing of a failed test keeps running
        requests.put(
            f"{url}/ws/v1/cluster/apps/{app_id}/state", json={"state": "KILLED"}, params={"user.name": user}, timeout=30
        )


def _app(target: Target, app_id: str) -> dict:
    answer = target.get(f"/ws/v1/cluster/apps/{app_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()["app"]


def _remote(answer, status: int, exception: str) -> str:
    assert answer.status_code == status, (answer.status_code, answer.text)
    remote = answer.json()["RemoteException"]
    assert remote["exception"] == exception
    assert remote["javaClassName"] == f"org.apache.hadoop.yarn.webapp.{exception}"
    return remote["message"]


def test_cluster_info(target):
    info = target.get("/ws/v1/cluster/info").json()["clusterInfo"]
    assert set(info) >= CLUSTER_INFO_KEYS
    assert (info["state"], info["haState"]) == ("STARTED", "ACTIVE")


def test_an_application_waiting_for_its_master_then_killed(target):
    tag = f"protocol-{uuid.uuid4().hex[:8]}"
    app_id = target.submit_waiting(tag)
    assert re.fullmatch(r"application_\d+_\d{4,}", app_id)
    deadline = time.monotonic() + 60
    while (app := _app(target, app_id))["state"] != "ACCEPTED":
        assert time.monotonic() < deadline and app["state"] in YARN_STATES, app
        time.sleep(0.5)
    assert set(app) >= APP_KEYS, sorted(APP_KEYS - set(app))
    assert (app["id"], app["user"], app["applicationTags"]) == (app_id, target.user, tag)
    assert (app["finalStatus"], app["finishedTime"], app["trackingUI"]) == ("UNDEFINED", 0, "UNASSIGNED")
    assert app["queue"] == "root.default"  # the capacity scheduler's full path, not the name submitted
    assert "trackingUrl" not in app  # none before the master registers
    assert target.get(f"/ws/v1/cluster/apps/{app_id}/state").json() == {"state": "ACCEPTED"}

    # the list and its filters
    def ids(**params) -> list[str]:
        apps = target.get("/ws/v1/cluster/apps", **params).json()["apps"]
        return [a["id"] for a in apps["app"]] if apps else []

    assert ids(applicationTags=tag.upper()) == [app_id]  # tags are lower-cased and matched so
    assert ids(applicationTags=tag, states="accepted,running") == [app_id]
    assert ids(applicationTags=tag, states="RUNNING") == []
    assert ids(applicationTags=tag, user=target.user, applicationTypes="spark") == [app_id]
    assert target.get("/ws/v1/cluster/apps", applicationTags="no-such-tag").json() == {"apps": {}}

    # only KILLED is a target; the kill is 202 while it is saved, then 200 with the final state
    assert "Only 'KILLED'" in _remote(target.put_state(app_id, "RUNNING"), 400, "BadRequestException")
    first = target.put_state(app_id, "KILLED")
    assert first.status_code in (200, 202), first.text
    if first.status_code == 202:  # the state at that moment: seen ACCEPTED, KILLING, FINAL_SAVING, even KILLED
        assert isinstance(first.json()["state"], str), first.text
    deadline = time.monotonic() + 60
    while (answer := target.put_state(app_id, "KILLED")).status_code == 202:
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.5)
    assert (answer.status_code, answer.json()) == (200, {"state": "KILLED"})
    app = _app(target, app_id)
    assert (app["state"], app["finalStatus"], app["trackingUI"]) == ("KILLED", "KILLED", "History")
    assert app["diagnostics"] == f"Application {app_id} was killed by user {target.user}"
    assert app["trackingUrl"].endswith(f"/cluster/app/{app_id}") and app["finishedTime"] >= app["startedTime"]
    assert ids(applicationTags=tag, states="KILLED") == [app_id]


def test_errors(target):
    message = _remote(target.get("/ws/v1/cluster/apps", states="SLEEPING"), 400, "BadRequestException")
    assert message == f"Invalid application-state SLEEPING specified. It should be one of [{', '.join(YARN_STATES)}]"
    unknown = "application_1_0042"
    assert _remote(target.get(f"/ws/v1/cluster/apps/{unknown}"), 404, "NotFoundException") == (
        f"app with id: {unknown} not found"
    )
    assert "Invalid ApplicationId prefix: not-an-id" in _remote(
        target.get("/ws/v1/cluster/apps/not-an-id"), 400, "BadRequestException"
    )
