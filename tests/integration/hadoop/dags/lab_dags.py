"""The DAG of tests/integration/hadoop/test_train_dag.py: a user's training (``lab_training.py``, beside this
file) on YARN, InputMode.TENSORFLOW from Parquet on HDFS, with the packed environment named by the operator, the
training followed by the deferrable trigger, then by the YARN sensor and the export sensor.

Connections: only ``tfos_spark`` (host ``yarn``); the ResourceManager and the NameNode come from
``HADOOP_CONF_DIR``. ``LAB_PACKED_ENV`` names the packed environment on HDFS, ``LAB_DATA`` the Parquet folder.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_tfos.operators import TFoSTrainOperator
from airflow_tfos.sensors import TFoSCheckpointSensor, YarnApplicationSensor

RESULT = "ti.xcom_pull(task_ids='train')"

with DAG("tfos_lab_train", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    train = TFoSTrainOperator(
        task_id="train",
        spark_conn_id="tfos_spark",
        train_fn="lab_training:train",
        input_mode="TENSORFLOW",
        args={
            "data": os.environ.get("LAB_DATA", "hdfs:///lab/linear"),
            "batch_size": 20,
            "steps_per_epoch": 20,
            "epochs": 3,
            "checkpoint_every": 20,
        },
        num_nodes=2,
        executor_memory="768m",
        packed_env=os.environ.get("LAB_PACKED_ENV"),
        deferrable=True,
        poll_interval=2,
    )
    finished = YarnApplicationSensor(
        task_id="finished",
        application_id="{{ " + RESULT + "['application_id'] }}",
        poke_interval=2,
        timeout=120,
    )
    exported = TFoSCheckpointSensor(
        task_id="exported",
        run_dir="{{ " + RESULT + "['run_dir'] }}",
        export=True,
        poke_interval=2,
        timeout=120,
    )
    train >> finished >> exported
