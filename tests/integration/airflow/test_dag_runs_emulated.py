"""Real DAG runs (``airflow dags test`` on SQLite) on the YARN path, with run directories on HDFS: both reached
through their protocol emulators, which run here, in the test's process, for what the Hadoop lab does not do
yet: a lifecycle's launch that is not serving within ready_timeout leaves nothing running. (Training on YARN from
HADOOP_CONF_DIR alone, exported to HDFS and run again, its OpenLineage parent, and an HA pair of NameNodes, are
tested on Hadoop's own YARN and HDFS: tests/integration/hadoop/.)

- HDFS: :class:`~airflow_tfos.testing.webhdfs.WebHDFSEmulator` (an active and a standby namenode), reached
  through a ``webhdfs`` connection (Airflow side) and the settings TFoSHook hands the driver in its private
  properties file (Spark side).
- YARN: :class:`~airflow_tfos.testing.yarn.ResourceManagerEmulator` (an active and a standby RM) and a
  stand-in ``spark-submit``
  (tests/integration/airflow/yarn_driver_fakes.py) that starts the REAL driver on ``local-cluster[2,1,1024]``
  and registers it with the emulator, which reports its state from the real process.

Spark, TensorFlow and Airflow are real. The DAGs are in tests/integration/airflow/emulated_dags/. Not emulated: a
graceful stop. A stop request names the YARN application id, which a driver on local-cluster does not know
itself by, so a shutdown here ends in a kill after its grace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from airflow_tfos.hooks.run_dir import default_run_dir
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from airflow_tfos.testing.yarn import ResourceManagerEmulator
from tests.conftest import REPO
from tests.integration.airflow.yarn_driver_fakes import CONTAINER_ENV, YarnDriverBroker, write_spark_submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

DAGS = Path(__file__).parent / "emulated_dags"
DAG_ID, LOGICAL_DATE = "tfos_em_train", "2026-11-21"
NAMESERVICE = "emuns"


def dags_test(
    env: dict[str, str], timeout: float = 300, dag_id: str = DAG_ID, date: str = LOGICAL_DATE
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", dag_id, date],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def succeeded(done: subprocess.CompletedProcess) -> bool:
    return done.returncode == 0 and "state=failed" not in done.stdout + done.stderr


def tail(done: subprocess.CompletedProcess, broker: YarnDriverBroker | None = None) -> str:
    text = (done.stdout + done.stderr)[-6000:]
    for submission in broker.submissions if broker else []:
        text += f"\n--- driver of {submission['app_id']} ---\n" + submission["log"].read_text()[-3000:]
    return text


@dataclass
class Emulated:
    """The emulators, the broker that starts the real drivers, and the environment of ``airflow dags test``."""

    hdfs: WebHDFSEmulator
    rm: ResourceManagerEmulator
    broker: YarnDriverBroker
    env: dict[str, str]

    def submissions(self, dag_id: str) -> list[dict]:
        """The broker's submissions of ``dag_id``'s tasks (their application name says whose they are)."""
        return [s for s in self.broker.submissions if f" {dag_id}." in s["name"]]


@pytest.fixture(scope="module")
def emulated(tmp_path_factory) -> Iterator[Emulated]:
    """WebHDFS and ResourceManager emulators, the driver broker and one migrated Airflow home, for the module."""
    tmp_path = tmp_path_factory.mktemp("emulated")
    home = tmp_path / "airflow"
    bin_dir = write_spark_submit(tmp_path / "bin").parent
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    # the drivers get HDFS settings only as YARN would give them: from the submission, not from this process
    driver_env = {k: v for k, v in os.environ.items() if k != WEBHDFS_ENV}
    driver_env.update({"PYTHONPATH": python_path, "SPARK_LOCAL_IP": "127.0.0.1"})

    with (
        WebHDFSEmulator(namenodes=2) as hdfs,  # the first active, the second standby
        ResourceManagerEmulator(ha=True) as rm,  # the first active, the second standby
        YarnDriverBroker(rm, log_dir=tmp_path / "drivers", env=driver_env) as broker,
    ):
        port = int(hdfs.url.rsplit(":", 1)[1])
        env = {
            **{k: v for k, v in os.environ.items() if k != WEBHDFS_ENV},
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW_CONN_SPARK_TFOS_EM": json.dumps({"conn_type": "spark", "host": "yarn"}),
            "AIRFLOW_CONN_YARN_TFOS_EM": json.dumps(
                {"conn_type": "yarn", "host": ",".join(rm.addresses), "login": "airflow"}
            ),
            "AIRFLOW_CONN_WEBHDFS_TFOS_EM": json.dumps(
                {
                    "conn_type": "webhdfs",
                    "host": "127.0.0.1",
                    "port": port,
                    "login": "airflow",
                    "extra": {"nameservice": NAMESERVICE},
                }
            ),
            "AIRFLOW_TFOS_RUN_DIR_BASE": f"hdfs://{NAMESERVICE}/tfos-runs",
            "AIRFLOW_TFOS_LOCAL_DIR": str(tmp_path / "tfos-local"),
            "FAKE_SPARK_SUBMIT_CALLS": str(tmp_path / "spark-submit-calls.jsonl"),
            "FAKE_YARN_DRIVER_BROKER": broker.url,
            "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
            "PYTHONPATH": python_path,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        migrated = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
        )
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        yield Emulated(hdfs, rm, broker, env)


def _application_processes(submission: dict) -> dict[int, tuple[float, str]]:
    """The live processes of a driver the broker started: its process tree, and every process carrying its
    container's marker in its environment (pid -> start time, command)."""
    found: list[psutil.Process] = []
    try:
        root = psutil.Process(submission["pid"])
        found += [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        pass
    for process in psutil.process_iter():
        try:
            if process.uids().real == os.getuid() and process.environ().get(CONTAINER_ENV) == submission["container"]:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    live = {}
    for process in found:
        try:
            if process.status() != psutil.STATUS_ZOMBIE:
                live[process.pid] = (process.create_time(), _kind(process.cmdline()))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return live


def _kind(argv: list[str]) -> str:
    """What a process of the application is: the module a Python runs, the main class a JVM runs."""
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1]
    classes = [a for a in argv if a.startswith("org.apache.")]
    return classes[0].rsplit(".", 1)[-1] if classes else " ".join(argv)[:60]


