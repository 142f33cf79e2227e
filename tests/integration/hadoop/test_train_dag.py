"""A user's DAG on the Hadoop lab (``dags/lab_dags.py``): their training module beside it, shipped as a zip and
imported by the TF nodes in YARN's containers; InputMode.TENSORFLOW, each node reading its Parquet files straight
from HDFS; the packed environment named by the operator (``packed_env=``); the deferrable trigger, the YARN
sensor and the export sensor reading the real ResourceManager and NameNode. Then a rerun submits nothing.
"""

from __future__ import annotations

import io
import json
import time
import urllib.request
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tfos.hooks.run_dir import default_run_dir, run_tag
from airflow_tfos.shared.storage import storage_for
from tests.integration.hadoop.airflow_lab import AirflowOnLab, ended_well, tail

pytestmark = [pytest.mark.real_hadoop, pytest.mark.timeout(900)]

DAG_ID, DAY = "tfos_lab_train", "2026-11-21"
RUNS = "/lab-runs"
#: y = x . [2, -3] + 1: what the two workers must find
WEIGHTS, BIAS = np.array([2.0, -3.0], dtype="float32"), 1.0


def write_parquet(hadoop_lab, folder: str, files: int = 2, rows: int = 400) -> None:
    """``files`` Parquet files of ``rows`` rows each on the lab's HDFS, through the project's WebHDFS storage."""
    rng = np.random.default_rng(11)
    storage = storage_for(hadoop_lab.uri(folder))
    for index in range(files):
        x = rng.uniform(-1, 1, size=(rows, 2)).astype("float32")
        table = pa.table({"x": pa.array(x.tolist(), type=pa.list_(pa.float32())), "y": x @ WEIGHTS + BIAS})
        out = io.BytesIO()
        pq.write_table(table, out)
        storage.write_bytes(hadoop_lab.uri(f"{folder}/part-{index}.parquet"), out.getvalue())


@pytest.fixture(scope="module")
def lab_airflow(spark_on_lab, hadoop_lab, tmp_path_factory) -> AirflowOnLab:
    data = f"/lab/linear-{uuid.uuid4().hex[:8]}"
    write_parquet(hadoop_lab, data)
    archive = spark_on_lab.settings["spark.yarn.dist.archives"].split("#", 1)[0]
    home = tmp_path_factory.mktemp("airflow-lab-dag")
    return AirflowOnLab.start(
        spark_on_lab,
        hadoop_lab,
        home,
        Path(__file__).parent / "dags",
        AIRFLOW__TFOS__RUN_DIR_BASE=f"hdfs://{RUNS}",
        LAB_DATA=f"hdfs://{data}",
        LAB_PACKED_ENV=archive,
        # the cluster has no default Python environment: the operator names it
        SPARK_CONF_DIR=str(spark_on_lab.conf_dir_without_env(home / "spark-conf")),
    )


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


def test_a_users_module_trains_on_yarn_from_hdfs_files_and_a_rerun_submits_nothing(
    lab_airflow, hadoop_lab, spark_on_lab
):
    run_dir = default_run_dir(f"hdfs://{RUNS}", DAG_ID, "train", datetime(2026, 11, 21, tzinfo=UTC), "")
    tag = run_tag(run_dir)

    first = lab_airflow.airflow("dags", "test", DAG_ID, DAY)
    assert ended_well(first), tail(first)
    (app,) = lab_airflow.apps_tagged(tag)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app["diagnostics"]
    assert app["amHostHttpAddress"] in lab_airflow.node_addresses()
    log = first.stdout + first.stderr
    # spark-submit uploaded the user's module and the runtime as zips, and the packed environment the operator named
    assert "user-code-" in log and "airflow_tfos-runtime-" in log
    assert f"{lab_airflow.env['LAB_PACKED_ENV']}#environment" in log

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

    again = lab_airflow.airflow("dags", "test", DAG_ID, DAY)
    assert ended_well(again), tail(again)
    assert [a["id"] for a in lab_airflow.apps_tagged(tag)] == [app["id"]]
