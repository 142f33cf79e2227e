"""The local backend with real Spark: TFoSHook submits the driver entrypoint as a detached spark-submit
against local-cluster[2,1,1024] and a real TF model trains; state, search by tag, kill, failure.

The Spark connection comes from an environment variable; no Airflow database is needed.
"""

from __future__ import annotations

import json
import os

import psutil
import pytest

from airflow_tfos.hooks.backends.local_tracker import ApplicationAlreadyRunningError, LocalBackend
from airflow_tfos.hooks.tfos import TFoSHook
from airflow_tfos.shared.rundir import RunDir
from tests.conftest import wait_for
from tests.support.helpers import training_spec

pytestmark = pytest.mark.integration

MASTER = "local-cluster[2,1,1024]"
CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.executorEnv.TF_CPP_MIN_LOG_LEVEL": "2",
}


@pytest.fixture(scope="module")
def data_path(tmp_path_factory):
    """600 rows of y = 3 x0 - 2 x1 + 1 in three Parquet files, written without Spark."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("data") / "linear"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for part in range(3):
        x = rng.random((200, 2))
        table = pa.table({"x": pa.array(x.tolist(), pa.list_(pa.float64())), "y": 3 * x[:, 0] - 2 * x[:, 1] + 1})
        pq.write_table(table, folder / f"part-{part}.parquet")
    return str(folder)


@pytest.fixture
def hook(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_TEST", json.dumps({"conn_type": "spark", "host": MASTER}))
    made = TFoSHook(
        spark_conn_id="spark_test",
        tracker_dir=str(tmp_path / "tracker"),
        conf={**CONF, "spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"]},
        heartbeat_secs=0.5,
    )
    yield made
    for record in made.local.records():  # nothing of a failed test keeps running
        made.local.kill(record["app_id"], grace_secs=5)


def submit(hook, run_dir, tag):
    return hook.submit(run_dir, tag=tag, name=f"test {tag}", num_nodes=2, executor_memory="768m")


def test_a_run_trains_and_finishes_and_another_process_sees_it(hook, tmp_path, data_path):
    rundir = RunDir(str(tmp_path / "run"))
    digest = rundir.write_spec(training_spec(data_path))
    app_id = submit(hook, rundir.uri, "tfos-ok")
    state = hook.get_state(app_id)
    assert (state.state, state.final_status) == ("RUNNING", "UNDEFINED")
    assert [a.app_id for a in hook.find_live("tfos-ok")] == [app_id]
    wait_for(lambda: (rundir.read_status() or {}).get("state") == "RUNNING", 120, "status RUNNING", every=0.5)
    assert "run RUNNING" in hook.get_state(app_id).diagnostics
    final = wait_for(lambda: (s := hook.get_state(app_id)).is_terminal and s, 240, "the run ending", every=0.5)
    log_tail = hook.local.log_path(app_id).read_text()[-3000:]
    assert (final.state, final.final_status) == ("FINISHED", "SUCCEEDED"), final.diagnostics + log_tail
    assert rundir.read_status()["state"] == "SUCCEEDED" and rundir.export_success()["spec_hash"] == digest
    # another process's view: a new backend on the same tracker directory
    assert LocalBackend(str(tmp_path / "tracker")).get_state(app_id) == final
    assert [a.app_id for a in hook.find_by_tag("tfos-ok")] == [app_id] and hook.find_live("tfos-ok") == []
    assert hook.kill(app_id) == final  # an ended application is left alone


def test_a_kill_mid_run_leaves_no_process_and_kill_twice_is_a_no_op(hook, tmp_path, data_path):
    rundir = RunDir(str(tmp_path / "run"))
    rundir.write_spec(training_spec(data_path, args={"epochs": 50, "every": 5, "sleep": 0.2}))
    app_id = submit(hook, rundir.uri, "tfos-kill")
    wait_for(lambda: list((tmp_path / "run").glob("progress-*.json")), 180, "training steps", every=0.5)
    with pytest.raises(ApplicationAlreadyRunningError, match=app_id):
        submit(hook, rundir.uri, "tfos-kill")
    pgid = hook.local.record(app_id)["pgid"]
    leader = psutil.Process(hook.local.record(app_id)["pid"])
    seen = {p.pid: p for p in [*hook.local.processes(app_id), *leader.children(recursive=True)]}
    assert len(seen) >= 5  # wrapper, spark-submit JVM, python driver, executor JVMs, TF nodes
    killed = hook.kill(app_id, grace_secs=20)
    assert (killed.state, killed.final_status) == ("KILLED", "KILLED")
    assert [p.pid for p in seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    group = [p for p in psutil.process_iter() if _pgid(p.pid) == pgid]
    assert [p.pid for p in group if _alive(p)] == []  # an exited child not yet reaped is no process left
    assert hook.kill(app_id, grace_secs=20) == killed
    assert LocalBackend(str(tmp_path / "tracker")).get_state(app_id).state == "KILLED"


def test_a_failing_spec_is_failed_with_diagnostics(hook, tmp_path):
    rundir = RunDir(str(tmp_path / "run"))
    rundir.write_spec({"train_fn": "tests.support.programs:no_such_function", "num_nodes": 2})
    app_id = submit(hook, rundir.uri, "tfos-bad")
    final = wait_for(lambda: (s := hook.get_state(app_id)).is_terminal and s, 120, "the run ending", every=0.5)
    assert (final.state, final.final_status) == ("FAILED", "FAILED")
    assert "exited with code 2" in final.diagnostics and "has no 'no_such_function'" in final.diagnostics
    assert LocalBackend(str(tmp_path / "tracker")).get_state(app_id) == final


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None
