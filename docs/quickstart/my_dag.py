"""Every night: train my model on the day's Parquet data on the YARN cluster, then put it in service if it is
not worse than the model in service (lower held-out loss wins)."""

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_tfos.operators import ModelInService, TFoSPublishModelOperator, TFoSTrainOperator

DATA = "hdfs:///data/my_model/day={{ ds }}"  # Parquet: features (3 floats) and label (a float)
REGISTRY = "hdfs:///models/my_model"  # the versions of the model, and which one is in service
PACKED_ENV = "hdfs:///envs/tfos-runtime.tar.gz"  # the containers' Python

with DAG(
    dag_id="my_model_nightly",
    schedule="@daily",
    start_date=datetime(2026, 11, 1),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1)},  # a retry resumes from the last checkpoint
):
    train = TFoSTrainOperator(
        task_id="train",
        train_fn="my_training:train",
        args={"epochs": 5, "learning_rate": 0.01},
        data={"format": "parquet", "path": f"{DATA}/train"},
        validation_data={"format": "parquet", "path": f"{DATA}/holdout"},
        feed={"features": ["features"], "label": "label", "batch_size": 32},
        warm_start=ModelInService(REGISTRY),
        packed_env=PACKED_ENV,
        executor_memory="1g",
    )
    publish = TFoSPublishModelOperator(
        task_id="publish",
        run_dir="{{ ti.xcom_pull(task_ids='train')['run_dir'] }}",
        registry=REGISTRY,
        metric="val_loss",
        higher_is_better=False,
    )
    train >> publish
