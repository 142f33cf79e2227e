"""A user's DAG trains on the multi-host cluster: ``airflow dags test`` runs on the driver host, and its
``TFoSTrainOperator`` submits through ``spark://`` to the standalone master there, with the run directory
on the emulated HDFS (namenode and datanode on two other hosts)."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage.webhdfs_client import clear_cached_storages
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV
from tests.conftest import REPO
from tests.multihost.conftest import wait_no_node_processes
from tests.multihost.user_code import TRAINING

pytestmark = pytest.mark.integration

DAG = textwrap.dedent(
    """
    import os
    from datetime import datetime

    from airflow.sdk import DAG

    from airflow_tfos.operators import TFoSTrainOperator

    with DAG("multihost_train", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
        TFoSTrainOperator(
            task_id="train",
            train_fn="my_training:main",
            args={"epochs": 2, "every": 10},
            num_workers=3,
            data={"format": "parquet", "path": os.environ["MH_DATA"]},
            feed={"features": ["x"], "label": "y", "batch_size": 16},
            spark_conn_id="spark_hosts",
            webhdfs_conn_id="webhdfs_hosts",
            executor_memory="640m",
            conf={"spark.driver.host": os.environ["SPARK_LOCAL_IP"], "spark.ui.enabled": "false",
                  "spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"]},
            stall_timeout=30,
            poll_interval=1.0,
        )
    """
)


def test_a_train_dag_runs_on_the_hosts_through_spark_standalone(lab, linear_data, tmp_path, monkeypatch):
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "multihost_dag.py").write_text(DAG)
    (dags / "my_training.py").write_text(TRAINING)  # the user's module beside the DAG, shipped by the hook
    home = tmp_path / "airflow"
    namenode = lab.hdfs.url.split("//", 1)[1]
    env = lab.env(
        "driver",
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        AIRFLOW_CONN_SPARK_HOSTS=json.dumps({"conn_type": "spark", "host": lab.master}),
        AIRFLOW_CONN_WEBHDFS_HOSTS=json.dumps(
            {
                "conn_type": "webhdfs",
                "host": namenode.split(":")[0],
                "port": int(namenode.split(":")[1]),
                "login": "airflow",
            }
        ),
        AIRFLOW_TFOS_RUN_DIR_BASE=f"{lab.hdfs.uri('/dag-runs')}",
        AIRFLOW_TFOS_LOCAL_DIR=str(tmp_path / "tfos-local"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        MH_DATA=linear_data,
    )
    env.pop(WEBHDFS_ENV, None)  # the Airflow side reaches HDFS through its connection only
    migrated = lab.hosts.run("driver", [sys.executable, "-m", "airflow", "db", "migrate"], env=env, timeout=300)
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    done = lab.hosts.run(
        "driver", [sys.executable, "-m", "airflow", "dags", "test", "multihost_train", "2026-11-20"],
        env=env, timeout=420, cwd=str(REPO),
    )  # fmt: skip
    out = done.stdout + done.stderr
    (lab.hosts.log_dir / "dags-test.out").write_text(out)
    assert done.returncode == 0 and "state=failed" not in out, out[-6000:]

    base = lab.hdfs.local_path("/dag-runs")
    [run_path] = {os.path.dirname(d) for d, _, files in os.walk(base) if d.endswith("/export") and "_SUCCESS" in files}
    assert run_path.startswith(os.path.join(base, "multihost_train", "train")), run_path

    monkeypatch.setenv(WEBHDFS_ENV, lab.hdfs.config(user="airflow").to_json())  # the run directory's owner

    def look():
        clear_cached_storages()
        rundir = RunDir(lab.hdfs.uri(run_path[len(lab.hdfs.root) :]))
        return rundir.export_success(), rundir.events("tf_config"), rundir.read_status()

    success, configs, status = lab.hosts.call_in("driver", look)
    assert status["state"] == "SUCCEEDED" and success["step"] == status["step"] > 0
    hosts = {lab.address(h) for h in lab.workers}
    for config in configs:
        addresses = {a.rsplit(":", 1)[0] for job in config["tf_config"]["cluster"].values() for a in job}
        assert len(addresses) == 3 and addresses <= hosts, addresses
    assert lab.master.startswith("spark://") and lab.address("driver") in lab.master
    wait_no_node_processes(lab, lab.workers)
