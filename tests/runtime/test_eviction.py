"""Which executors of a failed attempt the driver drops: those still running one of its tasks once the others
ended theirs (cut off, or hanging), never the node that reported the failure, never one Spark already lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from airflow_tfos.runtime.driver.eviction import AttemptTask, drop_executors, executors_to_drop, is_local
from tests.conftest import REPO

HOST = {"1": "10.231.77.15", "2": "10.231.77.16", "3": "10.231.77.17"}


def tasks(*states: tuple[str, str, str], active: tuple[str, ...] = ("1", "2", "3")) -> list[AttemptTask]:
    return [AttemptTask(node, ex, HOST[ex], status, ex in active) for node, ex, status in states]


def test_a_partitioned_chief_whose_peer_reported_the_collective_timeout_is_dropped():
    seen = tasks(("chief:0", "1", "RUNNING"), ("worker:0", "2", "FAILED"), ("worker:1", "3", "KILLED"))
    drops = executors_to_drop(seen, failed_node="worker:0", last_steps={"chief:0": 27, "worker:0": 27}, waited=10)
    assert [(d.executor_id, d.host) for d in drops] == [("1", "10.231.77.15")]
    assert drops[0].message() == (
        "dropping executor 1 on 10.231.77.15: its TF node chief:0 (last step 27) is cut off or hangs; "
        "its task did not end within 10 s of the attempt's failure"
    )


def test_a_stalled_node_that_does_not_answer_is_named_with_its_step():
    seen = tasks(("chief:0", "1", "RUNNING"), ("worker:0", "2", "KILLED"), ("worker:1", "3", "KILLED"))
    drops = executors_to_drop(seen, stalled={"chief:0": 27, "worker:0": 27})
    assert [d.message().split(";")[0] for d in drops] == [
        "dropping executor 1 on 10.231.77.15: its TF node chief:0 stalled at step 27"
    ]


def test_executors_that_ended_their_tasks_or_are_already_lost_are_kept():
    # a frozen TF process: its executor killed the task (and the process) when the stage was cancelled
    ended = tasks(("chief:0", "1", "KILLED"), ("worker:0", "2", "FAILED"), ("worker:1", "3", "KILLED"))
    assert executors_to_drop(ended, stalled={"chief:0": 27}) == []
    # a dead host: Spark lost its executor and replaces it itself
    lost = tasks(("chief:0", "1", "RUNNING"), ("worker:0", "2", "KILLED"), active=("2", "3"))
    assert executors_to_drop(lost) == []
    # the node that reported the failure answered, even if Spark has not seen its task end yet
    assert executors_to_drop(tasks(("worker:0", "2", "RUNNING")), failed_node="worker:0") == []
    assert executors_to_drop([]) == []


def test_an_executor_is_dropped_once_whatever_number_of_its_tasks_hang():
    seen = tasks(("ps:0", "3", "RUNNING"), ("worker:1", "3", "RUNNING"), ("worker:0", "2", "RUNNING"))
    assert [d.executor_id for d in executors_to_drop(seen)] == ["2", "3"]


def test_nothing_is_dropped_in_local_mode():
    assert is_local("local") and is_local("local[4]")
    assert not is_local("local-cluster[2,1,1024]") and not is_local("spark://10.231.77.11:7077")
    (drop,) = executors_to_drop(tasks(("chief:0", "1", "RUNNING")))
    assert drop_executors(SimpleNamespace(master="local[2]"), [drop]) == []  # never reaches the JVM


#: A driver of its own (the session's SparkContext must keep its executors): a barrier stage of two tasks on
#: three one-core workers (two cores for the application, one worker spare); task 0 fails, task 1 stops its
#: executor's JVM (SIGSTOP) and waits. The heartbeat timeout is 60 s, so only a drop frees the slot sooner.
FROZEN_EXECUTOR = """
import json, os, sys, time
from pyspark import SparkConf, SparkContext
from airflow_tfos.runtime.driver import eviction
from airflow_tfos.runtime.driver.checks import _task_slots

