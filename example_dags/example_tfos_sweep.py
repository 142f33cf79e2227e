"""A small hyperparameter sweep: the same training over a few settings as mapped tasks, the best model by
its held-out accuracy, and the publish gate.

    prepare_data   Spark job: the day's data (as in the nightly DAG)
    train          one mapped task per setting (``expand(args=...)``): each has its own run directory
                   and application, never another's export
    pick_best      reads every member's exported metrics and picks the best test accuracy
    publish        puts the best model in service if it is not worse than the model in service

Settings as in example_tfos_nightly.py (``TFOS_EXAMPLE_BASE``, the ``tfos_spark`` connection).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, task

from airflow_tfos.operators import TFoSPublishModelOperator, TFoSTrainOperator

BASE = os.environ.get("TFOS_EXAMPLE_BASE") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "tfos-example"
)
DATA = f"{BASE}/data/tfos_sweep_digits/{{{{ ds }}}}"
REGISTRY = f"{BASE}/models/digits-sweep"
SPARK_CONN = "tfos_spark"
#: The settings tried: one training each.
SETTINGS = [
    {"epochs": 6, "learning_rate": 0.001, "hidden_units": 32, "checkpoint_every": 50},
    {"epochs": 6, "learning_rate": 0.01, "hidden_units": 64, "checkpoint_every": 50},
]

with DAG(
    dag_id="tfos_sweep_digits",
    description="Mapped training over a few settings, the best by held-out accuracy, the publish gate",
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

    train = TFoSTrainOperator.partial(
        task_id="train",
        spark_conn_id=SPARK_CONN,
        train_fn="airflow_tfos.runtime.examples.digits:train_fed",
        num_workers=2,
        data={"format": "parquet", "path": f"{DATA}/train"},
        validation_data={"format": "parquet", "path": f"{DATA}/test"},
        feed={"features": ["pixels"], "label": "label", "batch_size": 32},
        executor_memory="1g",
        poll_interval=5,
    ).expand(args=SETTINGS)

    @task
    def pick_best(results: list[dict]) -> dict:
        """Return the member with the best held-out accuracy (its run directory, settings and metrics)."""
        ranked = sorted(results, key=lambda r: r["metrics"]["test_accuracy"], reverse=True)
        for member in ranked:
            print(f"{member['run_dir']}: test accuracy {member['metrics']['test_accuracy']:.4f}")
        best = ranked[0]
        return {"run_dir": best["run_dir"], "test_accuracy": best["metrics"]["test_accuracy"]}

    best = pick_best(train.output)

    publish = TFoSPublishModelOperator(
        task_id="publish",
        run_dir="{{ ti.xcom_pull(task_ids='pick_best')['run_dir'] }}",
        registry=REGISTRY,
        metric="test_accuracy",
        tolerance=0.005,
    )

    prepare_data >> train
    best >> publish
