"""DAGs run by the failure drills (tests/drills) on a real Airflow stack.

Neither sets ``run_dir``: every DAG run trains in its default run directory, derived from the DAG,
the task and the run's logical date (``[tfos] run_dir_base``), as a nightly retraining DAG would.
What differs between test sessions (data, connection) comes from environment variables.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_tfos.operators import TFoSInferenceOperator, TFoSPublishModelOperator, TFoSTrainOperator
from airflow_tfos.operators.publish import model_asset
from airflow_tfos.sensors import TFoSCheckpointSensor

DATA = {"format": "parquet", "path": os.environ.get("TFOS_DRILL_DATA", "/nonexistent/tfos-drill-data")}
REGISTRY = os.environ.get("TFOS_DRILL_REGISTRY", "/nonexistent/tfos-drill-registry")
SCORES = os.environ.get("TFOS_DRILL_SCORES", "/nonexistent/tfos-drill-scores")
FEED = {"features": ["x"], "label": "y", "batch_size": 30}
SPARK_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    # the Spark UI is on, so the task has an application link to show
    "spark.ui.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    "spark.executorEnv.PYTHONPATH": os.environ.get("PYTHONPATH", ""),
    "spark.executorEnv.TF_CPP_MIN_LOG_LEVEL": "2",
}
COMMON = {
    "train_fn": "tests.support.programs:spec_training",
    "num_workers": 2,
    "data": DATA,
    "feed": FEED,
    "spark_conn_id": "spark_tfos_drill",
    "conf": SPARK_CONF,
    "executor_memory": "768m",
    "poll_interval": 1.0,
    "deferrable": True,
}
START = datetime(2026, 1, 1)
DEFAULT_ARGS = {"retries": 1, "retry_delay": timedelta(seconds=2)}

# 600 rows over 2 nodes, batches of 30: 10 steps per epoch; 6 epochs = 60 steps, a checkpoint every 5.
with DAG(
    "tfos_drill",
    schedule=None,
    start_date=START,
    catchup=False,
    is_paused_upon_creation=False,
    default_args=DEFAULT_ARGS,
    tags=["tfos", "drills"],
):
    TFoSTrainOperator(
        task_id="train",
        args={"epochs": 6, "every": 5, "sleep": float(os.environ.get("TFOS_DRILL_SLEEP", "0.3"))},
        **COMMON,
    )

# Long enough to be stopped while it trains: one node, 20 steps per epoch, 40 epochs = 800 steps.
with DAG(
    "tfos_drill_long",
    schedule=None,
    start_date=START,
    catchup=False,
    is_paused_upon_creation=False,
    default_args=DEFAULT_ARGS,
    tags=["tfos", "drills"],
):
    TFoSTrainOperator(
        task_id="train",
        args={"epochs": 40, "every": 5, "sleep": 0.3},
        **{**COMMON, "num_workers": 1, "spark_conn_id": "spark_tfos_drill_one"},
    )

# TensorBoard on, waited for in the worker (a deferred task cannot update its links), then published by loss.
with DAG(
    "tfos_drill_links",
    schedule=None,
    start_date=START,
    catchup=False,
    is_paused_upon_creation=False,
    tags=["tfos", "drills"],
):
    train = TFoSTrainOperator(
        task_id="train",
        args={"epochs": 2, "every": 10, "sleep": 0.3},
        tensorboard=True,
        **{**COMMON, "num_workers": 1, "spark_conn_id": "spark_tfos_drill_one", "deferrable": False},
    )
    publish = TFoSPublishModelOperator(
        task_id="publish",
        run_dir="{{ ti.xcom_pull(task_ids='train')['run_dir'] }}",
        registry=REGISTRY,
        metric="loss",
        higher_is_better=False,
    )
    train >> publish

# Publishes the export of the run directory given in the run's conf (the drill's rejected candidate).
with DAG(
    "tfos_drill_publish",
    schedule=None,
    start_date=START,
    catchup=False,
    is_paused_upon_creation=False,
    tags=["tfos", "drills"],
):
    TFoSPublishModelOperator(
        task_id="publish",
        run_dir="{{ dag_run.conf['run_dir'] }}",
        registry=REGISTRY,
        metric="loss",
        higher_is_better=False,
    )

# Scores the drill data with each model put in service, as soon as it is.
with DAG(
    "tfos_drill_scoring",
    schedule=[model_asset(REGISTRY)],
    start_date=START,
    catchup=False,
    is_paused_upon_creation=False,
    tags=["tfos", "drills"],
):
    TFoSInferenceOperator(
        task_id="score",
        model_path="{{ (triggering_asset_events.values() | first | last).extra['model_path'] }}",
        data=DATA,
        features=["x"],
        output_path=SCORES + "/{{ run_id | replace(':', '-') | replace('+', '-') }}",
        num_executors=1,
        spark_conn_id="spark_tfos_drill_one",
        conf=SPARK_CONF,
        executor_memory="768m",
        poll_interval=1.0,
    )

# Waits, deferred to the triggerer, for a checkpoint in a run directory on a Kerberized HDFS: the trigger reads it
# with the webhdfs connection's keytab.
with DAG(
    "tfos_drill_kerberos_sensor",
    schedule=None,
    start_date=START,
    catchup=False,
    is_paused_upon_creation=False,
    tags=["tfos", "drills"],
):
    TFoSCheckpointSensor(
        task_id="wait_for_checkpoint",
        run_dir=os.environ.get("TFOS_DRILL_KRB_RUN_DIR", "/nonexistent/tfos-drill-krb-run"),
        webhdfs_conn_id="webhdfs_tfos_drill_krb",
        min_step=3,
        deferrable=True,
        poke_interval=1.0,
        timeout=600,
    )