conf = (SparkConf().setMaster("local-cluster[3,1,1024]").set("spark.cores.max", "2")
        .set("spark.driver.host", "127.0.0.1").set("spark.driver.bindAddress", "127.0.0.1")
        .set("spark.executor.memory", "512m").set("spark.ui.enabled", "false")
        .set("spark.network.timeout", "60s").set("spark.executor.heartbeatInterval", "3s")
        .set("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"]))
sc = SparkContext(conf=conf)
sc.setLogLevel("ERROR")
PID_FILE = os.path.join(os.getcwd(), "frozen-executor.pid")  # for the test to end that JVM, frozen as it is
sc.setJobGroup("g", "frozen executor", interruptOnCancel=True)


def body(_):
    from pyspark import BarrierTaskContext
    if BarrierTaskContext.get().partitionId() == 0:
        time.sleep(3)
        raise RuntimeError("this node fails")
    pid = os.getpid()
    while pid > 1:  # up to the executor's JVM
        pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        if b"CoarseGrainedExecutorBackend" in open(f"/proc/{pid}/cmdline", "rb").read():
            with open(PID_FILE, "w") as f:
                f.write(str(pid))
            os.kill(pid, 19)
            break
    time.sleep(300)
    yield 0


try:
    while _task_slots(sc)[0] < 2:
        time.sleep(0.2)
    before = eviction.job_ids(sc, "g")
    try:
        sc.parallelize(range(2), 2).barrier().mapPartitions(body).collect()
    except Exception:
        pass
    failed = time.monotonic()
    tasks = eviction.wait_for_tasks(sc, eviction.job_ids(sc, "g") - before, ["chief:0", "worker:0"], 10)
    drops = eviction.executors_to_drop(tasks, failed_node="chief:0")
    accepted = eviction.drop_executors(sc, drops)
    while _task_slots(sc)[0] < 2 and time.monotonic() - failed < 50:
        time.sleep(0.2)
    slots_back = time.monotonic() - failed
    pids = sc.parallelize(range(2), 2).barrier().mapPartitions(lambda _: [os.getpid()]).collect()
    print("SEEN " + json.dumps({"tasks": [t.__dict__ for t in tasks], "drops": [d.message() for d in drops],
                               "accepted": accepted, "slots_back": slots_back, "pids": pids}), flush=True)
finally:
    sc.stop()
"""


def end_frozen_jvm(pid_file) -> int | None:
    """SIGKILL the executor JVM named in ``pid_file`` (stopped by the test's own script) if it is still there;
    return its pid, or None when none was recorded."""
    import psutil

    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text())
    try:
        process = psutil.Process(pid)
        if "CoarseGrainedExecutorBackend" in " ".join(process.cmdline()):
            process.kill()
            process.wait(10)
    except psutil.NoSuchProcess:
        pass
    return pid


@pytest.mark.integration
def test_a_frozen_executor_is_dropped_and_the_next_barrier_stage_runs_before_its_heartbeat_times_out(tmp_path):
    script = tmp_path / "frozen_executor.py"
    script.write_text(FROZEN_EXECUTOR)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    try:
        done = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180, cwd=str(tmp_path)
        )
    finally:
        # Spark's worker ends a dropped executor with SIGTERM, which a stopped JVM never handles: end it here
        frozen_jvm = end_frozen_jvm(tmp_path / "frozen-executor.pid")
    assert done.returncode == 0, done.stderr[-3000:]
    assert frozen_jvm is not None, "the frozen executor's pid was not recorded"
    seen = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("SEEN "))[5:])
    by_node = {t["node"]: t for t in seen["tasks"]}
    assert by_node["chief:0"]["status"] == "FAILED" and by_node["worker:0"]["status"] == "RUNNING"
    frozen = by_node["worker:0"]["executor_id"]
    assert seen["accepted"] == [frozen]
    assert seen["drops"] == [
        f"dropping executor {frozen} on {by_node['worker:0']['host']}: its TF node worker:0 is cut off or hangs; "
        "its task did not end within 10 s of the attempt's failure"
    ]
    # the replacement registered and a new barrier stage ran, well before the 60 s heartbeat timeout
    assert seen["slots_back"] < 45, seen
    assert len(seen["pids"]) == 2
