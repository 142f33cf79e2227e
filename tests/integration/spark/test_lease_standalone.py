"""Two Airflow workers (two tracker directories) against one real Spark standalone master: one writer per run."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest

from airflow_tfos.hooks.backends.base import Submission
from airflow_tfos.hooks.backends.local import LocalSparkBackend
from airflow_tfos.hooks.backends.local_tracker import LocalBackend
from airflow_tfos.hooks.backends.standalone import carries_tag
from airflow_tfos.hooks.errors import ApplicationAlreadyRunningError
from airflow_tfos.shared.lease import read_lease, take_lease, wait_for_lease
from airflow_tfos.shared.rundir import RunDir
from tests.conftest import free_port, wait_for

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

SPARK_BIN = Path(pyspark.__file__).parent / "bin"
TAG = "tfos-lease-it"
LEASE_SECS = 4.0
CONF = {"spark.executor.memory": "512m", "spark.cores.max": "1", "spark.driver.host": "127.0.0.1",
        "spark.ui.enabled": "false", "spark.driver.memory": "512m"}  # fmt: skip

#: A driver that writes its status and one line per step into the run directory, slowly enough to overlap.
APP = textwrap.dedent(
    """
    import os, sys, time
    from pyspark import SparkContext
    from airflow_tfos.shared.rundir import RunDir

    run_dir, steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    sc = SparkContext()
    rundir = RunDir(run_dir)
    for step in range(1, steps + 1):
        total = sc.parallelize(range(100), 1).map(lambda x: x * x).sum()
        rundir.write_status("RUNNING", application_id=sc.applicationId, step=step)
        with open(os.path.join(run_dir, "writes.log"), "a") as log:
            log.write(f"{sc.applicationId} {time.time()} {step} {total}\\n")
        time.sleep(pause)
    rundir.write_status("SUCCEEDED", application_id=sc.applicationId, step=steps)
    sc.stop()
    """
)


def master_json(webui: str) -> dict:
    with urllib.request.urlopen(f"{webui}/json/", timeout=5) as reply:
        return json.loads(reply.read())


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A standalone master and one worker (1 core, 1 GB) on 127.0.0.1, ended by pid at teardown."""
    logs = tmp_path_factory.mktemp("standalone")
    port, webui = free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m"}
    started = []
    spark_class = str(SPARK_BIN / "spark-class")
    master = f"spark://127.0.0.1:{port}"
    commands = [
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(webui)],
        [spark_class, "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1", "-c", "1", "-m", "1g",
         "--webui-port", str(free_port())],
    ]  # fmt: skip
    try:
        for n, command in enumerate(commands):
            with open(logs / f"daemon{n}.log", "wb") as out:
                started.append(subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env))
        url = f"http://127.0.0.1:{webui}"

        def worker_alive():
            try:
                return any(w.get("state") == "ALIVE" for w in master_json(url).get("workers", []))
            except (OSError, ValueError):  # not up yet, or (while it starts) the master's HTML page at /json/
                return False

        wait_for(worker_alive, 60, "a standalone worker registered", every=0.5)
        yield master, url
    finally:
        for process in started:
            process.terminate()
        for process in started:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def submission(tmp_path: Path, run_dir: str, steps: int, pause: float) -> Submission:
    app = tmp_path / "slow_app.py"
    app.write_text(APP)
    return Submission(
        application=str(app),
        args=(run_dir, str(steps), str(pause)),
        name="tfos lease test",
        tag=TAG,
        run_dir=run_dir,
        conf=CONF,
        spark_conn_id="spark_standalone_it",
        cache_dir=str(tmp_path / "cache"),
        num_nodes=1,
        executor_memory="512m",
        spark_binary=str(SPARK_BIN / "spark-submit"),
        env_vars={"SPARK_LOCAL_IP": "127.0.0.1"},
    )


