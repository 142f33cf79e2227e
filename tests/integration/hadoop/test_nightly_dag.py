"""The nightly example DAG (``example_dags/example_tfos_nightly.py``, unchanged) on the Hadoop lab: Spark on
Hadoop's own YARN, every file on Hadoop's own HDFS, Airflow for real (``airflow dags test`` / ``tasks test`` on
SQLite).

What the cluster gives, and nothing else: ``HADOOP_CONF_DIR`` and ``SPARK_CONF_DIR`` (the lab's folder: its
``*-site.xml`` and a ``spark-defaults.conf`` naming Spark's jars and the packed environment on HDFS), and a
``spark`` connection whose host is ``yarn``; no ``yarn`` or ``webhdfs`` connection. The containers' Python has
the runtime's packages but not airflow_tfos (:mod:`airflow_tfos.testing.packed_env`): the driver and the TF
nodes import the project from the runtime zip the operator ships.

One story, in order (each step needs the one before): the night starts (data by Spark as Parquet on HDFS) and is
interrupted while training runs on YARN (the Airflow process is killed, as a worker that dies); the night run
again attaches its train task to the live application instead of submitting a second, then runs the night's other
tasks (the export, the gate, publish into the registry, batch inference); the finished training run again
submits nothing. Hadoop's own client reads back what was written: the data, the run directory (checkpoints, export,
report), the registry, the predictions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from airflow_tfos.hooks.run_dir import default_run_dir, run_tag
from tests.conftest import REPO
from tests.integration.hadoop.airflow_lab import AirflowOnLab, ended_well, tail

pytestmark = [pytest.mark.real_hadoop, pytest.mark.timeout(1500)]

DAG_ID, DAY = "tfos_nightly_digits", "2026-11-21"
BASE = "/tfos-example"
RUNS = "/tfos-runs"


@pytest.fixture(scope="module")
def night(spark_on_lab, hadoop_lab, tmp_path_factory) -> AirflowOnLab:
    home = tmp_path_factory.mktemp("airflow-on-yarn")
    return AirflowOnLab.start(
        spark_on_lab,
        hadoop_lab,
        home,
        REPO / "example_dags",
        AIRFLOW__TFOS__RUN_DIR_BASE=f"hdfs://{RUNS}",
        TFOS_EXAMPLE_BASE=f"hdfs://{BASE}",
    )


def test_a_night_on_yarn_survives_its_worker_and_a_rerun_submits_nothing(night, hadoop_lab):
    timings: dict[str, float] = {}
    run_dir = default_run_dir(f"hdfs://{RUNS}", DAG_ID, "train", datetime(2026, 11, 21, tzinfo=UTC), "")
    tag = run_tag(run_dir)
    known = {a["id"] for a in night.apps()}

    # 1. the night starts; its worker dies while the TF nodes train on YARN
    started = time.monotonic()
    first = subprocess.Popen(
        [sys.executable, "-m", "airflow", "dags", "test", DAG_ID, DAY],
        env=night.env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        training = night.wait_for_app(tag, "RUNNING", within=420)
        # the task pushes the application's link before it defers, which may come after the RM says RUNNING
        link = night.link(DAG_ID, "train", "SparkApplicationLink", within=60)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    timings["until_training_s"] = time.monotonic() - started
    # while it runs, the Spark application link leads to the application's UI through the ResourceManager's proxy
    assert link == training["trackingUrl"] and f"/proxy/{training['id']}" in link, (link, training["trackingUrl"])

    # 2. the night run again (its data is there: marked done): the train task finds the live application by its
    # tag and follows it, no second submit; then the night's other tasks run, in order: the export, the gate, the
    # registry, the batch inference
    started = time.monotonic()
    again = night.airflow("dags", "test", DAG_ID, DAY, "--mark-success-pattern", "^prepare_data$")
    timings["rest_of_night_s"] = time.monotonic() - started
    assert ended_well(again), tail(again)
    assert [a["id"] for a in night.apps_tagged(tag)] == [training["id"]]
    assert f"{training['id']}" in again.stdout + again.stderr
    finished = night.apps_tagged(tag)[0]
    assert (finished["state"], finished["finalStatus"]) == ("FINISHED", "SUCCEEDED"), finished["diagnostics"]

    new = [a for a in night.apps() if a["id"] not in known]
    assert all((a["state"], a["finalStatus"]) == ("FINISHED", "SUCCEEDED") for a in new), new
    # every container ran in a NodeManager of the lab (the application master's node is one of them)
    assert {a["amHostHttpAddress"] for a in new} <= night.node_addresses()
    names = sorted(a["name"].split(" ")[0] for a in new)
    assert names == ["prepare-digits-2026-11-21", "tfos", "tfos"]  # the data, the training, the batch inference

    # 4. what is on HDFS, read by Hadoop's own client
    data, predictions = f"{BASE}/data/{DAG_ID}/{DAY}", f"{BASE}/predictions/{DAG_ID}/{DAY}"
    run_path = run_dir.split("hdfs://", 1)[1]
    found = hadoop_lab.inspect(data, run_path, f"{BASE}/models/digits/current.json", predictions)
    parquet = [e["path"] for e in found[data] if e["path"].endswith(".parquet")]
    assert {p.split("/")[-2] for p in parquet} == {"train", "test", "score"}
    run = {e["path"]: e for e in found[run_path]}
    assert run[run_path]["permission"] == "700"
    assert f"{run_path}/export/_SUCCESS" in run and f"{run_path}/report/report.html" in run
    status = json.loads(run[f"{run_path}/status.json"]["text"])
    assert (status["state"], status["application_id"]) == ("SUCCEEDED", training["id"])
    checkpoints = [p for p in run if p.startswith(f"{run_path}/checkpoints/") and p.endswith(".index")]
    assert checkpoints, sorted(run)
    (current,) = found[f"{BASE}/models/digits/current.json"]
    in_service = json.loads(current["text"])
    assert (in_service["version"], in_service["source_run_dir"]) == ("20261121T000000", run_dir)
    assert in_service["metrics"]["test_accuracy"] >= 0.8
    model = in_service["model_path"].split("hdfs://", 1)[1]
    assert any(e["path"] == f"{model}/saved_model.pb" for e in hadoop_lab.inspect(model)[model])
    assert any(e["path"].endswith("_SUCCESS") for e in found[predictions])

    # 5. the finished training run again: the real RM's FINISHED application found by its tag, nothing submitted
    # (a scoring run again submits nothing either: the local demo's rerun, tests/integration/airflow)
    before = {a["id"] for a in night.apps()}
    rerun = night.airflow("tasks", "test", DAG_ID, "train", DAY)
    assert ended_well(rerun), tail(rerun)
    assert {a["id"] for a in night.apps()} == before
    hadoop_lab.timings.update({f"nightly_{k}": round(v, 1) for k, v in timings.items()})  # shown at the end
