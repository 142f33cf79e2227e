"""The DAG run by tests/integration/airflow/test_dag_runs_kerberos.py: training submitted to YARN (the
ResourceManager emulator and a stand-in spark-submit that starts the real driver) with its run directory on HDFS
(the WebHDFS emulator).

The run directory is the default one (``[tfos] run_dir_base`` comes from ``AIRFLOW_TFOS_RUN_DIR_BASE``, an
``hdfs://`` URI), so a rerun of the same DAG run finds the same directory. The connections come from
``AIRFLOW_CONN_*`` variables the test sets.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_tfos.operators import TFoSTrainOperator
from airflow_tfos.sensors import TFoSCheckpointSensor

WEBHDFS_CONN = "webhdfs_tfos_em"
CONNS = {"spark_conn_id": "spark_tfos_em", "yarn_conn_id": "yarn_tfos_em", "webhdfs_conn_id": WEBHDFS_CONN}
CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.executorEnv.PYTHONPATH": os.environ.get("PYTHONPATH", ""),
}
if os.environ.get("TFOS_EM_EXECUTOR_KRB5CCNAME"):  # a Kerberized run: executors get no ticket cache
    CONF["spark.executorEnv.KRB5CCNAME"] = os.environ["TFOS_EM_EXECUTOR_KRB5CCNAME"]

with DAG("tfos_em_train", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    train = TFoSTrainOperator(
        task_id="train",
        train_fn="tests.support.programs:recoverable_training",
        # 10 steps per epoch, a checkpoint every 5; progress files are local-only, so off on HDFS
        args={"steps_per_epoch": 10, "epochs": 1, "every": 5, "progress": False},
        num_workers=2,
        conf=CONF,
        **CONNS,
        executor_memory="768m",
        poll_interval=1.0,
        deferrable=os.environ.get("TFOS_EM_DEFERRABLE") == "1",
    )
    exported = TFoSCheckpointSensor(
        task_id="exported",
        run_dir="{{ ti.xcom_pull(task_ids='train', key='run_dir') }}",
        export=True,
        webhdfs_conn_id=WEBHDFS_CONN,
        poke_interval=1,
        timeout=60,
    )
    train >> exported
