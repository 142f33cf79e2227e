"""DAGs run by tests/integration/airflow/test_dag_runs.py with real Airflow (``airflow dags test``).

Everything that varies between tests comes from environment variables the test sets.
"""

from __future__ import annotations

import os
import time
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_tfos.operators import (
    TFoSFeedOperator,
    TFoSLaunchClusterOperator,
    TFoSPublishModelOperator,
    TFoSShutdownClusterOperator,
)
from airflow_tfos.sensors import YarnApplicationSensor

DATA = {"format": "parquet", "path": os.environ.get("TFOS_IT_DATA", "/tmp/tfos-it-data")}
FEED = {"features": ["x"], "label": "y", "batch_size": 30}
SPARK_CONF = {
    "spark.driver.host": "127.0.0.1",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.executorEnv.PYTHONPATH": os.environ.get("PYTHONPATH", ""),
}
COMMON = {
    "spark_conn_id": "spark_tfos_it",
    "yarn_conn_id": os.environ.get("TFOS_IT_YARN_CONN", "yarn_default"),
    "webhdfs_conn_id": os.environ.get("TFOS_IT_WEBHDFS_CONN") or None,
    "conf": SPARK_CONF,
    "executor_memory": "768m",
    "poll_interval": 1.0,
}
START = datetime(2026, 11, 1)

with DAG("tfos_it_yarn_sensor", schedule=None, start_date=START, catchup=False):
    YarnApplicationSensor(
        task_id="watch",
        application_id=os.environ.get("TFOS_IT_APP_ID", "application_0_0001"),
        yarn_conn_id="yarn_tfos_it",
        poke_interval=1,
        timeout=60,
    )

with DAG("tfos_it_launch_fails", schedule=None, start_date=START, catchup=False):
    # the application cannot be serving within ready_timeout: the launch fails, the feed never runs,
    # and the shutdown (all_done) finds the launch's run by launch_task_id, with no XCom to render
    launch = TFoSLaunchClusterOperator(
        task_id="launch",
        train_fn="tests.support.programs:spec_training",
        num_workers=2,
        feed=FEED,
        ready_timeout=float(os.environ.get("TFOS_IT_READY_TIMEOUT", "3")),
        **COMMON,
    )
    feed = TFoSFeedOperator(
        task_id="feed", launch_task_id="launch", data=DATA, spark_conn_id="spark_tfos_it", poll_interval=1.0
    )
    shutdown = TFoSShutdownClusterOperator(
        task_id="shutdown",
        launch_task_id="launch",
        spark_conn_id="spark_tfos_it",
        grace_secs=30,
        poll_interval=1.0,
        trigger_rule="all_done",
    )
    launch >> feed >> shutdown

with DAG("tfos_it_lifecycle", schedule=None, start_date=START, catchup=False):
    # launch -> feed -> shutdown (all_done); epochs from TFOS_IT_EPOCHS, so that a test can edit the spec
    # between a run and its rerun
    launch = TFoSLaunchClusterOperator(
        task_id="launch",
        train_fn="tests.support.programs:spec_training",
        args={"epochs": int(os.environ.get("TFOS_IT_EPOCHS", "1")), "every": 5},
        num_workers=2,
        feed=FEED,
        ready_timeout=240,
        idle_timeout=120,
        **COMMON,
    )
    feed = TFoSFeedOperator(
        task_id="feed",
        launch_task_id="launch",
        data=DATA,
        spark_conn_id="spark_tfos_it",
        poll_interval=1.0,
        feed_timeout=240,
    )
    shutdown = TFoSShutdownClusterOperator(
        task_id="shutdown",
        launch_task_id="launch",
        spark_conn_id="spark_tfos_it",
        grace_secs=60,
        poll_interval=1.0,
        trigger_rule="all_done",
    )
    launch >> feed >> shutdown


@task
def exported_model(**context) -> str:
    """A run directory holding a complete export (as the driver publishes one), made without training.

    Its spec hash, metrics and size come from TFOS_IT_SPEC, TFOS_IT_ACCURACY, TFOS_IT_BASELINE and
    TFOS_IT_MODEL_MB. With TFOS_IT_BARRIER (a folder) and TFOS_IT_BARRIER_N, it waits (at most 60 s) until N
    tasks have reached this point, so that the publish tasks of concurrent DAG runs start together.
    """
    from airflow_tfos.hooks.run_dir import run_dir_base
    from airflow_tfos.shared.rundir import RunDir

    spec, ds = os.environ["TFOS_IT_SPEC"], context["ds_nodash"]
    rundir = RunDir(os.path.join(run_dir_base(), "tfos_it_publish", f"{ds}-{spec}"))
    staging = rundir.export_staging()
    with open(os.path.join(staging, "saved_model.pb"), "wb") as handle:
        handle.write(
            f"model of {ds} spec {spec}\n".encode() + os.urandom(int(os.environ.get("TFOS_IT_MODEL_MB", "1")) << 20)
        )
    metrics = {"test_accuracy": float(os.environ["TFOS_IT_ACCURACY"])}
    if os.environ.get("TFOS_IT_BASELINE"):
        metrics["baseline_test_accuracy"] = float(os.environ["TFOS_IT_BASELINE"])
    rundir.publish_export(staging, spec_hash=spec, step=10, metrics=metrics)
    barrier = os.environ.get("TFOS_IT_BARRIER")
    if barrier:
        with open(os.path.join(barrier, f"{ds}-{spec}"), "w"):
            pass
        deadline = time.monotonic() + 60
        while len(os.listdir(barrier)) < int(os.environ["TFOS_IT_BARRIER_N"]) and time.monotonic() < deadline:
            time.sleep(0.02)
    return rundir.uri


with DAG("tfos_it_publish", schedule=None, start_date=START, catchup=False):
    TFoSPublishModelOperator(
        task_id="publish",
        run_dir=exported_model(),
        registry=os.environ.get("TFOS_IT_REGISTRY", "/tmp/tfos-it-registry"),
        metric="test_accuracy",
    )
