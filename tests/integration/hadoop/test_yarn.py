"""Spark on Hadoop's own YARN, through the project's YARN backend: spark-submit in cluster mode as
TFoSTrainOperator submits (tag, ``waitAppCompletion=false``), the ResourceManager found from ``HADOOP_CONF_DIR``
alone (no ``yarn`` connection), and the application found by its tag, followed and killed through the RM's REST
API by :class:`~airflow_tfos.hooks.yarn.YarnHook`."""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from airflow_tfos.hooks.backends.base import Submission
from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.backends.yarn import YarnBackend
from airflow_tfos.hooks.errors import ApplicationAlreadyRunningError, TFoSSubmitError
from airflow_tfos.hooks.spark_conf import training_conf
from airflow_tfos.hooks.tfos import TFoSHook
from airflow_tfos.hooks.webhdfs_connection import config_without_connection
from airflow_tfos.hooks.yarn import YarnHook
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage

pytestmark = pytest.mark.real_hadoop

APP = Path(__file__).with_name("yarn_app.py")
SPARK_CONN = "spark_hadoop_lab"


@pytest.fixture
def backend(spark_on_lab, monkeypatch, tmp_path) -> YarnBackend:
    """The YARN backend with no ``yarn`` connection: the RM comes from the lab's yarn-site.xml."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(spark_on_lab.conf_dir))
    monkeypatch.setenv("SPARK_CONF_DIR", str(spark_on_lab.conf_dir))
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN.upper()}", json.dumps({"conn_type": "spark", "host": "yarn"}))
    return YarnBackend(
        YarnHook(yarn_conn_id="yarn_hadoop_lab"),
        tracker_dir=str(tmp_path / "tracker"),
        staging_storage=lambda: WebHDFSStorage(config_without_connection()),  # HDFS as HADOOP_CONF_DIR names it
    )


def submission(tmp_path: Path, tag: str, *args: str) -> Submission:
    """The tiny application, with the Spark settings a training run gets on YARN (one executor of 512 MB)."""
    import pyspark

    conf = training_conf(
        backend="yarn",
        tag=tag,
        num_nodes=1,
        executor_memory="512m",
        # the rest (Spark's jars on HDFS, the containers' packed Python, 127.0.0.1) is the lab's spark-defaults.conf
        # and its NodeManagers' environment, as on a cluster
        user_conf={"spark.driver.memory": "512m"},
    )
    return Submission(
        application=str(APP),
        args=args,
        name=f"hadoop-lab-{tag}",
        tag=tag,
        run_dir=str(tmp_path / "run"),
        conf=conf,
        spark_conn_id=SPARK_CONN,
        spark_binary=str(Path(pyspark.__file__).parent / "bin" / "spark-submit"),
        cache_dir=str(tmp_path / "cache"),
        num_nodes=1,
        executor_memory="512m",
    )


def wait_for(backend: YarnBackend, app_id: str, done, timeout: float = 300) -> AppState:
    """Poll the RM through the hook until ``done(state)``; fail naming the last state after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        state = backend.hook.get_application(app_id)
        if done(state) or time.monotonic() > deadline:
            return state
        time.sleep(1)


def _application_master(app_id: str, within: float = 60) -> int:
    """The pid of the application master's JVM (the driver, in cluster mode): a container process of the lab.

    The JVM itself, whose first argument is ``java``: the shell of the container's launch script names the same
    class and application on its command line, and killing that shell instead would let the NodeManager stop the
    JVM with SIGTERM, whose shutdown hook removes the staging folder (which is what Spark does on a clean end)."""
    deadline = time.monotonic() + within
    while True:
        seen = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            cmdline = b" ".join(argv).decode(errors="replace")
            if "org.apache.spark.deploy.yarn.ApplicationMaster" in cmdline and app_id in cmdline:
                seen.append(cmdline[:120])
                if Path(argv[0].decode(errors="replace")).name == "java":
                    return int(entry.name)
        if time.monotonic() > deadline:
            raise AssertionError(f"no application master JVM of {app_id}; processes naming it: {seen}")
        time.sleep(0.2)


def test_an_application_whose_master_is_killed_fails_and_the_task_removes_what_it_staged(backend, hadoop_lab, tmp_path):
    # The application master's JVM dies as on a lost node or under the kernel's OOM killer: Spark has no chance to
    # remove its staging folder (it does when it ends its last attempt itself); the task that sees it failed does.
    tag = f"tfos-lab-{uuid.uuid4().hex[:8]}"
    app_id = backend.submit(submission(tmp_path, tag, "600"))
    assert [app.app_id for app in backend.find_by_tag(tag)] == [app_id]  # found by its tag
    running = wait_for(backend, app_id, lambda s: s.state == "RUNNING" or s.is_terminal, timeout=180)
    assert running.state == "RUNNING", running
    os.kill(_application_master(app_id), signal.SIGKILL)
    failed = wait_for(backend, app_id, lambda s: s.is_terminal, timeout=120)
    assert (failed.state, failed.final_status) == ("FAILED", "FAILED"), failed
    staging = f"/user/{getpass.getuser()}/.sparkStaging/{app_id}"
    assert hadoop_lab.inspect(staging)[staging], "the staging folder was gone before the task's clean-up"

    TFoSHook(spark_conn_id=SPARK_CONN, yarn_conn_id="yarn_hadoop_lab").clean_up(failed)  # what the task's end does
    assert hadoop_lab.inspect(staging)[staging] is None
    assert backend.find_live(tag) == []


def test_a_running_application_is_refused_a_second_submit_and_killed_through_the_hook(backend, hadoop_lab, tmp_path):
    tag = f"tfos-lab-{uuid.uuid4().hex[:8]}"
    app_id = backend.submit(submission(tmp_path, tag, "600"))
    running = wait_for(backend, app_id, lambda s: s.state == "RUNNING" or s.is_terminal, timeout=180)
    assert running.state == "RUNNING", running

    with pytest.raises(ApplicationAlreadyRunningError):
        backend.submit(submission(tmp_path, tag, "600"))
    staging = f"/user/{getpass.getuser()}/.sparkStaging/{app_id}"
    assert hadoop_lab.inspect(staging)[staging], "spark-submit staged nothing"
    killed = backend.kill(app_id, grace_secs=60)
    assert killed.state == "KILLED", killed
    assert backend.find_live(tag) == []
    assert [app.state for app in backend.find_by_tag(tag)] == ["KILLED"]
    # what spark-submit staged for it on HDFS is gone too (the jars, the zips, the settings)
    assert hadoop_lab.inspect(staging)[staging] is None


def test_a_queue_that_does_not_exist_fails_the_submit_with_the_resource_managers_answer_first(backend, tmp_path):
    tag = f"tfos-lab-{uuid.uuid4().hex[:8]}"
    planned = submission(tmp_path, tag)
    planned = dataclasses.replace(planned, conf={**planned.conf, "spark.yarn.queue": "no-such-queue"})
    with pytest.raises(TFoSSubmitError) as refused:
        backend.submit(planned)
    first = str(refused.value).splitlines()[0]
    assert "no-such-queue" in first and "spark-submit" not in first, first
    assert backend.find_live(tag) == []
