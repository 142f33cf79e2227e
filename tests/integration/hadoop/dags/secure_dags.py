"""The nightly DAG of tests/integration/hadoop/test_secure_dag.py, on the secure lab (Kerberos, SPNEGO and
delegation tokens of Hadoop's own daemons): a user's training (``lab_training.py``, beside this file) on YARN,
InputMode.TENSORFLOW from Parquet on HDFS, followed by the deferrable trigger, then by the YARN sensor and the
export sensor, both deferred too.

Every connection logs in from a keytab, nobody runs ``kinit``: ``tfos_secure_spark`` (host ``yarn``, extras
``principal`` and ``keytab``, as the Spark provider has them: spark-submit's ``--principal``/``--keytab``),
``tfos_secure_yarn`` (the ResourceManager through SPNEGO) and ``tfos_secure_webhdfs`` (the NameNode through
SPNEGO; the TF nodes get a delegation token). ``LAB_DATA`` names the Parquet folder, ``LAB_STEP_SECS`` how long
each step lasts (the training outlives the tokens' renew interval).
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG

from airflow_tfos.operators import TFoSTrainOperator
from airflow_tfos.sensors import TFoSCheckpointSensor, YarnApplicationSensor

RESULT = "ti.xcom_pull(task_ids='train')"
DATA = os.environ.get("LAB_DATA", "hdfs:///lab/linear")
SECURE = {
    "spark_conn_id": "tfos_secure_spark",
    "yarn_conn_id": "tfos_secure_yarn",
    "webhdfs_conn_id": "tfos_secure_webhdfs",
}


def secure_train(task_id: str = "train", conns: dict[str, str] = SECURE, **args) -> TFoSTrainOperator:
    """The user's training (``lab_training.py``) on two workers, reading the Parquet data, with ``conns``; ``args``
    over its defaults (20 rows a batch, 20 steps an epoch), operator arguments in ``args['operator']``."""
    operator = args.pop("operator", {})
    return TFoSTrainOperator(
        task_id=task_id,
        train_fn="lab_training:train",
        input_mode="TENSORFLOW",
        args={"data": DATA, "batch_size": 20, "steps_per_epoch": 20, **args},
        num_workers=2,
        executor_memory="768m",
        poll_interval=2,
        **conns,
        **operator,
    )


with DAG("tfos_secure_nightly", schedule="@daily", start_date=datetime(2026, 11, 1), catchup=False):
    train = secure_train(
        epochs=2,
        checkpoint_every=10,
        step_secs=float(os.environ.get("LAB_STEP_SECS", "0")),
        operator={"deferrable": True},
    )
    finished = YarnApplicationSensor(
        task_id="finished",
        application_id="{{ " + RESULT + "['application_id'] }}",
        yarn_conn_id=SECURE["yarn_conn_id"],
        deferrable=True,
        poke_interval=2,
        timeout=120,
    )
    exported = TFoSCheckpointSensor(
        task_id="exported",
        run_dir="{{ " + RESULT + "['run_dir'] }}",
        export=True,
        webhdfs_conn_id=SECURE["webhdfs_conn_id"],
        deferrable=True,
        poke_interval=2,
        timeout=120,
    )
    train >> finished >> exported

# proxy_user: the principal of tfos_proxy_spark (airflow, with Hadoop's proxy right on the lab) runs the training as
# the team's user (the DAG's param); tfos_proxy_webhdfs reads HDFS as them (its proxy_user). tfos_mallory_* are the
# same with a principal that has no proxy right.
for dag_id, conns in {"tfos_secure_proxy": "tfos_proxy", "tfos_secure_proxy_refused": "tfos_mallory"}.items():
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 11, 1), catchup=False, params={"team_user": "alice"}):
        connections = {f"{kind}_conn_id": f"{conns}_{kind}" for kind in ("spark", "yarn", "webhdfs")}
        secure_train(
            conns=connections,
            steps_per_epoch=10,
            epochs=1,
            checkpoint_every=10,
            operator={"proxy_user": "{{ params.team_user }}"},
        )

# What a user meets when a login is wrong (test_secure_dag.py): each task's webhdfs connection is broken one way,
# and the task fails before anything is submitted.
with DAG("tfos_secure_failures", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    for task_id in ("stale_keytab", "no_ticket", "no_write_access"):
        secure_train(task_id, {**SECURE, "webhdfs_conn_id": f"tfos_{task_id}_webhdfs"}, operator={"retries": 0})

# A training whose HDFS delegation token is cancelled while it runs (test_secure_dag.py): one attempt, so that the
# task fails with the token's refusal; long enough for the test to cancel the token between two checkpoints.
with DAG("tfos_secure_token_cancelled", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    secure_train(epochs=3, checkpoint_every=5, step_secs=0.5, operator={"max_attempts": 1, "retries": 0})
