"""The DAGs of tests/integration/hadoop/test_drills_yarn.py: a user's training
(``lab_training.py``, beside this file) on YARN, InputMode.TENSORFLOW from Parquet on HDFS, with the packed
environment named by the operator, the training followed by the deferrable trigger, then by the YARN sensor and
the export sensor (``tfos_lab_train``, slowed down for the failure drills, with an executor that freezes in its
second attempt); a training long enough to be killed (``tfos_lab_killed``); and a lifecycle whose launch never
serves (``tfos_lab_launch_fails``).

Connections: only ``tfos_spark`` (host ``yarn``); the ResourceManager and the NameNode come from
``HADOOP_CONF_DIR``. ``LAB_PACKED_ENV`` names the packed environment on HDFS, ``LAB_DATA`` the Parquet folder.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_tfos.operators import (
    TFoSFeedOperator,
    TFoSLaunchClusterOperator,
    TFoSShutdownClusterOperator,
    TFoSTrainOperator,
)
from airflow_tfos.sensors import TFoSCheckpointSensor, YarnApplicationSensor

RESULT = "ti.xcom_pull(task_ids='train')"
DATA = os.environ.get("LAB_DATA", "hdfs:///lab/linear")
ON_LAB = {"spark_conn_id": "tfos_spark", "executor_memory": "768m", "packed_env": os.environ.get("LAB_PACKED_ENV")}


def lab_train(**args) -> TFoSTrainOperator:
    """The user's training on two workers, ``args`` over the defaults (20 rows a batch, 20 steps an epoch)."""
    return TFoSTrainOperator(
        task_id="train",
        train_fn="lab_training:train",
        input_mode="TENSORFLOW",
        args={"data": DATA, "batch_size": 20, "steps_per_epoch": 20, **args},
        num_workers=2,
        deferrable=True,
        poll_interval=2,
        **ON_LAB,
    )


with DAG("tfos_lab_train", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # 60 steps of at least 0.2 s, a checkpoint every 10: the test stops a DataNode and kills a container in the
    # first TF cluster; in the second, worker:0 stops its executor's JVM at step 50 and both train on to step 60
    train = lab_train(
        epochs=3, checkpoint_every=10, step_secs=0.2, freeze={"attempt": 1, "node": "worker:0", "step": 50}
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

with DAG("tfos_lab_killed", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    lab_train(epochs=40, checkpoint_every=10, step_secs=0.3)  # long: the test kills it through the RM

with DAG("tfos_lab_launch_fails", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    # the application cannot serve within ready_timeout: its TF nodes first train on ``data`` (here they sleep),
    # so the launch kills it through the ResourceManager and fails; the feed never runs, and the shutdown
    # (all_done) finds the launch's run by launch_task_id, with no XCom to render
    launch = TFoSLaunchClusterOperator(
        task_id="launch",
        train_fn="lab_training:sleep_long",
        num_workers=2,
        input_mode="TENSORFLOW",
        data={"format": "parquet", "path": DATA},
        ready_timeout=30,
        poll_interval=1.0,
        **ON_LAB,
    )
    feed = TFoSFeedOperator(task_id="feed", launch_task_id="launch", spark_conn_id="tfos_spark", poll_interval=1.0)
    shutdown = TFoSShutdownClusterOperator(
        task_id="shutdown",
        launch_task_id="launch",
        grace_secs=30,
        poll_interval=1.0,
        trigger_rule="all_done",
        spark_conn_id="tfos_spark",
    )
    launch >> feed >> shutdown
