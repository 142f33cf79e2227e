"""A TensorFlowOnSpark program, migrated by changing its imports, run nightly by spark-submit.

``tfos_programs/digits_csv_tf_mode.py`` is a TFoS 2.2.5 program in InputMode.TENSORFLOW: each TF
node reads its share of the day's CSV files itself. Only its imports changed; Airflow runs it as any
Spark application, with the Spark provider's ``SparkSubmitOperator``.

Settings as in example_tfos_nightly.py (``TFOS_EXAMPLE_BASE``, the ``tfos_spark`` connection).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG

BASE = os.environ.get("TFOS_EXAMPLE_BASE") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "tfos-example"
)
DATA = f"{BASE}/data/tfos_migrated_digits/{{{{ ds }}}}"
HERE = Path(__file__).parent
SPARK_CONN = "tfos_spark"

with DAG(
    dag_id="tfos_migrated_digits",
    description="A TFoS InputMode.TENSORFLOW program, migrated by changing its imports",
    schedule="@daily",
    start_date=datetime(2026, 11, 1),
    catchup=False,
    tags=["airflow-tfos", "example", "tfos"],
) as dag:
    prepare_data = SparkSubmitOperator(
        task_id="prepare_data",
        conn_id=SPARK_CONN,
        application=str(HERE / "jobs" / "prepare_digits.py"),
        application_args=["--day", "{{ ds }}", "--out", DATA, "--csv"],
        conf={"spark.ui.showConsoleProgress": "false"},
        # a retry writes the day's data again: nothing to reattach to (and on YARN in cluster mode the Spark
        # provider would otherwise require yarn_track_via_rm_api, which it refuses on any other master)
        durable=False,
    )

    train = SparkSubmitOperator(
        task_id="train",
        conn_id=SPARK_CONN,
        application=str(HERE / "tfos_programs" / "digits_csv_tf_mode.py"),
        application_args=[
            "--cluster_size",
            "2",
            "--data_dir",
            f"{DATA}/train_csv",
            "--export_dir",
            f"{BASE}/tfos-export/digits/{{{{ ds }}}}",
            "--epochs",
            "10",
        ],
        conf={"spark.ui.showConsoleProgress": "false", "spark.executor.memory": "1g"},
    )

    prepare_data >> train
