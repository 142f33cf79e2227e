"""TensorBoard for a log directory on HDFS (the WebHDFS emulator): mirrored to the chief's disk while it trains."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from airflow_tfos.runtime.compat import TFCluster
from airflow_tfos.runtime.node.tensorboard import LogDirMirror, tensorboard_argv
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage import storage_for
from tests.integration.spark.test_listening import assert_listens_as_documented
from tests.unit.airflow_tfos.runtime.node.test_tensorboard import record

log = logging.getLogger(__name__)


def test_local_log_dirs_go_to_tensorboard_and_remote_ones_through_the_mirror():
    assert tensorboard_argv("file:///logs/a", "h", 6006, python="py") == [
        "py",
        "-m",
        "tensorboard.main",
        "--logdir",
        "/logs/a",
        "--host",
        "h",
        "--port",
        "6006",
    ]
    argv = tensorboard_argv("hdfs://ns/logs/a", "h", 6006, python="py")
    assert argv[:5] == ["py", "-m", "airflow_tfos.runtime.node.tensorboard", "--logdir", "hdfs://ns/logs/a"]


def test_the_mirror_appends_what_an_event_file_grew_by_and_rewrites_a_replaced_one(emu, tmp_path):
    remote = emu.uri("/logs/run")
    storage = storage_for(remote)
    mirror = LogDirMirror(remote, str(tmp_path))
    assert mirror.sync() == 0  # no log directory yet: nothing, no error
    first, second = record(b"first"), record(b"second")
    storage.write_bytes(f"{remote}/train/events.out.tfevents.1", first)
    storage.write_bytes(f"{remote}/validation/events.out.tfevents.2", b"v")
    assert mirror.sync() == 2 and mirror.sync() == 0
    local = tmp_path / "train" / "events.out.tfevents.1"
    inode = local.stat().st_ino
    storage.write_bytes(f"{remote}/train/events.out.tfevents.1", first + second)
    assert mirror.sync() == 1
    assert local.read_bytes() == first + second and local.stat().st_ino == inode  # appended in place
    storage.write_bytes(f"{remote}/train/events.out.tfevents.1", b"other")
    assert mirror.sync() == 1 and local.read_bytes() == b"other"
    assert (tmp_path / "validation" / "events.out.tfevents.2").read_bytes() == b"v"


def wait_for_training(args, ctx):
    import tensorflow as tf

    tf.distribute.MultiWorkerMirroredStrategy()  # each node's TF server listens, as while training
    deadline = time.time() + 120
    while time.time() < deadline and not Path(args["stop_file"]).exists():
        time.sleep(0.2)


def scalars(url: str, run: str, tag: str) -> list[tuple[int, float]]:
    try:
        with urllib.request.urlopen(f"{url}/data/plugin/scalars/scalars?run={run}&tag={tag}", timeout=5) as answer:
            return [(int(step), float(value)) for _, step, value in json.load(answer)]
    except OSError:  # not serving yet, or no such run yet (HTTP 400)
        return []


def write_losses(writer, steps) -> None:
    import tensorflow as tf

    with writer.as_default():
        for step in steps:
            tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
    writer.flush()


@pytest.mark.integration
def test_tensorboard_url_serves_a_log_dir_on_hdfs_as_it_grows(sc, emu, tmp_path):
    import tensorflow as tf
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    log_dir = emu.uri("/user/trainer/mnist_model")
    stop_file = tmp_path / "stop"
    cluster = TFCluster.run(
        sc,
        wait_for_training,
        {"stop_file": str(stop_file)},
        2,
        0,
        tensorboard=True,
        master_node="chief",
        log_dir=log_dir,
    )
    try:
        url = cluster.tensorboard_url()
        assert url and url.startswith("http://127.0.0.1:")
        run_dir = RunDir(cluster._run.run_dir)
        assert run_dir.read_tensorboard()["url"] == url  # what the training task's TensorBoard link reads
        # What a training program does on a cluster where TF cannot write HDFS: log locally, upload.
        local = tmp_path / "events"
        writer = tf.summary.create_file_writer(str(local / "train"))
        write_losses(writer, range(3))
        storage_for(log_dir).put_dir(str(local), log_dir)
        started = time.monotonic()
        deadline = started + 60
        while time.monotonic() < deadline and len(scalars(url, "train", "loss")) < 3:
            time.sleep(0.5)
        seen = scalars(url, "train", "loss")
        assert seen == [(s, pytest.approx(1.0 / (s + 1))) for s in range(3)]
        shown_after = time.monotonic() - started
        ports = [node["port"] for node in cluster.cluster_info]
        assert_listens_as_documented(cluster.cluster_id, ports, url)  # docs/network.md's list

        write_losses(writer, range(3, 6))  # the same event file grows
        storage_for(log_dir).put_dir(str(local), log_dir)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(scalars(url, "train", "loss")) < 6:
            time.sleep(0.5)
        assert scalars(url, "train", "loss") == [(s, pytest.approx(1.0 / (s + 1))) for s in range(6)]
        assert len(os.listdir(local / "train")) == 1
        log.info("TensorBoard showed the first scalars %.1f s after their upload", shown_after)
    finally:
        stop_file.touch()
        cluster.shutdown(timeout=120)
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)
    assert run_dir.read_tensorboard() is None  # TensorBoard stopped: no address is left to link
