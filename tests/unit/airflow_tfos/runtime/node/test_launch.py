"""A node's process starts ahead of its task's barrier and never outlives the task; the launch's phases as the
nodes record them (without Spark). On the local cluster: tests/integration/spark/test_launch_prestart.py."""

from __future__ import annotations

import json
import os
from functools import partial

import pytest

from airflow_tfos.runtime.compat.TFSparkNode import TFoSMain
from airflow_tfos.runtime.errors import decode_node_failure
from airflow_tfos.runtime.node.cluster import plan_roles
from airflow_tfos.runtime.node.job import NodeJob
from airflow_tfos.runtime.node.launch import hand_over, node_env, prestart_node_process
from airflow_tfos.runtime.program import child as child_files
from airflow_tfos.runtime.program import launch_times
from tests.support import programs

RECORD = {
    "executor_id": 1,
    "task_start": 100.5,
    "started": 100.75,
    "tf_imported": 103.0,
    "barrier_start": 100.8,
    "barrier_end": 101.5,
    "main_started": 103.25,
}


def test_the_phases_follow_each_other_and_sum_to_the_launch():
    phases = launch_times.breakdown(100.0, RECORD, ready_at=104.5)
    assert list(phases) == list(launch_times.PHASES)
    assert phases == pytest.approx(
        {
            "scheduling": 0.5,
            "process start": 0.25,
            "TF import": 2.25,
            "barrier": 0.0,  # the exchange ended while TF was still being imported
            "handover": 0.25,
            "strategy built": 1.25,
        }
    )
    assert sum(phases.values()) == pytest.approx(104.5 - 100.0)
    assert launch_times.barrier_seconds(RECORD) == pytest.approx(0.7)


def test_an_exchange_that_outlasts_the_import_shows_what_is_left_of_it():
    slow_barrier = {**RECORD, "barrier_end": 104.0, "main_started": 104.1}
    phases = launch_times.breakdown(100.0, slow_barrier)
    assert phases["barrier"] == pytest.approx(1.0)
    assert phases["handover"] == pytest.approx(0.1)
    assert phases["strategy built"] == 0
    assert sum(phases.values()) == pytest.approx(4.1)
    no_tf = launch_times.breakdown(100.0, {**slow_barrier, "tf_imported": None})
    assert no_tf["TF import"] == 0 and no_tf["barrier"] == pytest.approx(104.0 - 100.75)


def test_a_record_without_a_mark_is_refused_naming_it():
    with pytest.raises(ValueError, match="node 1 lacks barrier_end"):
        launch_times.breakdown(100.0, {k: v for k, v in RECORD.items() if k != "barrier_end"})


def _imports_tf(args, ctx):
    import tensorflow as tf

    return tf.__version__


def _no_tf(args, ctx):
    import json

    return json.dumps(args)


def test_tensorflow_is_imported_ahead_only_for_programs_that_import_it():
    assert child_files.uses_tensorflow(_imports_tf)
    assert child_files.uses_tensorflow(programs.tf_cluster_view)
    assert child_files.uses_tensorflow(partial(_imports_tf, None))
    assert child_files.uses_tensorflow(TFoSMain(_imports_tf, hold_port=False))  # what TFCluster.run runs
    assert not child_files.uses_tensorflow(_no_tf)
    assert not child_files.uses_tensorflow(TFoSMain(_no_tf, hold_port=False))


def _job(payload: bytes) -> NodeJob:
    roles = tuple(plan_roles(1))
    return NodeJob(cluster_id=f"prestart-{os.getpid()}", roles=roles, deciders=frozenset({0}), payload=payload)


def test_a_waiting_process_whose_task_goes_away_exits_without_running_main_fun(tmp_path):
    from pyspark import cloudpickle

    job = _job(cloudpickle.dumps((programs.report_context, None)))
    proc = prestart_node_process(job, tmp_path, node_env(job, None), "test node")
    try:
        assert proc.send(b"")  # what the task's end leaves on the pipe: nothing
        assert proc.wait(60) == child_files.ORPHANED
    finally:
        proc.stop(1.0)
    assert not (tmp_path / child_files.RESULT).exists()
    assert not (tmp_path / child_files.ERROR).exists()


def test_a_process_that_dies_before_its_context_is_reported_with_its_cause(tmp_path):
    # (main_fun, args) naming a module no executor has, as pickle protocol 0 writes it
    job = _job(b"(cno_such_training_module\nmain_fun\nNtp0\n.")
    proc = prestart_node_process(job, tmp_path, node_env(job, None), "test node")
    try:
        assert proc.wait(60) == 1  # it failed while loading the program, before any context was sent
        role = job.roles[0]
        with pytest.raises(RuntimeError) as failed:
            hand_over(proc, tmp_path, None, None, {}, role, "127.0.0.1")
    finally:
        proc.stop(1.0)
    failure = decode_node_failure(failed.value)
    assert failure is not None and failure.job_name == "chief"
    assert "cannot load main_fun" in failure.reason and "no_such_training_module" in failure.reason


@pytest.mark.parametrize(
    ("reason", "retryable", "waits"),
    [
        ("UnavailableError: failed to connect to all addresses; last error: Connection refused", True, True),
        ("DeadlineExceededError: Collective ops timed out", True, True),
        ("UnknownError: Could not start gRPC server", True, False),  # its own port taken: nobody else to wait for
        ("ValueError: bad shape", False, False),  # the program's own error
    ],
)
def test_a_training_node_that_met_a_lost_peer_waits_for_the_peers_task_to_fail_first(
    tmp_path, monkeypatch, reason, retryable, waits
):
    from airflow_tfos.runtime.node import launch
    from airflow_tfos.runtime.node.cluster import NodeRole

    slept = []
    monkeypatch.setattr(launch.time, "sleep", slept.append)
    (tmp_path / child_files.ERROR).write_text(json.dumps({"reason": reason, "traceback": "", "retryable": retryable}))
    error = launch.training_node_failed(NodeRole(1, "chief", 0), "127.0.0.1", tmp_path, None, 1)
    assert slept == ([launch.PEER_LOSS_GRACE_SECS] if waits else [])
    failure = decode_node_failure(error)
    assert failure.reason == reason and (failure.job_name, failure.task_index) == ("chief", 0)
