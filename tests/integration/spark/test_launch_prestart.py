"""On the local cluster: the launch's phases as the nodes record them agree with the caller's clock, and the
processes started ahead of a barrier stage that fails are gone. Without Spark:
tests/unit/airflow_tfos/runtime/node/test_launch.py."""

from __future__ import annotations

import os
import threading
import time

import pytest

from airflow_tfos.runtime import TFClusterRun
from airflow_tfos.runtime.feed.rows import RowFeed
from airflow_tfos.runtime.node.task import run_node
from airflow_tfos.runtime.program import launch_times
from tests.support import programs
from tests.support.helpers import assert_no_node_processes, node_processes


@pytest.mark.integration
def test_the_launch_breakdown_agrees_with_the_callers_clock(sc, tmp_path):
    times_dir = tmp_path / "times"
    times_dir.mkdir()
    called = time.time()
    run = TFClusterRun(
        sc, programs.tf_cluster_view, num_nodes=2, env={launch_times.LAUNCH_TIMES_ENV: str(times_dir)}
    ).start()
    result = run.wait()
    total = time.time() - called
    assert_no_node_processes(run.cluster_id)

    # TF was imported before main_fun, ahead of TF_CONFIG, and still reads the cluster it was handed.
    assert result["tf_preloaded"] is True
    assert result["resolver_cluster"] == result["ctx_cluster"]
    assert result["resolver_task"] == result["ctx_task"] == ["chief", 0]
    records = launch_times.read_records(str(times_dir))
    assert [(r["executor_id"], r["run_id"]) for r in records] == [(0, run.cluster_id), (1, run.cluster_id)]
    for record in records:
        assert record["tf_imported"] is not None
        assert record["task_start"] <= record["barrier_start"] <= record["barrier_end"] <= record["main_started"]
        phases = launch_times.breakdown(called, record)
        assert all(seconds >= 0 for seconds in phases.values()), phases
        assert sum(phases.values()) <= total, (phases, total)
        assert 0 <= launch_times.barrier_seconds(record) <= total


@pytest.mark.integration
def test_prestarted_processes_of_a_barrier_stage_that_fails_are_gone(sc, tmp_path):
    gate = str(tmp_path / "fail-now")
    job = TFClusterRun(sc, programs.sleep_forever, num_nodes=2, data=sc.parallelize([1]), row_feed=RowFeed()).node_job()

    def held(index, rows):  # runs inside the barrier task, after its node's process was started
        if index == 1:
            while not os.path.exists(gate):
                time.sleep(0.1)
            raise ValueError("partition 1 failed before the port exchange")
        yield from rows

    stage = sc.parallelize(range(2), 2).mapPartitionsWithIndex(held).barrier()
    outcome: dict = {}

    def collect():
        try:
            stage.mapPartitions(lambda rows: run_node(job, rows)).collect()
        except Exception as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=collect, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while len(node_processes(job.cluster_id)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    started = node_processes(job.cluster_id)
    # One waits in the port exchange, one in its data: both were started before it.
    assert len(started) == 2, f"expected 2 pre-started node processes, saw {started}"
    open(gate, "w").close()
    thread.join(120)
    assert not thread.is_alive()
    assert "partition 1 failed before the port exchange" in str(outcome.get("error"))
    assert_no_node_processes(job.cluster_id)
    assert not any(p.is_running() and p.status() != "zombie" for p in started)
