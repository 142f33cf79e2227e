"""The feed under parameter servers, without Spark: who gets rows, the record files, the chief's context."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from airflow_tfos.runtime.feed.native import NativeShares, record_columns, write_records
from airflow_tfos.runtime.feed.spark_side import feed_order, plan_shares, write_native_shares
from airflow_tfos.runtime.feed.spill import SpillWriter
from airflow_tfos.runtime.node.cluster import plan_roles
from airflow_tfos.runtime.program.context import NodeContext
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed


def test_under_parameter_servers_only_the_workers_get_rows():
    assert [r.label for r in feed_order(plan_roles(4, num_ps=1))] == ["worker:0", "worker:1"]
    assert [r.label for r in feed_order(plan_roles(5, num_ps=2, master_node="master"))] == ["worker:0", "worker:1"]
    # Without parameter servers (MultiWorkerMirroredStrategy), or without a chief, every training node reads.
    assert [r.label for r in feed_order(plan_roles(3))] == ["chief:0", "worker:0", "worker:1"]
    assert [r.label for r in feed_order(plan_roles(3, num_ps=1, master_node=None))] == ["worker:0", "worker:1"]
    with pytest.raises(FeedConfigError, match="no workers cannot be fed"):
        feed_order(plan_roles(2, num_ps=1))


def _spill(path: str, ids: range) -> dict:
    writer = SpillWriter(path, ["x", "y", "id"])
    values = np.array(list(ids), dtype="float64")
    writer.write(
        pa.record_batch(
            {
                "x": pa.array([[v, -v] for v in values], type=pa.list_(pa.float64())),
                "y": pa.array(values * 10),
                "id": pa.array(np.array(list(ids), dtype="int64")),
            }
        )
    )
    stats = writer.close()
    dtypes = {"x": "<f8", "y": "<f8", "id": "<i8"}
    info = {"rows": stats.rows, "widths": stats.widths, "dtypes": dtypes, "path": path, "bytes": stats.bytes}
    return {**info, "seconds": 0.1, "started_at": 0.0, "peak_rss_mb": 1.0}


def _infos(tmp_path, counts: dict[int, int]) -> list[dict]:
    """Spill info of a ps (0), a chief (1) and workers (2, 3...) holding ``counts[executor_id]`` rows."""
    infos, start = [], 0
    for executor_id in range(2 + len(counts)):
        rows = counts.get(executor_id, 0)
        spill = _spill(str(tmp_path / f"spill-{executor_id}.arrow"), range(start, start + rows))
        infos.append({"executor_id": executor_id, "spill": {"train": spill}})
        start += rows
    return infos


def test_the_chief_holds_no_rows_and_knows_the_steps_it_schedules(tmp_path):
    roles = plan_roles(4, num_ps=1)
    feed = Feed(features="x", label="y", batch_size=10)
    infos = _infos(tmp_path, {2: 35, 3: 40})
    chief, notes = plan_shares(infos, roles, roles[1], feed)
    worker, _ = plan_shares(infos, roles, roles[3], feed)
    ps, _ = plan_shares(infos, roles, roles[0], feed)
    assert ps == {}
    assert chief["train"].rows == 0 and chief["train"].path == ""
    assert worker["train"].rows == 40
    native = chief["train"].native
    assert native == worker["train"].native  # the same description on every node
    assert (native.steps_per_worker, native.num_workers, native.steps_per_epoch) == (4, 2, 8)
    assert native.rows_per_epoch == 40  # worker:0 repeats 5 of its 35 rows (balance "pad")
    assert [(c.name, c.dtype, c.width) for c in native.columns] == [("x", "<f4", 2), ("y", "<f8", 0)]
    assert native.record_bytes == 16
    assert any("the chief schedules 8 steps per epoch" in line for line in notes)
    ctx = NodeContext(1, "chief", 0, {"ps": ["a"], "chief": ["b"], "worker": ["c", "d"]}, 3, 4, "h", 1)
    ctx.feed_shares = chief
    assert ctx.steps_per_epoch == 8 and ctx.validation_steps is None
    assert callable(ctx.dataset_fn) and ctx.validation_dataset_fn is None
    for read in (ctx.dataset, ctx.batches):
        with pytest.raises(RuntimeError, match=r"create_per_worker_dataset\(ctx.dataset_fn\)"):
            read()
    pickle.loads(pickle.dumps(ctx))  # the context travels to the node process pickled


def test_a_worker_without_parameter_servers_has_no_dataset_fn(tmp_path):
    roles = plan_roles(2)
    infos = [{"executor_id": i, "spill": {"train": _spill(str(tmp_path / f"{i}.arrow"), range(20))}} for i in (0, 1)]
    shares, _ = plan_shares(infos, roles, roles[0], Feed(features="x", label="y", batch_size=10))
    ctx = NodeContext(0, "chief", 0, {"chief": ["a"], "worker": ["b"]}, 2, 2, "h", 1, feed_shares=shares)
    assert shares["train"].native is None and ctx.steps_per_epoch == 2
    with pytest.raises(RuntimeError, match=r"use ctx.dataset\(\)"):
        ctx.dataset_fn  # noqa: B018


def test_record_layout_casts_float_features_and_keeps_the_label():
    feed = Feed(features=["a", "img"], label="y", cast_floats="float32")
    columns = record_columns(feed, {"a": "<f8", "img": "<f8", "y": "<f8"}, {"img": 3})
    assert [(c.dtype, c.width, c.nbytes) for c in columns] == [("<f4", 0, 4), ("<f4", 3, 12), ("<f8", 0, 8)]
    ints = record_columns(Feed(features="b", label="l"), {"b": "|b1", "l": "<i4"}, {})
    assert [c.dtype for c in ints] == ["|b1", "<i4"]


def test_workers_record_files_read_natively_give_every_row_once_per_epoch(tmp_path):
    roles = plan_roles(4, num_ps=1)
    feed = Feed(features="x", label="y", batch_size=10, shuffle_window=7, seed=3)
    infos = _infos(tmp_path, {2: 35, 3: 40})
    node_dir = tmp_path / "worker0"
    node_dir.mkdir()
    mine, _ = plan_shares(infos, roles, roles[2], feed)
    written = write_native_shares(mine, str(node_dir))
    record_file = node_dir / written["train"].native.file_name
    assert written["train"].path == str(record_file) and record_file.stat().st_size == 35 * 16
    assert not (tmp_path / "spill-2.arrow").exists()  # the Arrow spill gave way to the record file
    (tmp_path / "native.pickle").write_bytes(pickle.dumps(written["train"].native))
    script = f"""
