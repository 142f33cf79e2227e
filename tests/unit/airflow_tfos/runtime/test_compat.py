"""The TFoS compatibility layer's pure parts, checked against TensorFlowOnSpark 2.2.5's own functions."""

from __future__ import annotations

import errno
import getpass
import socket
from types import SimpleNamespace

import pytest

from airflow_tfos.runtime.compat import TFManager, TFNode, TFSparkNode, dfutil
from airflow_tfos.runtime.program.context import NodeContext
from airflow_tfos.testing.ports import free_port

USER = getpass.getuser()

# (defaultFS, working_dir, path): every case TFoS's hdfs_path code and its tests name.
HDFS_PATH_CASES = [
    (fs, "/home/u/work", path)
    for fs in ("hdfs://", "hdfs://namenode:8020", "viewfs://", "viewfs://cluster", "file://")
    for path in (
        "foo/bar",
        "/foo/bar",
        "hdfs:///foo/bar",
        "hdfs://nn:8020/foo/bar",
        "viewfs:///foo/bar",
        "file:///foo/bar",
        "s3a://bucket/foo",
    )
] + [("file://", "/", "foo"), ("s3a://bucket", "/home/u", "foo/bar"), ("s3a://bucket", "/home/u", "/foo")]


@pytest.mark.parametrize(("default_fs", "working_dir", "path"), HDFS_PATH_CASES)
def test_hdfs_path_matches_tfos(default_fs, working_dir, path):
    from tensorflowonspark import TFNode as tfos_node

    ctx = SimpleNamespace(defaultFS=default_fs, working_dir=working_dir)
    assert TFNode.hdfs_path(ctx, path) == tfos_node.hdfs_path(ctx, path)


def test_hdfs_path_examples_and_deliberate_differences_from_tfos():
    def ctx(fs):
        return SimpleNamespace(defaultFS=fs, working_dir="/w")

    assert TFNode.hdfs_path(ctx("hdfs://"), "foo/bar") == f"hdfs:///user/{USER}/foo/bar"
    assert TFNode.hdfs_path(ctx("viewfs://"), "foo/bar") == f"viewfs:///user/{USER}/foo/bar"
    assert TFNode.hdfs_path(ctx("file://"), "foo") == "file:///w/foo"
    # TFoS doubled the slash after a defaultFS ending in one, and put unlisted schemes under defaultFS.
    assert TFNode.hdfs_path(ctx("hdfs://nn:8020/"), "/data") == "hdfs://nn:8020/data"
    assert TFNode.hdfs_path(ctx("file:///"), "/data") == "file:///data"
    assert TFNode.hdfs_path(ctx("hdfs://nn"), "gs://bucket/x") == "gs://bucket/x"


def node_context(**fields) -> NodeContext:
    base = {"executor_id": 0, "job_name": "worker", "task_index": 0, "cluster_spec": {}, "host": "127.0.0.1"}
    return NodeContext(**{**base, "num_workers": 1, "num_nodes": 1, "port": 0, **fields})


def test_context_holds_the_port_until_released():
    port = free_port()
    ctx = TFSparkNode.TFNodeContext.of(node_context(port=port), hold_port=True)
    assert ctx.tmp_socket.getsockname()[1] == port
    with socket.socket() as other, pytest.raises(OSError) as taken:
        other.bind(("", port))
    assert taken.value.errno == errno.EADDRINUSE
    TFNode.release_port(ctx)
    assert ctx.tmp_socket is None
    with socket.socket() as other:
        other.bind(("", port))  # free again
    ctx.release_port()  # a second release only warns, as in TFoS


def test_context_keeps_the_runtime_fields_and_holds_nothing_by_default():
    original = node_context(executor_id=2, task_index=1, port=free_port(), default_fs="hdfs://nn")
    ctx = TFSparkNode.TFNodeContext.of(original, hold_port=False)
    assert ctx.tmp_socket is None and ctx.mgr is None
    assert (ctx.worker_num, ctx.task_index, ctx.defaultFS) == (2, 1, "hdfs://nn")


