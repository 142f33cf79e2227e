"""Scoring with each digit classifier the nightly DAG puts in service, as soon as it is in service.

``tfos_nightly_digits`` publishes every night's model into the registry; when the model goes into service
(not when the gate rejects it) its publish task emits an event of the registry's model Asset. This DAG is
scheduled on that Asset: each published model starts one run, which scores that night's data with the
version the event names. The event's extra holds ``version``, ``model_path``, ``metric``, ``metrics``,
``step``, ``spec_hash`` and the publishing run's ``logical_date``.

    describe_model      logs which version is scored, with its metrics
    score               batch inference with that version, into predictions/<version>
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_tfos.operators import TFoSInferenceOperator
from airflow_tfos.operators.publish import model_asset

BASE = os.environ.get("TFOS_EXAMPLE_BASE") or os.path.join(
    os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "tfos-example"
)
REGISTRY = f"{BASE}/models/digits"  # the registry the nightly DAG publishes into, written the same way
#: The event that started this run: the model put in service (the last one, if several came at once).
MODEL_EVENT = "(triggering_asset_events.values() | first | last)"

with DAG(
    dag_id="tfos_scoring_digits",
    description="Batch scoring with each model the nightly DAG puts in service",
    schedule=[model_asset(REGISTRY)],
    start_date=datetime(2026, 11, 1),
    catchup=False,
    tags=["airflow-tfos", "example"],
) as dag:

    @task
    def describe_model(triggering_asset_events=None) -> dict:
        """Log the version this run scores with and return the event's extra."""
        (events,) = triggering_asset_events.values()
        extra = dict(events[-1].extra)
        print(f"scoring with version {extra['version']} ({extra['metric']} {extra['metrics'][extra['metric']]})")
        return extra

    score = TFoSInferenceOperator(
        task_id="score",
        spark_conn_id="tfos_spark",
        model_path="{{ " + MODEL_EVENT + ".extra['model_path'] }}",
        data={
            "format": "parquet",
            "path": f"{BASE}/data/tfos_nightly_digits/{{{{ {MODEL_EVENT}.extra['logical_date'][:10] }}}}/score",
        },
        features=["pixels"],
        output_path=f"{BASE}/predictions/tfos_scoring_digits/{{{{ {MODEL_EVENT}.extra['version'] }}}}",
        output_col="probabilities",
        executor_memory="1g",
        deferrable=True,
    )

    describe_model() >> score
