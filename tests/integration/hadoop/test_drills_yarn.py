"""Failure drills on Hadoop's own YARN and HDFS (the Hadoop lab), through Airflow for real (``airflow dags test``
on SQLite), with a user's DAGs (``dags/lab_dags.py``) and their training module beside them, shipped as a zip and
imported by the TF nodes in YARN's containers (InputMode.TENSORFLOW, each node reading its Parquet files straight
from HDFS; the packed environment named by the operator; the deferrable trigger, the YARN sensor and the export
sensor reading the real ResourceManager and NameNode).

- The user's training run takes three faults in turn: a DataNode stopped (replication 2) while checkpoints land; one
  executor's container killed through the ResourceManager (``.../containers/<id>/signal/FORCEFUL_SHUTDOWN``,
  found through the RM's REST API): the run resumes from the HDFS checkpoint, at most one checkpoint interval
  redone; then, in the new TF cluster, worker:0 stops its executor's JVM (SIGSTOP) and both nodes train on to the
  end: the run ends within 60 s of its last node's end, not when Spark's heartbeat times out. Then what it wrote
  is read back by Hadoop's own client, the application's link leads to the history server, and its OpenLineage
  output names the export on HDFS.
- A training run killed through the ResourceManager (``PUT .../state KILLED``): the task fails with that cause
  first, and no process of the application is left.
- A lifecycle whose launch does not serve within ``ready_timeout``: the launch kills its application through the
  ResourceManager and fails, the shutdown still runs, and no process of the application is left.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_tfos.hooks.run_dir import default_run_dir, run_tag
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage import storage_for
from tests.conftest import REPO
from tests.integration.hadoop.airflow_lab import AirflowOnLab, ended_well, tail
from tests.integration.hadoop.conftest import LAB_RUNS, hadoop

pytestmark = [pytest.mark.real_hadoop, pytest.mark.timeout(900)]

DAG_ID, DAY = "tfos_lab_train", "2026-11-21"
#: The end of the run, from its last TF node's end, that the frozen-executor drill must stay under.
END_WITHIN_SECS = 60


def rundir_of(hadoop_lab, dag_id: str, task_id: str) -> tuple[RunDir, str, str]:
    """The run directory of ``dag_id``'s ``task_id`` on DAY (read through the lab's WebHDFS), the run's tag and
    its ``hdfs://`` URI."""
    run_dir = default_run_dir(f"hdfs://{LAB_RUNS}", dag_id, task_id, datetime(2026, 11, 21, tzinfo=UTC), "")
    path = run_dir.split("hdfs://", 1)[1]
    return RunDir(hadoop_lab.uri(path), storage=storage_for(hadoop_lab.uri(path))), run_tag(run_dir), run_dir


def rm_call(lab: AirflowOnLab, method: str, path: str, body: dict | None = None) -> tuple[int, str]:
    """A call to the ResourceManager's REST API as this user (simple authentication: ``user.name``): its status
    and body."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"{lab.rm_web}{path}?user.name={getpass.getuser()}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return reply.status, reply.read().decode(errors="replace")


def executor_containers(lab: AirflowOnLab, app_id: str) -> list[str]:
    """The running containers of ``app_id``'s current attempt but its application master's, by the RM's REST API."""
    attempts = lab.get(f"/ws/v1/cluster/apps/{app_id}/appattempts")["appAttempts"]["appAttempt"]
    attempt_id = attempts[-1]["appAttemptId"]
    found = lab.get(f"/ws/v1/cluster/apps/{app_id}/appattempts/{attempt_id}/containers")
    listed = found.get("containers", found)
    listed = listed.get("container", []) if isinstance(listed, dict) else listed
    listed = [listed] if isinstance(listed, dict) else listed
    ids = sorted(c["containerId"] for c in listed if c.get("containerState", "RUNNING") == "RUNNING")
    return [c for c in ids if not c.endswith("_000001")]  # the first container of an attempt is its master


def application_processes(app_id: str) -> dict[int, str]:
    """This user's live processes that run in a container of ``app_id`` (YARN's ``CONTAINER_ID`` in their
    environment, which their children inherit), with their command lines."""
    cluster, number = app_id.split("_")[1:3]
    mark = re.compile(rf"CONTAINER_ID=container_(e\d+_)?{cluster}_{number}_".encode())
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if entry.stat().st_uid != os.getuid() or not mark.search((entry / "environ").read_bytes()):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
        except OSError:
            continue
    return found


