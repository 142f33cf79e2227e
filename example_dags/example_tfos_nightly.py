"""Nightly retraining of a digit classifier on the Spark cluster, from the day's data to batch predictions.

Each run owns its run directory (derived from the DAG, the task and the logical date), so catch-up and
reruns of old dates are safe, and a retry of ``train`` resumes from that run's latest checkpoint.

    prepare_data        Spark job: the day's training, held-out and to-be-scored data (Parquet)
    train               2 TF workers fed from Spark, starting from the model in service before this run (warm
                        start); checkpoints; resumes on retry; exports with metrics
    exported            waits for the export (never a half-written one) and returns its step
    evaluate            the new model's accuracy on the held-out data, against the model in service
    publish             copies the model into the registry; puts it in service only if not worse
    batch_inference     scores the day's data with the model in service

Settings come from the environment so that the same file runs in the demo and on a real cluster:
``TFOS_EXAMPLE_BASE`` (where data, models and predictions go: a path or ``hdfs://`` URI) and the
``tfos_spark`` connection (``local-cluster[2,1,1024]`` in the demo, ``yarn`` on a cluster). On a cluster the
containers' Python needs what each task's code imports: the training and scoring need requirements/runtime.txt's
packages (airflow-tfos itself is shipped), and ``prepare_data``'s job (``jobs/prepare_digits.py``, shipped alone)
needs scikit-learn too. ``scripts/demo.py --yarn`` runs this file on the Hadoop lab.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, task

from airflow_tfos.operators import ModelInService, TFoSInferenceOperator, TFoSPublishModelOperator, TFoSTrainOperator
from airflow_tfos.sensors import TFoSCheckpointSensor

BASE = os.environ.get("TFOS_EXAMPLE_BASE") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "tfos-example"
)
DATA = f"{BASE}/data/tfos_nightly_digits/{{{{ ds }}}}"
REGISTRY = f"{BASE}/models/digits"
PREDICTIONS = f"{BASE}/predictions/tfos_nightly_digits/{{{{ ds }}}}"
SPARK_CONN = "tfos_spark"
#: The least test accuracy a model must reach to be considered at all.
MIN_ACCURACY = 0.80
TRAIN_RESULT = "ti.xcom_pull(task_ids='train')"

with DAG(
    dag_id="tfos_nightly_digits",
    description="Nightly retraining with warm start, checkpoint recovery, a publish gate and batch inference",
    schedule="@daily",
    start_date=datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=1,  # each night starts from the model the night before put in service
    default_args={"retries": 2, "retry_delay": timedelta(seconds=15)},
    tags=["airflow-tfos", "example"],
) as dag:
    prepare_data = SparkSubmitOperator(
        task_id="prepare_data",
        conn_id=SPARK_CONN,
        application=str(Path(__file__).parent / "jobs" / "prepare_digits.py"),
        application_args=["--day", "{{ ds }}", "--out", DATA],
        name="prepare-digits-{{ ds }}",
        conf={"spark.ui.showConsoleProgress": "false"},
        # a retry writes the day's data again: nothing to reattach to (and on YARN in cluster mode the Spark
        # provider would otherwise require yarn_track_via_rm_api, which it refuses on any other master)
        durable=False,
    )

    train = TFoSTrainOperator(
        task_id="train",
        spark_conn_id=SPARK_CONN,
        train_fn="airflow_tfos.runtime.examples.digits:train_fed",
        args={"epochs": 12, "batch_size": 32, "checkpoint_every": 20},
        num_workers=2,
        data={"format": "parquet", "path": f"{DATA}/train"},
        validation_data={"format": "parquet", "path": f"{DATA}/test"},
        feed={"features": ["pixels"], "label": "label", "batch_size": 32},
        warm_start=ModelInService(REGISTRY),  # the model in service before tonight's version (none: from scratch)
        executor_memory="1g",
        deferrable=True,
        poll_interval=5,
    )

    exported = TFoSCheckpointSensor(
        task_id="exported",
        run_dir="{{ " + TRAIN_RESULT + "['run_dir'] }}",
        export=True,
        poke_interval=5,
        timeout=300,
    )

    @task
    def evaluate(result: dict) -> dict:
        """Check the new model's held-out accuracy; return it with the model in service's on the same data."""
        metrics = result["metrics"]
        accuracy, baseline = metrics["test_accuracy"], metrics.get("baseline_test_accuracy")
        print(f"new model: test accuracy {accuracy:.4f} after {result['step']} steps")
        if baseline is not None:
            print(f"model in service on the same data: {baseline:.4f}")
        if accuracy < MIN_ACCURACY:
            raise ValueError(f"test accuracy {accuracy:.4f} is below {MIN_ACCURACY}: look at the training report")
        return {"test_accuracy": accuracy, "baseline_test_accuracy": baseline, "export_path": result["export_path"]}

    publish = TFoSPublishModelOperator(
        task_id="publish",
        run_dir="{{ " + TRAIN_RESULT + "['run_dir'] }}",
        registry=REGISTRY,
        metric="test_accuracy",
        tolerance=0.005,
    )

    batch_inference = TFoSInferenceOperator(
        task_id="batch_inference",
        spark_conn_id=SPARK_CONN,
        model_path="{{ ti.xcom_pull(task_ids='publish')['model_path'] }}",
        data={"format": "parquet", "path": f"{DATA}/score"},
        features=["pixels"],
        output_path=PREDICTIONS,
        output_col="probabilities",
        executor_memory="1g",
        deferrable=True,
    )

    prepare_data >> train >> exported >> evaluate(train.output) >> publish >> batch_inference
