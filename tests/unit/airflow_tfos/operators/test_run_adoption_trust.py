"""Which applications a run adopts or kills: only its own (its tag, its user, its spec), never another user's.

A tag is no proof of who submitted an application: on a shared standalone master the tag is in the name
any user may give, and two teams with the same default run directories have the same tags. Here: the
master's answer as recorded, and the operators at the hook boundary (a scripted backend) on real run
directories. With a real standalone master and a real application of another user:
tests/integration/spark/test_adoption_trust.py; with a real KDC: tests/integration/kerberos/test_adoption_trust.py.
"""

from __future__ import annotations

import json
import os
import pwd

import pytest

from airflow_tfos.hooks.backends.standalone import map_master_app, owned_with_tag, spark_user
from airflow_tfos.hooks.errors import ApplicationAlreadyRunningError, RunConfigError
from airflow_tfos.hooks.run_dir import run_tag
from airflow_tfos.hooks.yarn import YarnHook, principal_short_name
from airflow_tfos.operators import TFoSShutdownClusterOperator
from airflow_tfos.shared.rundir import RunDir
from tests.support.fakes import FakeBackend, make_context, use_backend
from tests.unit.airflow_tfos.test_operators import AppStateFactory, train_op, trains

OTHER_USER = "otherteam"


# --- a standalone master shared by two teams ----------------------------------------------------------------

#: The master's /json/ answer (Spark 4) with the same tag in two users' application names.
RECORDED_MASTER = {
    "url": "spark://10.0.0.5:7077",
    "workers": [],
    "aliveworkers": 1,
    "cores": 4,
    "coresused": 2,
    "activeapps": [
        {"id": "app-20261127101500-0003", "starttime": 1795774500000, "name": "tfos nightly.train run [TAG]",
         "cores": 1, "user": OTHER_USER, "memoryperexecutor": 512, "resourcesperexecutor": [],
         "submitdate": "Fri Nov 27 10:15:00 UTC 2026", "state": "RUNNING", "duration": 60000},
        {"id": "app-20261127101600-0004", "starttime": 1795774560000, "name": "tfos nightly.train run [TAG]",
         "cores": 1, "user": "airflow", "memoryperexecutor": 512, "resourcesperexecutor": [],
         "submitdate": "Fri Nov 27 10:16:00 UTC 2026", "state": "WAITING", "duration": 1000},
    ],
    "completedapps": [],
    "activedrivers": [],
    "completeddrivers": [],
    "status": "ALIVE",
}  # fmt: skip


def test_a_search_of_the_recorded_master_keeps_only_this_users_applications():
    assert spark_user() == pwd.getpwuid(os.getuid()).pw_name
    assert spark_user("-Xss4m -Duser.name=etl") == "etl"
    apps = [map_master_app(a, active=True, webui_url="http://10.0.0.5:8080") for a in RECORDED_MASTER["activeapps"]]
    assert [a.app_id for a in owned_with_tag(apps, "TAG", "airflow")] == ["app-20261127101600-0004"]
    assert owned_with_tag(apps, "TAG", "nobody") == []
    assert owned_with_tag(apps, "OTHER", "airflow") == []


# --- every adoption goes through the spec check -------------------------------------------------------------


def test_a_submission_refused_for_a_live_tag_does_not_adopt_an_application_of_another_spec(tmp_path):
    op, backend = train_op(tmp_path), FakeBackend()
    use_backend(op, backend)
    trains(op, backend, tmp_path)
    tag, rundir = run_tag(str(tmp_path)), RunDir(str(tmp_path))

    def refuse(run_dir, **kwargs):  # a live application appeared meanwhile; its driver read another spec
        backend.add("application_1_0002", "RUNNING", tags=[tag])
        backend.script["application_1_0002"] = [AppStateFactory.finished("application_1_0002", tag)]
        rundir.write_status("RUNNING", application_id="application_1_0002", spec_hash="another-spec")
        raise ApplicationAlreadyRunningError(tag, ["application_1_0002"])

    backend.submit = refuse
    with pytest.raises(ApplicationAlreadyRunningError):
        op.execute(make_context())
    assert backend.killed == ["application_1_0002"]


def test_the_race_winner_is_chosen_among_applications_of_this_spec(tmp_path):
    op, backend = train_op(tmp_path), FakeBackend()
    use_backend(op, backend)
    trains(op, backend, tmp_path)
    tag, rundir = run_tag(str(tmp_path)), RunDir(str(tmp_path))
    racer = "application_1700000000000_0001"  # older than ours, but its driver works on another spec

    def race(app_id):
        backend.racer = AppStateFactory.running(racer, tag)
        rundir.write_status("RUNNING", application_id=racer, spec_hash="another-spec")

    backend.on_submit = race
    backend.script[racer] = [AppStateFactory.running(racer, tag), AppStateFactory.finished(racer, tag)]
    result = op.execute(make_context())
    assert backend.killed == [racer]
    assert result["application_id"] == "application_1700000000000_0100"


def _shutdown(tmp_path, application_id):
    return TFoSShutdownClusterOperator(
        task_id="stop", run_dir=str(tmp_path), application_id=application_id, grace_secs=0.05, poll_interval=0.01
    )


def test_shutdown_refuses_an_application_id_that_does_not_carry_the_runs_tag(tmp_path):
    backend = FakeBackend()
    backend.add("application_1_0009", "RUNNING", tags=["tfos-another-run"])
    op = _shutdown(tmp_path, "application_1_0009")
    use_backend(op, backend)
    with pytest.raises(RunConfigError, match="application_id application_1_0009 is not an application of"):
        op.execute(make_context("stop"))
    assert backend.killed == [] and RunDir(str(tmp_path)).stop_requested() is None


def test_shutdown_of_an_application_id_of_the_run_stops_it(tmp_path):
    backend = FakeBackend()
    backend.add("application_1_0009", "RUNNING", tags=[run_tag(str(tmp_path))])
    op = _shutdown(tmp_path, "application_1_0009")
    use_backend(op, backend)
    assert op.execute(make_context("stop"))["state"] == "KILLED"
    assert backend.killed == ["application_1_0009"]


# --- the YARN user with Kerberos ----------------------------------------------------------------------------


def yarn_hook(monkeypatch, *, login: str | None = None, **extra) -> YarnHook:
    conn = {"conn_type": "yarn", "host": "rm.example.com:8088", "extra": extra}
    if login:
        conn["login"] = login
    monkeypatch.setenv("AIRFLOW_CONN_YARN_TRUST", json.dumps(conn))
    return YarnHook(yarn_conn_id="yarn_trust")


def test_with_kerberos_the_application_user_is_the_principals_short_name(monkeypatch):
    monkeypatch.setenv("HADOOP_USER_NAME", "not-the-principal")
    principal = "etl/worker-1.example.com@EXAMPLE.COM"
    assert yarn_hook(monkeypatch, auth="kerberos", principal=principal).application_user == "etl"
    assert yarn_hook(monkeypatch, login="alice", auth="kerberos", principal=principal).application_user == "etl"
    explicit = yarn_hook(monkeypatch, login="alice", auth="kerberos", principal=principal, application_user="svc")
    assert explicit.application_user == "svc"
    assert yarn_hook(monkeypatch, login="alice").application_user == "alice"  # simple authentication: the login
    assert principal_short_name("bob@EXAMPLE.COM") == "bob" and principal_short_name("bob") == "bob"