def assert_nothing_left(app_id: str, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while (left := application_processes(app_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left == {}, f"processes of {app_id} are left after its DAG run: {left}"


def wait_until(check, within: float, what: str):
    deadline = time.monotonic() + within
    while not (found := check()):
        assert time.monotonic() < deadline, f"timed out after {within:.0f} s waiting for {what}"
        time.sleep(0.5)
    return found


def start_dag(lab: AirflowOnLab, dag_id: str, log: Path) -> subprocess.Popen:
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "airflow", "dags", "test", dag_id, DAY],
            env=lab.env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def finish_dag(dag: subprocess.Popen, log: Path, within: float) -> subprocess.CompletedProcess:
    try:
        dag.wait(within)
    finally:
        if dag.poll() is None:
            os.killpg(dag.pid, signal.SIGKILL)
            dag.wait(30)
    return subprocess.CompletedProcess(dag.args, dag.returncode, log.read_text(errors="replace"), "")


def page(url: str, within: float = 60) -> str:
    """The page at ``url`` once it answers 200 (the history server picks an ended application up within seconds)."""
    deadline = time.monotonic() + within
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                return reply.read().decode(errors="replace")
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def checkpoint_step(rundir: RunDir) -> int:
    latest = rundir.latest_checkpoint()
    return latest.step if latest else 0


def test_drill_a_users_module_trains_on_yarn_through_a_stopped_datanode_a_killed_container_and_a_frozen_executor(
    lab_airflow, hadoop_lab, spark_on_lab, tmp_path
):
    rundir, tag, run_dir = rundir_of(hadoop_lab, DAG_ID, "train")
    log = tmp_path / "dag.log"
    dag = start_dag(lab_airflow, DAG_ID, log)
    timings: dict[str, float] = {}
    datanode_down = None
    try:
        app = lab_airflow.wait_for_app(tag, "RUNNING", within=300)
        first = wait_until(lambda: checkpoint_step(rundir) >= 10 and checkpoint_step(rundir), 300, "a checkpoint")

        # 1. a DataNode stops: checkpoints go on landing on the other one
        assert hadoop.control(hadoop_lab.conf_dir, "stop-datanode 1").startswith("DataNode 1 stopped")
        datanode_down = time.time()
        wait_until(lambda: checkpoint_step(rundir) >= first + 10, 120, "a checkpoint with one DataNode")

        # 2. one executor's container is killed through the ResourceManager: a fresh TF cluster resumes
        (container, *_) = executor_containers(lab_airflow, app["id"])
        step_at_kill = checkpoint_step(rundir)
        status, answer = rm_call(lab_airflow, "POST", f"/ws/v1/cluster/containers/{container}/signal/FORCEFUL_SHUTDOWN")
        killed_at = time.time()
        assert status == 200, answer
        done = finish_dag(dag, log, within=600)
    finally:
        if dag.poll() is None:
            os.killpg(dag.pid, signal.SIGKILL)
        if datanode_down is not None:
            hadoop.control(hadoop_lab.conf_dir, "start-datanode 1")
    assert ended_well(done), tail(done)
    (finished,) = lab_airflow.apps_tagged(tag)
    assert finished["id"] == app["id"] and (finished["state"], finished["finalStatus"]) == ("FINISHED", "SUCCEEDED")

    events = {kind: rundir.events(kind) for kind in ("attempt", "attempt_failed", "restore", "checkpoint")}
    assert [e["attempt"] for e in events["attempt"]] == [0, 1, 2]
    # the DataNode's stop lost no checkpoint: one landed while it was down
    assert any(e["time"] > datanode_down for e in events["checkpoint"] if e.get("attempt", 0) == 0)
    # the container's kill: the second TF cluster restored the checkpoint of the kill (or the one before)
    killed, hung = events["attempt_failed"]
    assert killed["attempt"] == 0 and killed["retrying"], killed
    restored = next(e for e in events["restore"] if e["attempt"] == 1)
    assert 0 <= step_at_kill - restored["step"] <= 10, (step_at_kill, restored)
    timings["resumed_s"] = restored["time"] - killed_at

    # the frozen executor: both nodes trained to step 60 in the second TF cluster, which was cancelled once both had
    # ended; the third restored step 60 and returned, well before Spark's heartbeat timeout
    (freeze,) = rundir.events("drill_freeze")
    (stage_hung,) = rundir.events("stage_hung")
    assert freeze["attempt"] == stage_hung["attempt"] == hung["attempt"] == 1
    assert hung["reason"].startswith("every TF node ended (chief:0, worker:0)"), hung
    assert [e["step"] for e in events["restore"] if e["attempt"] == 2] == [60]
    (dropped,) = [e for e in rundir.events("executors_dropped") if e["attempt"] == 1]
    assert [d["reason"].split(";")[0] for d in dropped["executors"]] == [
        "its TF node worker:0 ended, but the executor does not answer"
    ]
    # The run's end: the driver's final status (the TF cluster's result known, the training over); the application
    # then stops Spark and writes the report before YARN counts it finished (both figures are shown)
    last_node_end = max(stage_hung["ended"].values())
    final = rundir.read_status()
    assert final["state"] == "SUCCEEDED", final
    timings["ended_after_last_node_s"] = final["heartbeat"] - last_node_end
    timings["app_finished_after_last_node_s"] = finished["finishedTime"] / 1000 - last_node_end
    assert 0 < timings["ended_after_last_node_s"] < END_WITHIN_SECS, timings
    assert_nothing_left(app["id"])
    hadoop_lab.timings.update({f"drill_{k}": round(v, 1) for k, v in timings.items()})  # shown at the end

    # what the user's DAG ran and wrote, as Hadoop's own client reads it
    # spark-submit uploaded the user's module and the runtime as zips, and the packed environment the operator named
    assert "user-code-" in done.stdout and "airflow_tfos-runtime-" in done.stdout
    assert f"{lab_airflow.env['LAB_PACKED_ENV']}#environment" in done.stdout
    run_path = run_dir.split("hdfs://", 1)[1]
    found = {e["path"]: e for e in hadoop_lab.inspect(run_path)[run_path]}
    spec = json.loads(found[f"{run_path}/spec.json"]["text"])
    assert spec["code"]["packages"] == ["lab_training"] and spec["input_mode"] == "TENSORFLOW"
    success = json.loads(found[f"{run_path}/export/_SUCCESS"]["text"])
    assert success["spec_hash"] == spec["spec_hash"] and success["step"] == 60  # 3 epochs of 20 steps
    assert success["metrics"]["loss"] < 0.05, success  # the workers found y = x . [2, -3] + 1
    status = json.loads(found[f"{run_path}/status.json"]["text"])
    assert (status["state"], status["application_id"]) == ("SUCCEEDED", app["id"])

    # the ended application's UI: the Spark history server the cluster's spark-defaults.conf names, reading the
    # application's event log on HDFS
    link = lab_airflow.link(DAG_ID, "train", "SparkApplicationLink")
    assert link == f"http://{spark_on_lab.settings['spark.yarn.historyServer.address']}/history/{app['id']}"
    assert app["id"] in page(link)

    # OpenLineage: the training task's COMPLETE event names the export on HDFS
    (complete, *_) = [e for e in lab_airflow.lineage(f"{DAG_ID}.train") if e["eventType"] == "COMPLETE"]
    (output,) = complete["outputs"]
    assert (output["namespace"], output["name"]) == (hadoop_lab.fs_default, f"{run_path}/export")
    assert (output["facets"]["tfosModel"]["specHash"], output["facets"]["tfosModel"]["step"]) == (
        spec["spec_hash"],
        60,
    )
    # ...and the application's Spark settings (the history server's REST API) name that task's run as its parent
    history = spark_on_lab.settings["spark.yarn.historyServer.address"]
    api = f"http://{history}/api/v1/applications/{app['id']}"
    attempt = json.loads(page(api))["attempts"][-1].get("attemptId")  # cluster mode on YARN: attempt "1"
    environment = json.loads(page(f"{api}/{attempt}/environment" if attempt else f"{api}/environment"))
    properties = dict(environment["sparkProperties"])
    assert properties["spark.openlineage.parentJobName"] == f"{DAG_ID}.train"
    assert properties["spark.openlineage.parentRunId"] == complete["run"]["runId"]
    # (a finished run's task run again submits nothing on YARN: test_nightly_dag.py)


def test_drill_a_training_killed_through_the_resource_manager_fails_its_task_with_that_cause(
    lab_airflow, hadoop_lab, tmp_path
):
    _, tag, _ = rundir_of(hadoop_lab, "tfos_lab_killed", "train")
    log = tmp_path / "dag.log"
    dag = start_dag(lab_airflow, "tfos_lab_killed", log)
    try:
        app = lab_airflow.wait_for_app(tag, "RUNNING", within=300)
        status, _ = rm_call(lab_airflow, "PUT", f"/ws/v1/cluster/apps/{app['id']}/state", {"state": "KILLED"})
        assert status in (200, 202)
        done = finish_dag(dag, log, within=300)
    finally:
        if dag.poll() is None:
            os.killpg(dag.pid, signal.SIGKILL)
    assert not ended_well(done)
    (killed,) = lab_airflow.apps_tagged(tag)
    assert (killed["state"], killed["finalStatus"]) == ("KILLED", "KILLED")
    # the task's error starts with its cause: the application killed, by whom, as YARN says it
    errors = [line for line in done.stdout.splitlines() if "AirflowException: " in line]
    assert errors, tail(done)
    cause = errors[-1].split("AirflowException: ", 1)[1]
    assert cause.startswith(f"application {app['id']} was killed by user {getpass.getuser()} ("), cause
    assert_nothing_left(app["id"])


def test_drill_a_launch_that_does_not_serve_in_time_leaves_nothing_running_on_yarn(lab_airflow, hadoop_lab, tmp_path):
    rundir, tag, _ = rundir_of(hadoop_lab, "tfos_lab_launch_fails", "launch")
    log = tmp_path / "dag.log"
    done = finish_dag(start_dag(lab_airflow, "tfos_lab_launch_fails", log), log, within=400)
    out = done.stdout
    assert "state=failed" in out, tail(done)  # the launch failed (the run's one leaf, the shutdown, did not)
    assert "(ready_timeout): it was stopped" in out, tail(done)
    assert "UndefinedError" not in out  # the shutdown needs no XCom of the launch to render
    assert "nothing to stop" in out  # it ran (all_done) and found the application already gone
    (app,) = lab_airflow.apps_tagged(tag)
    assert (app["state"], app["finalStatus"]) == ("KILLED", "KILLED"), app
    (failed,) = rundir.events("launch_failed")
    assert failed["application_id"] == app["id"]
    assert_nothing_left(app["id"])
