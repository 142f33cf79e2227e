"""The TF cluster on a real local Spark cluster (separate executor JVMs) with real TensorFlow."""

from __future__ import annotations

import json
import threading
import time

import pytest

from airflow_tfos.runtime import ClusterConfigError, NodeFailedError, RunTimeoutError, TFClusterRun
from tests.support import programs
from tests.support.helpers import assert_no_node_processes, read_records, wait_for_records

pytestmark = pytest.mark.integration


def run_cluster(sc, main_fun, args=None, **kwargs):
    tf_run = TFClusterRun(sc, main_fun, args, **kwargs).start()
    try:
        return tf_run, tf_run.wait()
    finally:
        assert_no_node_processes(tf_run.cluster_id)


def test_two_worker_mwms_training_ends_with_identical_weights(sc, tmp_path):
    _, result = run_cluster(sc, programs.mwms_keras, {"epochs": 2, "steps": 10}, num_nodes=2, run_dir=str(tmp_path))
    records = read_records(str(tmp_path), "weights")
    assert set(records) == {"chief:0", "worker:0"}
    chief, worker = records["chief:0"], records["worker:0"]
    # Each worker trained on different data; only a synchronous all-reduce leaves them identical.
    assert chief["weights"] == worker["weights"]
    assert chief["loss"] == worker["loss"]
    assert chief["loss"][-1] < chief["loss"][0]
    assert "tf_keras" in chief["keras"]
    assert result["weights"] == chief["weights"]  # the chief's return value came back


def test_a_second_cluster_in_the_same_spark_context_starts_clean(sc, tmp_path):
    # TFoS failed here with "Collective ops are already configured" (reused Python workers).
    for attempt in range(2):
        run_dir = tmp_path / str(attempt)
        run_dir.mkdir()
        _, result = run_cluster(sc, programs.mwms_keras, {"epochs": 1, "steps": 3}, num_nodes=2, run_dir=str(run_dir))
        assert len(result["loss"]) == 1


def test_every_node_gets_its_role_cluster_spec_and_tf_config(sc, tmp_path):
    tf_run, result = run_cluster(sc, programs.report_context, {"x": 1}, num_nodes=3, num_ps=1, run_dir=str(tmp_path))
    records = read_records(str(tmp_path), "context")
    assert set(records) == {"ps:0", "chief:0", "worker:0"}
    spec = records["chief:0"]["cluster_spec"]
    assert set(spec) == {"ps", "chief", "worker"}
    endpoints = [e for hosts in spec.values() for e in hosts]
    assert len(set(endpoints)) == 3  # a distinct port per node
    for label, record in records.items():
        job, index = label.split(":")
        assert (record["job_name"], record["task_index"]) == (job, int(index))
        assert record["cluster_spec"] == spec
        tf_config = json.loads(record["tf_config"])
        assert tf_config["cluster"] == spec
        assert tf_config["task"] == {"type": job, "index": int(index)}
        assert spec[job][int(index)] == f"{record['host']}:{record['port']}"
        assert record["num_workers"] == 2
        assert record["is_chief"] == (job == "chief")
        assert record["args"] == {"x": 1}
        assert record["legacy_keras"] == "1"
    assert [records[k]["executor_id"] for k in ("ps:0", "chief:0", "worker:0")] == [0, 1, 2]
    assert result == records["chief:0"]  # the chief's return value; the ps ran until stopped
    info = json.loads((tmp_path / "cluster.json").read_text())
    assert info["run_id"] == tf_run.cluster_id and info["cluster_spec"] == spec


def test_parameter_server_strategy_trains_through_ps_and_workers(sc):
    _, result = run_cluster(sc, programs.ps_strategy, {"steps": 30}, num_nodes=3, num_ps=1)
    assert result["steps"] == 30
    # Minimising (w*2 - 6)^2 from 0: the variable on the ps converges towards 3.
    assert result["weight"] == pytest.approx(3.0, abs=0.2)


def test_an_exception_in_a_worker_fails_the_run_with_its_role_and_traceback(sc, tmp_path):
    tf_run = TFClusterRun(
        sc, programs.fail_on, {"job": "worker", "index": 0}, num_nodes=2, run_dir=str(tmp_path)
    ).start()
    started = time.monotonic()
    with pytest.raises(NodeFailedError) as info:
        tf_run.wait()
    assert time.monotonic() - started < 60  # the sleeping chief did not hold the failure up
    message = str(info.value)
    assert message.startswith("TF node worker:0 (executor_id 1, host ")
    assert "ValueError: boom from worker:0" in message
    assert "programs.py" in message and "in fail_on" in message  # the node's Python traceback
    assert info.value.failure.job_name == "worker"
    assert "Py4J" not in message.splitlines()[0]
    assert_no_node_processes(tf_run.cluster_id)


def test_a_parameter_server_dying_while_workers_train_fails_the_run(sc):
    tf_run = TFClusterRun(sc, programs.fail_on, {"job": "ps", "index": 0}, num_nodes=3, num_ps=1).start()
    with pytest.raises(NodeFailedError, match=r"TF node ps:0 .* failed: ValueError: boom from ps:0"):
        tf_run.wait(120)
    assert_no_node_processes(tf_run.cluster_id)