def _still_alive(pid: int, started: float) -> bool:
    try:
        process = psutil.Process(pid)
        return abs(process.create_time() - started) < 0.01 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_failed_launch_on_yarn_leaves_nothing_running_and_the_shutdown_still_runs(emulated):
    """Issue 24 on the YARN backend: the application the launch submitted is not serving within ready_timeout;
    the launch kills it through the ResourceManager and fails, and the shutdown (all_done, no XCom) still runs.
    The emulator reports the application KILLED, and no process of it (the driver, executors, Python workers,
    TF nodes) is left."""
    dag_id, date = "tfos_em_launch_fails", "2026-11-22"
    seen: dict[int, tuple[float, str]] = {}
    last_alive = [0.0]  # when a process of the application was last seen alive
    done = threading.Event()

    def watch() -> None:  # every process of the application, as it appears
        while not done.wait(0.2):
            for submission in emulated.submissions(dag_id):
                live = _application_processes(submission)
                seen.update(live)
                if live:
                    last_alive[0] = time.monotonic()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    started = time.monotonic()
    try:
        run = dags_test(emulated.env, dag_id=dag_id, date=date)
    finally:
        done.set()
        watcher.join(timeout=30)
    ended = time.monotonic()
    out = run.stdout + run.stderr
    assert not succeeded(run)
    assert "(ready_timeout): it was stopped" in out, tail(run, emulated.broker)
    assert "UndefinedError" not in out  # the shutdown needs no XCom of the launch to render
    assert "nothing to stop" in out  # it ran (all_done) and found the application already gone

    (submission,) = emulated.submissions(dag_id)
    app = emulated.rm.application(submission["app_id"])
    assert (app["state"], app["finalStatus"]) == ("KILLED", "KILLED"), app
    assert submission["pid"] in seen
    seen.update(_application_processes(submission))
    deadline = time.monotonic() + 30
    while any(_still_alive(pid, at) for pid, (at, _) in seen.items()) and time.monotonic() < deadline:
        last_alive[0] = time.monotonic()
        time.sleep(0.2)
    left = {pid: command for pid, (at, command) in seen.items() if _still_alive(pid, at)}
    assert left == {}, f"processes of the killed application are left: {left}"

    run_dir = default_run_dir(
        f"hdfs://{NAMESERVICE}/tfos-runs", dag_id, "launch", datetime(2026, 11, 22, tzinfo=UTC), ""
    )
    rundir = RunDir(run_dir, storage=WebHDFSStorage(emulated.hdfs.config(user="airflow", nameservice=NAMESERVICE)))
    (failed,) = rundir.events("launch_failed")
    assert failed["application_id"] == submission["app_id"]
    kinds = sorted(kind for _, kind in seen.values())
    sys.stdout.write(
        f"failed launch on YARN: {len(seen)} processes of the application seen ({', '.join(kinds)}); the last "
        f"seen alive {last_alive[0] - started:.1f} s after the run began; the DAG run took {ended - started:.0f} s\n"
    )
