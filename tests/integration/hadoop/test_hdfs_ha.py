"""The run directory on an HA pair of Hadoop's own NameNodes (``hadoop.py up --ha``), found from ``HADOOP_CONF_DIR``
alone: a training run goes on while an administrator fails the pair over and back, checkpoints keep landing, the
chief's log names each switch, and Hadoop's own client, through the nameservice, reads what was published.

The HA lab is HDFS alone (no YARN), started for this module only: a second lab beside the folder's."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyspark
import pytest

from airflow_tfos.hooks.webhdfs_connection import config_without_connection
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV, env_value
from tests.conftest import REPO
from tests.integration.hadoop.conftest import Lab, hadoop

pytestmark = pytest.mark.real_hadoop

SWITCHED = "answers; using it from now on"


@pytest.fixture(scope="module")
def ha_lab(tmp_path_factory):
    conf_dir = tmp_path_factory.mktemp("hadoop-ha-lab")
    try:
        description = hadoop.up(conf_dir, datanodes=2, nodemanagers=0, vcores=1, heap="512m", timeout=240, ha=True)
    except BaseException:
        hadoop.down(conf_dir)
        raise
    try:
        yield Lab(conf_dir, description, {"up_s": description["up_seconds"]})
    finally:
        hadoop.down(conf_dir)


def _wait(check, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"timed out after {within:.0f} s waiting for {what}"
        time.sleep(0.1)


def test_drill_a_training_run_goes_on_while_the_namenodes_fail_over_and_back(ha_lab, monkeypatch):
    """A TF cluster on a local Spark cluster, its run directory on the HA pair (``hdfs://lab/...``; both
    namenodes from ``HADOOP_CONF_DIR``, handed to the driver as a training task hands them, and by the driver to
    every TF node): the pair is failed over and back while it trains; checkpoints keep landing, the chief's log
    names each switch, and the run ends with every step in its first TF cluster."""
    monkeypatch.setenv("HADOOP_CONF_DIR", str(ha_lab.conf_dir))
    monkeypatch.delenv("AIRFLOW_TFOS_WEBHDFS", raising=False)
    nn0, nn1 = (f"http://{nn['http']}" for nn in ha_lab.description["namenodes"])
    config = config_without_connection(user=getpass.getuser())
    assert config is not None and list(config.namenodes) == [nn0, nn1]  # both, from hdfs-site.xml alone
    path = f"/user/{getpass.getuser()}/runs/ha-{uuid.uuid4().hex[:8]}"
    rundir = RunDir(f"hdfs://lab{path}", storage=WebHDFSStorage(config))
    rundir.make_private()
    # the HDFS settings as a training task hands them to its driver, derived from HADOOP_CONF_DIR (the runtime
    # alone does not read Hadoop's files)
    env = {**os.environ, "HADOOP_CONF_DIR": str(ha_lab.conf_dir), WEBHDFS_ENV: env_value(config.to_json())}
    work = Path(pyspark.__file__).parent / "work"  # a local cluster's executor logs, which hold their TF nodes' logs
    apps_before = set(work.glob("app-*"))
    driver = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.spark.driver_script", "remote", f"hdfs://lab{path}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def checkpoint() -> int:
        latest = rundir.latest_checkpoint()
        return latest.step if latest else 0

    answers, switched_at = [], []
    try:
        for _ in range(2):
            step = checkpoint()
            _wait(lambda s=step: checkpoint() > s or driver.poll() is not None, 240, "a checkpoint")
            answers.append(hadoop.control(ha_lab.conf_dir, "failover"))
            switched_at.append(time.time())
        step = checkpoint()
        _wait(lambda: checkpoint() > step or driver.poll() is not None, 120, "a checkpoint after failing back")
        out, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            out, err = driver.communicate()
    assert driver.returncode == 0, err[-4000:]
    assert answers[0].startswith("nn1 active, nn0 standby") and answers[1].startswith("nn0 active, nn1 standby")
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    assert result == {"step": 60, "attempt": 0}  # every step, in the one TF cluster: no node failed
    # checkpoints landed after each switch, published through whichever namenode was active
    times = [e["time"] for e in rundir.events("checkpoint")]
    assert all(any(t > at for t in times) for at in switched_at), (times, switched_at)
    # the chief's client, which published the checkpoints, found each new active namenode and said so in its log:
    # nn1 after the failover, nn0 after the failback (the driver only reads, which the standby answered too)
    new_apps = set(work.glob("app-*")) - apps_before
    logs = "".join(f.read_text(errors="replace") for app in new_apps for f in app.glob("*/stderr"))
    switches = [line for line in logs.splitlines() if SWITCHED in line]
    assert any(nn1 in line for line in switches) and any(nn0 in line for line in switches), switches
    # Hadoop's own client, through the nameservice's failover proxy, reads the export of step 60
    found = {e["path"]: e for e in ha_lab.inspect(f"{path}/export")[f"{path}/export"]}
    assert json.loads(found[f"{path}/export/_SUCCESS"]["text"])["step"] == 60
    assert json.loads(hadoop.control(ha_lab.conf_dir, "status"))["namenodes"] == ["active", "standby"]
