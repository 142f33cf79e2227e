"""The driver drops a frozen executor of a failed attempt, on a local cluster of its own, and the next barrier
stage runs before the executor's heartbeat times out. Which executors it drops:
tests/unit/airflow_tfos/runtime/driver/test_eviction.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

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
