"""The nightly training as separate lifecycle tasks, each visible and rerunnable on its own.

    prepare_data     Spark job: the day's data (as in the nightly DAG)
    launch           starts the training application; returns once its TF cluster takes feed requests
    feed             one feed: the day's training data; waits until it is trained on
    checkpointed     waits for a published checkpoint of at least 20 steps (never a half-written one)
    shutdown         graceful stop, then kill after a grace; runs whatever happened before (all_done), and
                     finds the launch task's run without its XCom
    app_finished     the application ended FINISHED; fails at once with the diagnostics on FAILED/KILLED
    publish          copies the export (in the launch's run directory) into the registry; in service if
                     not worse than the model there
    batch_inference  scores the day's data with the model in service

Settings as in example_tfos_nightly.py (``TFOS_EXAMPLE_BASE``, the ``tfos_spark`` connection). The part
between the START and END markers is docs/airflow.md's lifecycle example, verbatim (a test compares them).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

from airflow_tfos.operators import (
    TFoSFeedOperator,
    TFoSInferenceOperator,
    TFoSLaunchClusterOperator,
    TFoSPublishModelOperator,
    TFoSShutdownClusterOperator,
)
from airflow_tfos.sensors import TFoSCheckpointSensor, YarnApplicationSensor

BASE = os.environ.get("TFOS_EXAMPLE_BASE") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "tfos-example"
)
DATA = f"{BASE}/data/tfos_lifecycle_digits/{{{{ ds }}}}"
REGISTRY = f"{BASE}/models/digits-lifecycle"
PREDICTIONS = f"{BASE}/predictions/tfos_lifecycle_digits/{{{{ ds }}}}"
SPARK_CONN = "tfos_spark"

with DAG(
    dag_id="tfos_lifecycle_digits",
    description="Launch, feed, watch checkpoints, shut down, publish, score: the training as separate tasks",
    schedule=None,
    start_date=datetime(2026, 11, 1),
    catchup=False,
    tags=["airflow-tfos", "example"],
) as dag:
    prepare_data = SparkSubmitOperator(
        task_id="prepare_data",
        conn_id=SPARK_CONN,
        application=str(Path(__file__).parent / "jobs" / "prepare_digits.py"),
        application_args=["--day", "{{ ds }}", "--out", DATA],
        conf={"spark.ui.showConsoleProgress": "false"},
        # a retry writes the day's data again: nothing to reattach to (and on YARN in cluster mode the Spark
        # provider would otherwise require yarn_track_via_rm_api, which it refuses on any other master)
        durable=False,
    )

    # fmt: off
    # [START lifecycle]
    LAUNCHED = "ti.xcom_pull(task_ids='launch')"
    launch = TFoSLaunchClusterOperator(  # returns once the TF cluster takes feeds
        task_id="launch", spark_conn_id=SPARK_CONN,
        train_fn="airflow_tfos.runtime.examples.digits:train_fed",
        args={"epochs": 8, "checkpoint_every": 10}, num_workers=2, executor_memory="1g",
        validation_data={"format": "parquet", "path": f"{DATA}/test"},
        feed={"features": ["pixels"], "label": "label", "batch_size": 32},
    )
    feed = TFoSFeedOperator(  # finds the launch task's run with no XCom
        task_id="feed", launch_task_id="launch", spark_conn_id=SPARK_CONN,
        data={"format": "parquet", "path": f"{DATA}/train"}, feed_timeout=1200,
    )
    checkpointed = TFoSCheckpointSensor(
        task_id="checkpointed", run_dir="{{ " + LAUNCHED + "['run_dir'] }}", min_step=20, poke_interval=5, timeout=600,
    )
    shutdown = TFoSShutdownClusterOperator(  # runs even when the launch failed before pushing an XCom
        task_id="shutdown", launch_task_id="launch", spark_conn_id=SPARK_CONN, grace_secs=60, trigger_rule="all_done",
    )
    app_finished = YarnApplicationSensor(
        task_id="app_finished", application_id="{{ " + LAUNCHED + "['application_id'] }}",
        spark_conn_id=SPARK_CONN, target_states=["FINISHED"], poke_interval=5, timeout=300,
    )
    publish = TFoSPublishModelOperator(  # the export is in the launch's run directory, under export/
        task_id="publish", run_dir="{{ " + LAUNCHED + "['run_dir'] }}",
        registry=REGISTRY, metric="test_accuracy", tolerance=0.005,
    )
    batch_inference = TFoSInferenceOperator(  # scores with the model in service
        task_id="batch_inference", spark_conn_id=SPARK_CONN, executor_memory="1g",
        model_path="{{ ti.xcom_pull(task_ids='publish')['model_path'] }}",
        data={"format": "parquet", "path": f"{DATA}/score"}, features=["pixels"],
        output_path=PREDICTIONS, output_col="probabilities",
    )
    prepare_data >> launch >> feed >> checkpointed >> shutdown >> app_finished >> publish >> batch_inference
    # [END lifecycle]
    # fmt: on
