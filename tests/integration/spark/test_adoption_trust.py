"""Which applications a run adopts or kills on a shared standalone master: a real master (the fixture of
test_lease_standalone) and a real application of another user with the run's tag, which is neither adopted
nor killed. The other adoption checks are in tests/unit/airflow_tfos/operators/test_run_adoption_trust.py."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import textwrap
import urllib.request

import pytest

from airflow_tfos.hooks.backends.standalone import MASTER_WEBUI_ENV
from airflow_tfos.hooks.errors import LocalBackendError, RunConfigError
from airflow_tfos.hooks.run_dir import run_tag
from airflow_tfos.hooks.tfos import TFoSHook
from airflow_tfos.operators import TFoSShutdownClusterOperator
from airflow_tfos.operators.run import ApplicationRun
from airflow_tfos.shared.rundir import RunDir
from tests.conftest import wait_for
from tests.integration.spark.test_lease_standalone import SPARK_BIN, standalone  # noqa: F401 (the master fixture)
from tests.support.fakes import make_context
from tests.unit.airflow_tfos.test_operators import train_op

log = logging.getLogger(__name__)

OTHER_USER = "otherteam"


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
