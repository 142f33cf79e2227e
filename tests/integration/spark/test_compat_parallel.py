"""TFoS's TFParallel and TFCluster's release_port=False on a real local Spark cluster."""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

from airflow_tfos.runtime import ClusterConfigError, NodeFailedError
from airflow_tfos.runtime.compat import TFCluster, TFParallel
from tests.conftest import NUM_EXECUTORS

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def ship_this_module():
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def shard(n: int, index: int) -> np.ndarray:
    return np.arange(index * n, (index + 1) * n, dtype=np.float32) / 10


def infer(args, ctx):
    """A parallel inference instance: score this instance's shard with TF and record what ctx says."""
    import tensorflow as tf

    x = tf.constant(shard(args["rows"], ctx.worker_num))
    record = {
        "executor_id": ctx.executor_id,
        "worker_num": ctx.worker_num,
        "num_workers": ctx.num_workers,
        "defaultFS": ctx.defaultFS,
        "tf_config": os.environ.get("TF_CONFIG"),
        "scores": tf.math.sigmoid(x * 2.0 - 1.0).numpy().tolist(),
        "pid": os.getpid(),
    }
    Path(args["out"], f"instance-{ctx.executor_id}.json").write_text(json.dumps(record))


def record_ctx(args, ctx):
    if ctx.executor_id == args.get("fail_on"):
        raise ValueError(f"boom from instance {ctx.executor_id}")
    fields = {"executor_id": ctx.executor_id, "num_workers": ctx.num_workers, "pid": os.getpid()}
    Path(args["out"], f"instance-{ctx.executor_id}.json").write_text(json.dumps(fields))


def read_records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("instance-*.json"))]


def test_tfparallel_barrier_runs_independent_tf_instances(sc, tmp_path):
    instances = 2  # each imports TF: kept small for the test's time
    assert TFParallel.run(sc, infer, {"rows": 5, "out": str(tmp_path)}, instances) is None
    records = read_records(tmp_path)
    assert [r["executor_id"] for r in records] == list(range(instances))
    for r in records:
        assert r["worker_num"] == r["executor_id"] and r["num_workers"] == instances
        assert r["defaultFS"] == "file://" and r["tf_config"] is None  # independent instances, no cluster
        expected = 1 / (1 + np.exp(-(shard(5, r["executor_id"]) * 2.0 - 1.0)))
        np.testing.assert_allclose(r["scores"], expected, rtol=1e-5)
    assert len({r["pid"] for r in records}) == instances


def test_tfparallel_without_barrier_runs_more_instances_than_slots(sc, tmp_path):
    instances = NUM_EXECUTORS + 1
    TFParallel.run(sc, record_ctx, {"out": str(tmp_path)}, instances, use_barrier=False)
    records = read_records(tmp_path)
    assert [(r["executor_id"], r["num_workers"]) for r in records] == [(i, instances) for i in range(instances)]


def test_tfparallel_barrier_refuses_more_instances_than_slots(sc, tmp_path, monkeypatch):
    monkeypatch.setattr(TFParallel, "SLOT_WAIT_SECS", 0.5)
    with pytest.raises(ClusterConfigError, match=f"need {NUM_EXECUTORS + 1} concurrent task slots.*offers"):
        TFParallel.run(sc, record_ctx, {"out": str(tmp_path)}, NUM_EXECUTORS + 1)
    assert read_records(tmp_path) == []  # refused before any instance started


def test_tfparallel_instance_error_names_the_instance(sc, tmp_path):
    with pytest.raises(NodeFailedError, match="ValueError: boom from instance 0"):
        TFParallel.run(sc, record_ctx, {"out": str(tmp_path), "fail_on": 0}, 1, use_barrier=False)


def hold_port_main(args, ctx):
    from airflow_tfos.runtime.compat import TFNode

    held = ctx.tmp_socket.getsockname()[1]
    with socket.socket() as probe:
        try:
            probe.bind(("", ctx.port))
            refused = None
        except OSError as exc:
            refused = exc.errno
    TFNode.release_port(ctx)
    with socket.socket() as probe:
        probe.bind(("", ctx.port))  # TF's server could bind it now
    return {"held": held, "port": ctx.port, "refused": refused, "after": ctx.tmp_socket}


def test_release_port_false_holds_the_tf_port_until_released(sc):
    cluster = TFCluster.run(sc, hold_port_main, None, 1, 0, release_port=False)
    result = cluster.shutdown(timeout=120)
    assert result["held"] == result["port"] == cluster.cluster_info[0]["port"]
    assert result["refused"] == errno.EADDRINUSE and result["after"] is None
