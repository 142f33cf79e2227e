"""The run directory on an HA pair of Hadoop's own NameNodes (``hadoop.py up --ha``), found from ``HADOOP_CONF_DIR``
alone: checkpoints keep landing while an administrator fails the pair over and back, the log names each switch,
and Hadoop's own client, through the nameservice, reads what was published.

The HA lab is HDFS alone (no YARN), started for this module only: a second lab beside the folder's."""

from __future__ import annotations

import getpass
import json
import logging
import threading
import time
import uuid

import pytest

from airflow_tfos.hooks.webhdfs_connection import config_without_connection
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage import join
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
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


def test_checkpoints_keep_landing_while_the_namenodes_fail_over_and_back(ha_lab, monkeypatch, caplog):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(ha_lab.conf_dir))
    monkeypatch.delenv("AIRFLOW_TFOS_WEBHDFS", raising=False)
    caplog.set_level(logging.INFO, logger="airflow_tfos")
    nn0, nn1 = (f"http://{nn['http']}" for nn in ha_lab.description["namenodes"])
    config = config_without_connection(user=getpass.getuser())
    assert config is not None and list(config.namenodes) == [nn0, nn1]  # both, from hdfs-site.xml alone
    path = f"/user/{getpass.getuser()}/runs/ha-{uuid.uuid4().hex[:8]}"
    rundir = RunDir(f"hdfs://lab{path}", storage=WebHDFSStorage(config))
    rundir.make_private()

    published: list[int] = []
    failed: list[BaseException] = []
    stop = threading.Event()

    def publish_one_after_another() -> None:
        step = 0
        try:
            while not stop.is_set():
                step += 1
                staging = rundir.checkpoint_staging(step)
                rundir.storage.write_bytes(join(staging, "ckpt.index"), f"index-{step}".encode())
                rundir.publish_checkpoint(staging, step, epoch=step, keep=2)
                published.append(step)
        except BaseException as exc:  # shown by the test, not lost in the thread
            failed.append(exc)

    writer = threading.Thread(target=publish_one_after_another, daemon=True)
    writer.start()

    def three_more(what: str) -> None:
        target = len(published) + 3
        _wait(lambda: len(published) >= target or failed, 120, what)

    answers = []
    try:
        three_more("three checkpoints")
        answers.append(hadoop.control(ha_lab.conf_dir, "failover"))
        three_more("three checkpoints after the failover")
        answers.append(hadoop.control(ha_lab.conf_dir, "failover"))
        three_more("three checkpoints after failing back")
    finally:
        stop.set()
        writer.join(120)
    assert not failed, failed
    assert answers[0].startswith("nn1 active, nn0 standby") and answers[1].startswith("nn0 active, nn1 standby")
    # The client found each new active NameNode and said so: nn1 after the failover, nn0 after the failback.
    switches = [r.getMessage() for r in caplog.records if SWITCHED in r.getMessage()]
    assert [nn1 in m for m in switches] == [True, False] and nn0 in switches[1], switches
    assert published == list(range(1, len(published) + 1))  # none lost, none twice

    # Hadoop's own client, through the nameservice's failover proxy, reads the last checkpoint published.
    last = published[-1]
    found = {e["path"]: e for e in ha_lab.inspect(f"{path}/checkpoints")[f"{path}/checkpoints"]}
    manifest = json.loads(found[f"{path}/checkpoints/manifest.json"]["text"])
    assert (manifest["latest"]["name"], manifest["latest"]["step"]) == (f"ckpt-{last}", last)
    assert found[f"{path}/checkpoints/ckpt-{last}/ckpt.index"]["text"] == f"index-{last}"
    assert {p.rsplit("/", 1)[-1] for p in found if p.count("/") == path.count("/") + 2} == {
        f"ckpt-{last - 1}",
        f"ckpt-{last}",
        "manifest.json",
    }
    assert json.loads(hadoop.control(ha_lab.conf_dir, "status"))["namenodes"] == ["active", "standby"]