import json, pickle
import numpy as np
native = pickle.load(open({str(tmp_path / "native.pickle")!r}, "rb"))
once = native.dataset_fn(repeat=False)(None)
x_spec, y_spec = once.element_spec
print(int(once.cardinality()), x_spec.shape, x_spec.dtype.name, y_spec.dtype.name)
forever = iter(native.dataset_fn()(None))
for epoch in range(2):
    batches = [next(forever) for _ in range(native.steps_per_worker)]
    x = np.concatenate([b[0].numpy() for b in batches])
    y = np.concatenate([b[1].numpy() for b in batches])
    print(json.dumps({{"y": y.tolist(), "x_matches": bool((x[:, 0] * 10 == y).all() and (x[:, 1] == -x[:, 0]).all())}}))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=str(node_dir)
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) >= 3, done.stderr[-2000:]
    assert lines[-3] == "4 (10, 2) float32 float64"
    epochs = [json.loads(line) for line in lines[-2:]]
    for epoch in epochs:
        assert epoch["x_matches"]
        y = [int(v) // 10 for v in epoch["y"]]
        assert len(y) == 40 and set(y) == set(range(35))  # worker:0's rows 0..34, 5 of them repeated (pad)
    assert epochs[0]["y"] != epochs[1]["y"]  # a new shuffle each epoch


def test_write_records_lays_columns_side_by_side(tmp_path):
    feed = Feed(features=["flag", "v"], label="n")
    columns = record_columns(feed, {"flag": "|b1", "v": "<f8", "n": "<i4"}, {"v": 2})
    batch = pa.record_batch(
        {"flag": [True, False], "v": pa.array([[1.5, 2.5], [3.5, 4.5]]), "n": pa.array([7, -1], type=pa.int32())}
    )
    rows, size = write_records([batch], columns, str(tmp_path / "r.rec"))
    assert (rows, size) == (2, 2 * (1 + 8 + 4))
    raw = (tmp_path / "r.rec").read_bytes()
    first = np.frombuffer(raw[:13], dtype=np.dtype([("flag", "|b1"), ("v", "<f4", (2,)), ("n", "<i4")]))[0]
    assert (bool(first["flag"]), first["v"].tolist(), int(first["n"])) == (True, [1.5, 2.5], 7)


def _id_files(directory, rows_per_file) -> list[int]:
    """Text files of ids (one a line), ``rows_per_file[i]`` in ``part-i.txt``; return each file's first id."""
    directory.mkdir()
    starts, start = [], 0
    for part, rows in enumerate(rows_per_file):
        (directory / f"part-{part}.txt").write_text("".join(f"{i}\n" for i in range(start, start + rows)))
        starts.append(start)
        start += rows
    return starts


def test_worker_files_are_dealt_over_the_workers_only_by_absolute_names(tmp_path, monkeypatch):
    from airflow_tfos.runtime.feed.files import WorkerFiles
    from airflow_tfos.shared.storage import FileInfo

    _id_files(tmp_path / "data", [40, 30, 20, 10, 5])
    monkeypatch.chdir(tmp_path)
    ctx = NodeContext(1, "chief", 0, {"ps": ["a"], "chief": ["b"], "worker": ["c", "d"]}, 3, 4, "h", 1)
    files = ctx.worker_files("data/*.txt")  # a relative pattern, listed where the chief runs
    assert files.num_workers == 2
    names = [name for share in files.shares for name in share]
    assert sorted(names) == [str(tmp_path / "data" / f"part-{i}.txt") for i in range(5)]
    # by size, largest first to the lighter worker: 110, 90, 60, 30 and 20 bytes
    assert [[name[-5] for name in share] for share in files.shares] == [["0", "3", "4"], ["1", "2"]]
    with pytest.raises(FeedConfigError, match="cannot open WebHDFS names on the workers"):
        WorkerFiles.deal([FileInfo("webhdfs://nn:9870/data/part-0", 10)], 1)
    mwms = NodeContext(0, "chief", 0, {"chief": ["a"], "worker": ["b"]}, 2, 2, "h", 1)
    with pytest.raises(RuntimeError, match=r"use ctx.shard_files\(\)"):
        mwms.worker_files("data/*.txt")


def test_each_worker_reads_its_own_files_found_by_the_index_in_its_working_directory(tmp_path):
    """The dataset function, built once, finds on each 'worker' (a process in a directory holding its index)
    that worker's files; the steps counted on the chief are those passes' batches."""
    from airflow_tfos.runtime.feed.files import WorkerFiles, list_files
    from airflow_tfos.runtime.feed.native import WORKER_INDEX_FILE

    _id_files(tmp_path / "data", [40, 30, 20, 10, 5])
    files = WorkerFiles.deal(list_files(str(tmp_path / "data")), 2)
    (tmp_path / "files.pickle").write_bytes(pickle.dumps(files))
    script = f"""
import json, os, pickle
import tensorflow as tf
files = pickle.load(open({str(tmp_path / "files.pickle")!r}, "rb"))
def read(names):
    return tf.data.TextLineDataset(names).map(lambda line: tf.strings.to_number(line, tf.int64)).batch(8)
out = {{"steps": files.steps_by_worker(read), "total": files.steps_per_epoch(read)}}
for index in range(2):
    os.chdir(os.path.join({str(tmp_path)!r}, f"w{{index}}"))
    once = files.epoch_dataset_fn(read)(None)
    out[f"w{{index}}"] = [b.numpy().tolist() for b in once]
    forever = iter(files.dataset_fn(read)(None))
    out[f"w{{index}}-repeat"] = sum(len(next(forever)) for _ in range(3 * len(out[f"w{{index}}"])))
print(json.dumps(out))
"""
    for index in range(2):
        (tmp_path / f"w{index}").mkdir()
        (tmp_path / f"w{index}" / WORKER_INDEX_FILE).write_text(str(index))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    # worker 0: parts 0, 3 and 4 (ids 0..39, 90..104); worker 1: parts 1 and 2 (ids 40..89)
    assert sorted(i for batch in out["w0"] for i in batch) == [*range(40), *range(90, 105)]
    assert sorted(i for batch in out["w1"] for i in batch) == list(range(40, 90))
    assert out["steps"] == [7, 7] and out["total"] == 14  # 55 and 50 rows in batches of 8
    assert out["w0-repeat"] == 3 * 55 and out["w1-repeat"] == 3 * 50  # one pass after another


def test_strings_ragged_arrays_and_sparse_vectors_ride_in_records_read_by_tensorflow(tmp_path):
    """Columns of varying size under parameter servers: base64 record lines, decoded in TF's own ops into the
    tensors the Python feed gives (``tf.string``, ``tf.RaggedTensor``, ``tf.SparseTensor``), row by row."""
    n = 12
    words = [("w" * (i % 4)).encode() + bytes([200 + i]) for i in range(n)]  # binary-safe, some short
    ragged = [[float(i)] * (i % 3) for i in range(n)]  # lengths 0, 1, 2
    vectors = [  # a dense row, a sparse row with two entries, an empty sparse row, in turn (size 5)
        (1, 5, None, [float(i)] * 5) if i % 3 == 0 else (0, 5, [i % 4, 4], [i + 0.5, -1.0]) if i % 3 == 1
        else (0, 5, [], [])
        for i in range(n)
    ]  # fmt: skip
    vector_type = pa.struct(
        [
            ("type", pa.int8()),
            ("size", pa.int32()),
            ("indices", pa.list_(pa.int32())),
            ("values", pa.list_(pa.float64())),
        ]
    )
    batch = pa.record_batch(
        {
            "s": pa.array(words, type=pa.binary()),
            "r": pa.array(ragged, type=pa.list_(pa.float64())),
            "v": pa.array(
                [dict(zip(("type", "size", "indices", "values"), v, strict=True)) for v in vectors], vector_type
            ),
            "f": pa.array(np.arange(n, dtype="float64") / 4),
            "y": pa.array(np.arange(n, dtype="int64")),
        }
    )
    feed = Feed(features=["s", "r", "v", "f"], label="y", ragged=["r"], batch_size=4, shuffle=False)
    dtypes = {"s": "|O", "r": "<f8", "v": "<f8", "f": "<f8", "y": "<i8"}
    columns = record_columns(feed, dtypes, {"v": 5}, sparse={"v"})
    assert [(c.kind, c.dtype, c.width) for c in columns] == [
        ("bytes", "|O", 0), ("ragged", "<f4", 0), ("sparse", "<f4", 5), ("fixed", "<f4", 0), ("fixed", "<i8", 0)
    ]  # fmt: skip
    native = NativeShares("train", columns, rows_per_epoch=n, steps_per_worker=n // 4, num_workers=1, feed=feed)
    assert native.varying
    rows, size = write_records([batch], columns, str(tmp_path / native.file_name))
    assert rows == n and size == (tmp_path / native.file_name).stat().st_size
    (tmp_path / "native.pickle").write_bytes(pickle.dumps(native))
    script = f"""
import json, pickle
import tensorflow as tf
native = pickle.load(open({str(tmp_path / "native.pickle")!r}, "rb"))
out = []
for x, y in native.dataset_fn(repeat=False)(None):
    assert isinstance(x["r"], tf.RaggedTensor) and isinstance(x["v"], tf.SparseTensor), (type(x["r"]), type(x["v"]))
    assert x["s"].dtype == tf.string and x["r"].dtype == tf.float32 and x["v"].dtype == tf.float32
    dense = tf.sparse.to_dense(x["v"]).numpy().tolist()
    out.append({{"s": [v.hex() for v in x["s"].numpy()], "r": x["r"].to_list(), "v": dense,
                "f": x["f"].numpy().tolist(), "y": y.numpy().tolist()}})
print("BATCHES " + json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = [line for line in done.stdout.splitlines() if line.startswith("BATCHES ")]
    assert lines, done.stderr[-3000:]
    batches = json.loads(lines[0][len("BATCHES ") :])
    assert len(batches) == n // 4
    seen = {key: [v for b in batches for v in b[key]] for key in ("s", "r", "v", "f", "y")}
    dense = []
    for kind, size, indices, values in vectors:  # computed here, independently of the feed's own code
        row = [0.0] * size
        for position, value in zip(indices if kind == 0 else range(size), values, strict=True):
            row[position] = value
        dense.append(row)
    assert seen["y"] == list(range(n))
    assert seen["s"] == [w.hex() for w in words]
    assert seen["r"] == ragged and seen["v"] == dense
    assert seen["f"] == [i / 4 for i in range(n)]