def test_timeout_cancels_the_stage_and_kills_the_node_processes(sc, tmp_path):
    tf_run = TFClusterRun(sc, programs.sleep_forever, num_nodes=2, run_dir=str(tmp_path), timeout=20).start()
    pids = wait_for_records(str(tmp_path), "pid", 2)
    with pytest.raises(RunTimeoutError, match="did not finish within 20 s"):
        tf_run.wait()
    assert len(pids) == 2
    assert_no_node_processes(tf_run.cluster_id)


def test_cancel_from_another_thread_stops_the_run(sc, tmp_path):
    tf_run = TFClusterRun(sc, programs.sleep_forever, num_nodes=2, run_dir=str(tmp_path)).start()
    wait_for_records(str(tmp_path), "pid", 2)
    threading.Timer(0.5, tf_run.cancel).start()
    with pytest.raises(Exception, match="cancelled"):
        tf_run.wait(120)
    assert_no_node_processes(tf_run.cluster_id)


def test_more_nodes_than_task_slots_fails_before_launch(sc):
    started = time.monotonic()
    with pytest.raises(ClusterConfigError, match="4 TF nodes need 4 concurrent task slots.*offers 3"):
        TFClusterRun(sc, programs.report_context, num_nodes=4, slot_wait_secs=2).start()
    assert time.monotonic() - started < 30


def test_main_fun_that_executors_cannot_import_is_explained(sc, tmp_path, monkeypatch):
    module_dir = tmp_path / "driver_only"
    module_dir.mkdir()
    (module_dir / "driver_only_mod.py").write_text("def main(args, ctx):\n    return 1\n")
    monkeypatch.syspath_prepend(str(module_dir))
    import driver_only_mod

    with pytest.raises(NodeFailedError, match="--py-files"):
        TFClusterRun(sc, driver_only_mod.main, num_nodes=1).start().wait(120)


def test_keras3_is_kept_when_asked_for(sc, tmp_path):
    _, result = run_cluster(sc, programs.report_context, num_nodes=1, keras="keras3", run_dir=str(tmp_path))
    assert result["legacy_keras"] == "0"


def test_keras3_trains_with_mwms_in_a_custom_training_loop(sc, tmp_path):
    _, result = run_cluster(
        sc,
        programs.mwms_keras3_custom_loop,
        {"steps": 20},
        num_nodes=2,
        keras="keras3",
        run_dir=str(tmp_path),
    )
    records = read_records(str(tmp_path), "weights")
    assert result["keras"].startswith("3.")
    assert records["chief:0"]["weights"] == records["worker:0"]["weights"]
    assert result["loss"][-1] < result["loss"][0] / 2


def test_evaluator_node_runs_until_training_is_done_then_stops(sc, tmp_path):
    _, result = run_cluster(sc, programs.report_context, num_nodes=3, eval_node=True, run_dir=str(tmp_path))
    records = read_records(str(tmp_path), "context")
    assert set(records) == {"chief:0", "evaluator:0", "worker:0"}
    assert records["evaluator:0"]["num_workers"] == 2
    assert json.loads(records["evaluator:0"]["tf_config"])["task"] == {"type": "evaluator", "index": 0}
    assert result["job_name"] == "chief"


def test_a_node_killed_by_a_signal_is_reported_with_its_stderr(sc):
    tf_run = TFClusterRun(sc, programs.die_by_signal, num_nodes=2, max_attempts=1).start()
    with pytest.raises(NodeFailedError) as info:
        tf_run.wait(120)
    message = str(info.value)
    assert "TF node chief:0" in message
    assert "process killed by SIGKILL" in message
    assert "chief about to be killed" in message
    assert_no_node_processes(tf_run.cluster_id)


def test_when_attempts_are_spent_the_run_fails_with_the_last_error(sc, tmp_path):
    tf_run = TFClusterRun(sc, programs.die_by_signal, num_nodes=2, max_attempts=2, run_dir=str(tmp_path)).start()
    with pytest.raises(NodeFailedError, match="process killed by SIGKILL"):
        tf_run.wait(300)
    from airflow_tfos.shared.rundir import RunDir

    failed = RunDir(str(tmp_path)).events("attempt_failed")
    assert [(e["attempt"], e["retrying"]) for e in failed] == [(0, True), (1, False)]
    assert_no_node_processes(tf_run.cluster_id)


def test_an_error_in_the_program_is_not_retried(sc, tmp_path):
    tf_run = TFClusterRun(
        sc, programs.fail_on, {"job": "chief", "index": 0}, num_nodes=2, max_attempts=3, run_dir=str(tmp_path)
    ).start()
    with pytest.raises(NodeFailedError, match="ValueError: boom"):
        tf_run.wait(300)
    from airflow_tfos.shared.rundir import RunDir

    assert len(RunDir(str(tmp_path)).events("attempt")) == 1


def test_time_based_checkpoints_are_taken_by_every_worker_together(sc, tmp_path):
    _, step = run_cluster(sc, programs.timed_checkpoints, num_nodes=2, run_dir=str(tmp_path), timeout=300)
    from airflow_tfos.shared.rundir import RunDir

    saved = [e["step"] for e in RunDir(str(tmp_path)).events("checkpoint")]
    assert step == 32
    assert len(saved) >= 3  # ~5 s of training, a checkpoint every ~1 s, and one at the end
    assert all(s % 2 == 0 for s in saved)  # only at agreed check points
    assert saved[-1] == 32
