"""A user's own DAG and training module, as a new user writes them: both in a DAGs folder outside the
repository (on no test path: not on PYTHONPATH, not in the package), run with real Airflow
(``airflow dags test``) against a real local Spark cluster. The module reaches the Spark driver and
executors only because the operator ships it (``--py-files``); a rerun submits nothing; a change of the
module trains again."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.rundir import RunDir
from tests.conftest import REPO, write_linear_parquet

pytestmark = pytest.mark.integration

TRAINING_MODULE = '''
"""The user's training code, kept beside the DAG."""

VERSION = {version}


def main_fun(args, ctx):
    import tensorflow as tf

    from airflow_tfos.runtime import RunCheckpointer, export_model, fit_resumable

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.5), loss="mse")
    checkpointer = RunCheckpointer(ctx, model=model, every_steps=10)
    fit_resumable(model, ctx.dataset(), epochs=args["epochs"], steps_per_epoch=ctx.steps_per_epoch,
                  checkpointer=checkpointer, verbose=0)
    loss = float(model.evaluate(ctx.dataset(), steps=ctx.steps_per_epoch, verbose=0))
    export_model(ctx, model, metrics={{"loss": loss, "version": VERSION}})
    return {{"loss": loss, "version": VERSION}}
'''

DAG_FILE = """
import os
from datetime import datetime

from airflow.sdk import DAG, task

from airflow_tfos.operators import TFoSInferenceOperator, TFoSPublishModelOperator, TFoSTrainOperator
from my_training import main_fun

TRAINING = {
    "train_fn": main_fun,
    "num_workers": 2,
    "data": {"format": "parquet", "path": os.environ["USER_DATA"]},
    "feed": {"features": ["x"], "label": "y", "batch_size": 30},
    "spark_conn_id": "spark_user",
    "executor_memory": "768m",
    "conf": {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"},
    "poll_interval": 1.0,
}

with DAG("user_nightly", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    train = TFoSTrainOperator(task_id="train", args={"epochs": 2}, run_dir=os.environ["USER_RUN_DIR"], **TRAINING)
    score = TFoSInferenceOperator(
        task_id="score",
        model_path="{{ ti.xcom_pull(task_ids='train')['export_path'] }}",
        data={"format": "parquet", "path": os.environ["USER_DATA"]},
        features=["x"],
        output_path=os.environ["USER_PREDICTIONS"],
        spark_conn_id="spark_user",
        executor_memory="768m",
        conf={"spark.ui.enabled": "false"},
        poll_interval=1.0,
    )
    publish = TFoSPublishModelOperator(
        task_id="publish",
        run_dir=os.environ["USER_RUN_DIR"],
        registry=os.environ["USER_NIGHTLY_REGISTRY"],
        metric="loss",
        higher_is_better=False,
        tolerance=1000.0,
    )
    train >> [score, publish]

with DAG("user_sweep", schedule=None, start_date=datetime(2026, 11, 1), catchup=False):
    members = TFoSTrainOperator.partial(task_id="train", **TRAINING).expand(args=[{"epochs": 1}, {"epochs": 2}])

    @task
    def best(results: list[dict]) -> dict:
        for member in results:
            print(f"sweep member {member['run_dir']}: loss {member['metrics']['loss']:.6f}")
        return min(results, key=lambda member: member["metrics"]["loss"])

    publish = TFoSPublishModelOperator(
        task_id="publish",
        run_dir="{{ ti.xcom_pull(task_ids='best')['run_dir'] }}",
        registry=os.environ["USER_REGISTRY"],
        metric="loss",
        higher_is_better=False,
    )
    best(members.output) >> publish
"""


@pytest.fixture(scope="module")
def user_airflow(tmp_path_factory):
    home = tmp_path_factory.mktemp("user-airflow")
    dags = tmp_path_factory.mktemp("user-dags")
    (dags / "my_training.py").write_text(TRAINING_MODULE.format(version=1))
    (dags / "user_nightly.py").write_text(DAG_FILE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the module is on no path but the DAGs folder
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW_CONN_SPARK_USER": json.dumps({"conn_type": "spark", "host": "local-cluster[2,1,1024]"}),
            "AIRFLOW_TFOS_LOCAL_DIR": str(home / "tfos-local"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "USER_DATA": write_linear_parquet(home / "data", seed=11),
            "USER_RUN_DIR": str(home / "tfos-runs" / "train"),
            "USER_PREDICTIONS": str(home / "predictions"),
            "USER_REGISTRY": str(home / "models" / "sweep"),
            "USER_NIGHTLY_REGISTRY": str(home / "models" / "nightly"),
        }
    )
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return env, dags


def dags_test(
    env: dict[str, str], dag_id: str = "user_nightly", skip: str | None = None
) -> subprocess.CompletedProcess:
    """``airflow dags test`` of ``dag_id``; tasks matching ``skip`` are marked success instead of run."""
    cwd = Path(env["AIRFLOW_HOME"])  # not the repository: nothing of it on the driver's path by accident
    marked = ["--mark-success-pattern", skip] if skip else []
    return subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", dag_id, "2026-11-20", *marked],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_a_dag_with_its_module_beside_it_trains_reruns_as_a_no_op_and_trains_again_after_a_change(user_airflow):
    env, dags = user_airflow
    assert str(REPO) not in env.get("PYTHONPATH", "")
    rundir = RunDir(env["USER_RUN_DIR"])

    first = dags_test(env)
    out = first.stdout + first.stderr
    assert first.returncode == 0 and "state=failed" not in out, out[-6000:]
    assert "shipping your code with --py-files: my_training" in out
    assert "XCom not found" not in out  # a normal run logs no error
    export = rundir.export_success()
    # 20 steps of SGD at 0.5 on y = 3 x0 - 2 x1 + 1 (var(y) ~ 1.1): below 0.1 in 2,000 simulated runs
    assert export["metrics"]["version"] == 1 and export["metrics"]["loss"] < 0.3
    assert len(rundir.events("submit")) == 1
    # a plain folder of Parquet files: each node read its own share from the files, on every pass, nothing
    # through Spark's rows; together the two nodes' shares are the 600 rows
    feeds = rundir.events("feed")
    assert len(feeds) == 2 and {feed.get("source") for feed in feeds} == {"parquet"}, feeds
    assert sum(feed["splits"]["train"] for feed in feeds) == 600, feeds
    assert json.loads((Path(env["USER_RUN_DIR"]) / "spec.json").read_text())["code"]["packages"] == ["my_training"]
    scored = pq.read_table(env["USER_PREDICTIONS"]).to_pydict()
    assert len(scored["prediction"]) == 600  # batch inference with the exported model, every row once

    # (the same code and spec run again submit nothing: the last run below, and on YARN in tests/integration/hadoop)
    # the code fixed and, the same night, the input rewritten in place by a backfill with other rows (twice as
    # many): the task trains again, from scratch, and says why
    (dags / "my_training.py").write_text(TRAINING_MODULE.format(version=2))
    shutil.rmtree(env["USER_DATA"])
    write_linear_parquet(Path(env["USER_DATA"]), seed=12, parts=4, rows=300)
    changed = dags_test(env)
    out = changed.stdout + changed.stderr
    assert changed.returncode == 0 and "state=failed" not in out, out[-6000:]
    submits = rundir.events("submit")
    assert len(submits) == 2 and submits[-1]["resume_step"] == 0  # a new request: no checkpoint of the old one
    assert "code my_training: content hash" in out
    assert "input data (" in out and "1 files added, 0 removed, 3 changed" in out
    kept = re.search(r"checkpoints are kept in (\S+)", out).group(1)
    assert RunDir(kept).export_success() == export  # the old model stays where the log says
    retrained = rundir.export_success()
    assert retrained["metrics"]["version"] == 2 and retrained["spec_hash"] != export["spec_hash"]
    assert retrained["step"] > 1.5 * export["step"]  # steps per epoch follow the rows fed: 1,200 now, 600 before
    assert retrained["fingerprint"] == rundir.read_fingerprint()["hash"]
    registry = ModelRegistry(env["USER_NIGHTLY_REGISTRY"])
    assert registry.current()["fingerprint"] == retrained["fingerprint"]  # the retrained model is published
    # scoring, at the same paths, sees the new rows and the new model: every new row scored by it once
    assert "holds predictions of another input, model or code" in out
    assert pq.read_table(env["USER_PREDICTIONS"]).num_rows == 1200

    unchanged = dags_test(env)
    assert unchanged.returncode == 0, (unchanged.stdout + unchanged.stderr)[-6000:]
    assert len(rundir.events("submit")) == 2  # same spec, input and code: nothing submitted
    assert "already in service" in unchanged.stdout + unchanged.stderr
    assert "holds predictions already" in unchanged.stdout + unchanged.stderr


def test_a_mapped_sweep_gives_each_member_its_own_run_directory_and_application_and_publishes_the_best(
    user_airflow,
):
    env, _ = user_airflow
    done = dags_test(env, "user_sweep")
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "state=failed" not in out, out[-6000:]
    base = Path(env["AIRFLOW_HOME"]) / "tfos-runs" / "user_sweep" / "train"
    members = sorted(p for p in base.iterdir() if p.is_dir())
    assert [p.name.rsplit("-", 1)[-1] for p in members] == ["map0", "map1"]
    epochs = []
    for member in members:
        rundir = RunDir(str(member))
        epochs.append(rundir.read_spec()["args"]["epochs"])
        export = rundir.export_success()
        assert export is not None and f"sweep member {member}: loss {export['metrics']['loss']:.6f}" in out
        assert len(rundir.events("submitted")) == 1  # its own application, never another member's
    assert sorted(epochs) == [1, 2]
    # the best member (lowest loss) went through the publish gate into the registry, which was empty
    losses = {str(member): RunDir(str(member)).export_success()["metrics"]["loss"] for member in members}
    (decision,) = ModelRegistry(env["USER_REGISTRY"]).decisions()
    assert decision["published"] and decision["candidate"] == pytest.approx(min(losses.values()))
    best = min(losses, key=losses.get)
    current = ModelRegistry(env["USER_REGISTRY"]).current()
    assert current["spec_hash"] == RunDir(best).export_success()["spec_hash"]