def test_tfos_manager_calls_name_the_replacement():
    ctx = TFSparkNode.TFNodeContext.of(node_context(mgr=SimpleNamespace(path="/spill", epochs=2)), hold_port=False)
    assert (ctx.mgr.path, ctx.mgr.epochs) == ("/spill", 2)  # what DataFeed reads passes through
    for call in (lambda: ctx.mgr.get_queue("input"), lambda: ctx.mgr.get("state"), lambda: ctx.mgr.set("k", 1)):
        with pytest.raises(NotImplementedError, match=r"TFNode.DataFeed\(ctx.mgr\)"):
            call()
    with pytest.raises(NotImplementedError, match="TFManager.connect is not available.*DataFeed"):
        TFManager.connect(("127.0.0.1", 1), b"key")
    with pytest.raises(NotImplementedError, match="TFManager.start"):
        TFManager.start(b"key", ["input"])


def test_tfos_modules_without_counterpart_raise_naming_the_alternative():
    with pytest.raises(NotImplementedError, match="reservation is not available.*barrier"):
        from airflow_tfos.runtime.compat import reservation  # noqa: F401


# --- dfutil -------------------------------------------------------------------------------------------

DTYPES = [
    ("i", "int"),
    ("l", "bigint"),
    ("f", "float"),
    ("d", "double"),
    ("s", "string"),
    ("raw", "binary"),
    ("fa", "array<double>"),
    ("ia", "array<bigint>"),
]
ROW = {
    "i": 7,
    "l": 2**40,
    "f": 0.5,
    "d": 1.25,
    "s": "héllo",
    "raw": bytearray(b"\x00\xff"),
    "fa": [0.1, 0.2, 0.3],
    "ia": [1, 2],
}


def test_examples_are_serialized_as_tfos_serializes_them():
    from tensorflowonspark import dfutil as tfos_dfutil

    ours = dfutil.toTFExample(DTYPES)([ROW])
    assert ours == tfos_dfutil.toTFExample(DTYPES)([ROW])


def test_schema_and_rows_inferred_from_examples_as_tfos_infers_them():
    from tensorflowonspark import dfutil as tfos_dfutil

    serialized = dfutil.toTFExample(DTYPES)([ROW])
    example = tfos_example(serialized[0][0])
    for binary in ([], ["raw"]):
        assert dfutil.infer_schema(example, binary) == tfos_dfutil.infer_schema(example, binary)
    assert dfutil.fromTFExample(serialized, ["raw"]) == tfos_dfutil.fromTFExample(serialized, ["raw"])
    row = dfutil.fromTFExample([bytes(serialized[0][0])], ["raw"])[0]  # plain serialized records too
    assert row.raw == bytearray(b"\x00\xff") and row.s == "héllo" and row.ia == [1, 2]


def test_booleans_are_written_as_int64_where_current_protobuf_failed_tfos():
    rows = dfutil.fromTFExample(
        dfutil.toTFExample([("b", "boolean"), ("bs", "array<boolean>")])([{"b": True, "bs": [True, False]}])
    )
    assert (rows[0].b, rows[0].bs) == (1, [1, 0])


def tfos_example(data):
    import tensorflow as tf

    example = tf.train.Example()
    example.ParseFromString(bytes(data))
    return example


def test_empty_features_read_as_none_where_tfos_failed():
    import tensorflow as tf

    example = tf.train.Example(
        features=tf.train.Features(feature={"x": tf.train.Feature(int64_list=tf.train.Int64List(value=[]))})
    )
    assert dfutil.fromTFExample([example.SerializeToString()])[0].x is None
    # The column keeps the feature's kind (TFoS typed every empty feature as string).
    assert dfutil.infer_schema(example).simpleString() == "struct<x:bigint>"


def test_unsupported_types_and_nulls_are_refused_naming_the_column():
    with pytest.raises(TypeError, match=r"cannot write when \(timestamp\), m \(map<string,int>\)"):
        dfutil.toTFExample([("when", "timestamp"), ("ok", "int"), ("m", "map<string,int>")])
    with pytest.raises(ValueError, match="column 'i' is null.*df.na.fill"):
        dfutil.toTFExample([("i", "int")])([{"i": None}])