def test_a_second_worker_adopts_or_waits_and_never_starts_a_second_writer(standalone, tmp_path, monkeypatch):
    master, webui = standalone
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE_IT", json.dumps({"conn_type": "spark", "host": master}))
    worker_a = LocalSparkBackend(LocalBackend(str(tmp_path / "worker-a")), master=master, webui_url=webui)
    worker_b = LocalSparkBackend(LocalBackend(str(tmp_path / "worker-b")), master=master, webui_url=webui)
    assert worker_a.lease_owner != worker_b.lease_owner
    run_dir = str(tmp_path / "run")
    rundir = RunDir(run_dir)
    rundir.make_private()
    try:
        # worker A takes the lease and submits a slow run
        take_lease(rundir, owner=worker_a.lease_owner, backend="local", duration_secs=LEASE_SECS)
        first_local = worker_a.submit(submission(tmp_path, run_dir, steps=60, pause=0.5))
        take_lease(rundir, owner=worker_a.lease_owner, backend="local", application_id=first_local,
                   duration_secs=LEASE_SECS)  # fmt: skip
        status = wait_for(lambda: (s := rundir.read_status()) and s.get("step", 0) >= 2 and s, 90, "first run steps")
        first = status["application_id"]

        # worker B: its tracker knows nothing, the master lists the first application by its tagged name
        assert worker_b.tracker.find_live(TAG) == []
        seen = worker_b.find_live(TAG)
        assert [a.app_id for a in seen] == [first] and carries_tag(seen[0].name, TAG)
        adopted = wait_for_lease(rundir, owner=worker_b.lease_owner, find_live=lambda: worker_b.find_live(TAG),
                                 timeout_secs=10)  # fmt: skip
        assert adopted is not None and adopted.app_id == first
        with pytest.raises(ApplicationAlreadyRunningError, match=first):
            worker_b.submit(submission(tmp_path, run_dir, steps=3, pause=0.2))
        assert len(master_json(webui)["activeapps"]) == 1

        # worker B kills it through the master, then waits for A's lease to lapse before it submits
        killed = worker_b.kill(first, grace_secs=20)
        assert (killed.state, killed.final_status) == ("KILLED", "KILLED")
        assert worker_b.find_live(TAG) == []
        waited_from = time.time()
        assert wait_for_lease(rundir, owner=worker_b.lease_owner, find_live=lambda: worker_b.find_live(TAG),
                              timeout_secs=30, poll_secs=0.2) is None  # fmt: skip
        last_beat = float(rundir.read_status()["heartbeat"])
        assert time.time() >= last_beat + LEASE_SECS and time.time() - waited_from <= LEASE_SECS + 5
        take_lease(rundir, owner=worker_b.lease_owner, backend="local", duration_secs=LEASE_SECS)
        second_local = worker_b.submit(submission(tmp_path, run_dir, steps=3, pause=0.2))
        take_lease(rundir, owner=worker_b.lease_owner, backend="local", application_id=second_local,
                   duration_secs=LEASE_SECS)  # fmt: skip
        done = wait_for(lambda: (s := worker_b.get_state(second_local)).is_terminal and s, 90, "second run ended")
        assert done.is_successful, done.diagnostics
        assert wait_for(lambda: worker_a.get_state(first_local).is_terminal, 30, "first driver gone")
        assert read_lease(rundir).owner == worker_b.lease_owner

        # the master saw exactly two applications of the run; the run directory had one writer at a time
        data = master_json(webui)
        tagged = [a for a in data["activeapps"] + data["completedapps"] if carries_tag(a["name"], TAG)]
        log.warning("the standalone master saw %d applications of the run: %s", len(tagged),
                    [(a["id"], a["state"]) for a in tagged])  # fmt: skip
        assert sorted(a["state"] for a in tagged) == ["FINISHED", "KILLED"]
        writes = [line.split() for line in Path(run_dir, "writes.log").read_text().splitlines()]
        order = [app for app, *_ in writes]
        second = order[-1]
        assert second != first and set(order) == {first, second}
        assert order == sorted(order, key=lambda app: app == second), "the two applications' writes interleave"
        assert max(float(t) for app, t, *_ in writes if app == first) < min(
            float(t) for app, t, *_ in writes if app == second
        )
        assert [int(s) for app, _, s, _ in writes if app == second] == [1, 2, 3]
        assert all(int(total) == sum(x * x for x in range(100)) for *_, total in writes)
    finally:
        for worker in (worker_a, worker_b):
            for record in worker.tracker.records():
                worker.tracker.kill(record["app_id"], grace_secs=5)
