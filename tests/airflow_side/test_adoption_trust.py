"""Which applications a run adopts or kills: only its own (its tag, its user, its spec), never another user's.

A tag is no proof of who submitted an application: on a shared standalone master the tag is in the name
any user may give, and two teams with the same default run directories have the same tags. The standalone
tests use a real master (the fixture of test_lease_standalone) and a real application of another user; the
rest runs the operators at the hook boundary (a scripted backend) on real run directories.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import subprocess
import textwrap
import urllib.request

import pytest

from airflow_tfos.hooks.backends.standalone import MASTER_WEBUI_ENV, map_master_app, owned_with_tag, spark_user
from airflow_tfos.hooks.errors import ApplicationAlreadyRunningError, LocalBackendError, RunConfigError
from airflow_tfos.hooks.run_dir import run_tag
from airflow_tfos.hooks.tfos import TFoSHook
from airflow_tfos.hooks.yarn import YarnHook, principal_short_name
from airflow_tfos.operators import TFoSShutdownClusterOperator
from airflow_tfos.operators.run import ApplicationRun
from airflow_tfos.shared.rundir import RunDir
from tests.airflow_side.fakes import FakeBackend, make_context, use_backend
from tests.airflow_side.test_lease_standalone import SPARK_BIN, standalone  # noqa: F401 (the master fixture)
from tests.airflow_side.test_operators import AppStateFactory, train_op, trains
from tests.conftest import wait_for

log = logging.getLogger(__name__)

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


#: A driver that registers with the master under a name holding the run's tag, and waits.
FOREIGN_APP = textwrap.dedent(
    """
    import sys, time
    from pyspark import SparkContext
    sc = SparkContext()
    time.sleep(float(sys.argv[1]))
    sc.stop()
    """
)


def master_apps(webui: str) -> list[dict]:
    with urllib.request.urlopen(f"{webui}/json/", timeout=5) as reply:
        data = json.loads(reply.read())
    return data.get("activeapps", [])


@pytest.mark.integration
def test_another_users_application_with_the_runs_tag_is_neither_adopted_nor_killed(standalone, tmp_path, monkeypatch):  # noqa: F811
    master, webui = standalone
    run_dir = str(tmp_path / "run")  # both teams' default run directory: the same tag
    tag = run_tag(run_dir)
    script = tmp_path / "foreign.py"
    script.write_text(FOREIGN_APP)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    # the master lists the driver JVM's user.name: what a driver run by another OS user says
    command = [
        str(SPARK_BIN / "spark-submit"), "--master", master, "--name", f"their training [{tag}]",
        "--driver-java-options", f"-Duser.name={OTHER_USER}",
        "--conf", "spark.cores.max=1", "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=512m",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1", str(script), "300",
    ]  # fmt: skip
    with open(tmp_path / "foreign.log", "wb") as out:
        foreign = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        theirs = wait_for(
            lambda: next((a for a in master_apps(webui) if f"[{tag}]" in a["name"]), None), 90, "their application"
        )
        assert theirs["user"] == OTHER_USER
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_SHARED", json.dumps({"conn_type": "spark", "host": master}))
        monkeypatch.setenv(MASTER_WEBUI_ENV, webui)
        monkeypatch.setenv("AIRFLOW_TFOS_LOCAL_DIR", str(tmp_path / "tracker"))
        hook = TFoSHook(spark_conn_id="spark_shared")
        rundir = RunDir(run_dir)
        spec = train_op(run_dir).build_spec(code=False)
        run = ApplicationRun(run_dir=run_dir, spec=spec, hook=hook, run_dir_contents=rundir, log=log)

        rundir.write_spec(spec.to_json())  # a spec.json that matches ours: their application is not adopted
        assert run.live_on_spec() == []
        os.remove(os.path.join(run_dir, "spec.json"))  # no spec.json: their application is not killed either
        assert run.live_on_spec() == []
        assert hook.find_live(tag) == []
        with pytest.raises(LocalBackendError, match=f"runs as user '{OTHER_USER}'"):
            hook.kill(theirs["id"])
        shutdown = TFoSShutdownClusterOperator(
            task_id="stop", run_dir=run_dir, application_id=theirs["id"], spark_conn_id="spark_shared",
            grace_secs=0.1, poll_interval=0.05,
        )  # fmt: skip
        with pytest.raises(RunConfigError, match="is not an application of"):
            shutdown.execute(make_context("stop"))
        assert rundir.stop_requested() is None
        assert [a["state"] for a in master_apps(webui) if a["id"] == theirs["id"]] in (["RUNNING"], ["WAITING"])
        assert foreign.poll() is None
    finally:
        foreign.terminate()
        try:
            foreign.wait(20)
        except subprocess.TimeoutExpired:
            foreign.kill()
            foreign.wait(5)


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


def test_with_kerberos_and_a_ticket_cache_the_application_user_is_its_principals(kdc, tmp_path, monkeypatch):
    ccache = f"FILE:{tmp_path / 'ccache'}"
    kdc.kinit("alice", kdc.alice_keytab, ccache)
    monkeypatch.setenv("KRB5CCNAME", ccache)
    assert yarn_hook(monkeypatch, login="someone", auth="kerberos").application_user == "alice"
