"""Column types of the Spark feed without Spark: vectors, strings, dates, decimals, nulls, ragged arrays,
sample weights and several labels, from Arrow through the spill to NumPy and TF."""

from __future__ import annotations

import datetime
import decimal
import json
import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from airflow_tfos.runtime.feed.columns import VECTOR_FIELDS, Rows, concat, normalize_column, to_numpy
from airflow_tfos.runtime.feed.dataset import FeedShare, iter_epoch
from airflow_tfos.runtime.feed.native import record_columns
from airflow_tfos.runtime.feed.plan import check_schema
from airflow_tfos.runtime.feed.spill import SpillWriter, read_batches, spill_schema
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed

VECTOR = pa.struct(
    [
        ("type", pa.int8()),
        ("size", pa.int32()),
        ("indices", pa.list_(pa.int32())),
        ("values", pa.list_(pa.float64())),
    ]
)


def vectors(rows: list) -> pa.Array:
    """Arrow vectors as Spark sends ``VectorUDT`` columns: a list is a dense row, ``(size, {i: v})`` a sparse one."""
    out = []
    for row in rows:
        if isinstance(row, list):
            out.append({"type": 1, "size": None, "indices": None, "values": row})
        else:
            size, entries = row
            out.append({"type": 0, "size": size, "indices": list(entries), "values": list(entries.values())})
    return pa.array(out, VECTOR)


def dense(row, size: int) -> list[float]:
    if isinstance(row, list):
        return row
    values = [0.0] * size
    for i, v in row[1].items():
        values[i] = v
    return values


def test_decimals_dates_and_timestamps_become_float64_seconds_since_the_epoch():
    stamps = [
        datetime.datetime(2024, 2, 29, 13, 5, 7, 250000, tzinfo=datetime.UTC),
        datetime.datetime(1969, 12, 31),
    ]
    days = [datetime.date(2024, 2, 29), datetime.date(1960, 1, 1)]
    cases = [
        (pa.array([decimal.Decimal("12.25"), decimal.Decimal("-0.5")], pa.decimal128(10, 2)), [12.25, -0.5]),
        (pa.array(days, pa.date32()), [(d - datetime.date(1970, 1, 1)).days * 86400.0 for d in days]),
        (pa.array(stamps, pa.timestamp("us", tz="UTC")), [s.timestamp() for s in stamps]),
        # a timestamp without time zone: its wall-clock time counted as UTC
        (pa.array(stamps[1:], pa.timestamp("us")), [stamps[1].replace(tzinfo=datetime.UTC).timestamp()]),
    ]
    for column, expected in cases:
        out = normalize_column("c", column, {}, "training data")
        assert out.type == pa.float64() and out.to_pylist() == pytest.approx(expected), column.type


def test_strings_and_binary_are_kept_as_bytes():
    out = normalize_column("t", pa.array(["ab", "é", ""]), {}, "training data")
    assert to_numpy(pa.record_batch([out], ["t"]), ["t"], {})["t"].tolist() == [b"ab", "é".encode(), b""]
    raw = pa.array([b"\x00\xff", b"z"])
    assert normalize_column("b", raw, {}, "training data") is raw


def test_nulls_fail_naming_the_column_and_the_fix_unless_the_feed_fills_them():
    with pytest.raises(FeedConfigError, match=r"column 'x' of the training data has null values.*Feed\(fill=\{'x'"):
        normalize_column("x", pa.array([1.0, None]), {}, "training data")
    feed = Feed(["x", "t", "a"], fill={"x": -1.0, "t": "?", "a": [0, 0]})
    assert normalize_column("x", pa.array([1.0, None]), {}, "d", feed).to_pylist() == [1.0, -1.0]
    assert normalize_column("t", pa.array(["a", None]), {}, "d", feed).to_pylist() == [b"a", b"?"]
    assert normalize_column("a", pa.array([[1, 2], None]), {}, "d", feed).to_pylist() == [[1, 2], [0, 0]]
    with pytest.raises(FeedConfigError, match="'y'.*not fed columns"):
        Feed("x", fill={"y": 0})


def test_arrays_are_cut_or_padded_to_the_stated_length_or_fed_ragged():
    rows = [[1, 2, 3, 4], [5], [], [6, 7, 8]]
    feed = Feed(["a", "r"], pad={"a": [3, -1]}, ragged=["r"])
    widths: dict[str, int] = {}
    padded = normalize_column("a", pa.array(rows), widths, "d", feed)
    assert padded.to_pylist() == [(r + [-1] * 3)[:3] for r in rows] and widths == {"a": 3}
    ragged = normalize_column("r", pa.array(rows), widths, "d", feed)
    assert ragged.to_pylist() == rows and "r" not in widths
    out = to_numpy(pa.record_batch([padded, ragged], ["a", "r"]), ["a", "r"], widths)
    assert out["a"].shape == (4, 3)
    assert _ragged_rows(out["r"]) == rows
    with pytest.raises(FeedConfigError, match=r"rows of different lengths.*Feed\(ragged=\['r'\]\).*Feed\(pad="):
        normalize_column("r", pa.array(rows), {}, "training data")
    with pytest.raises(FeedConfigError, match="pad=.*and Feed\\(ragged"):
        Feed("a", pad={"a": [2, 0]}, ragged="a")


def _ragged_rows(rows: Rows) -> list:
    return [rows.values[a:b].tolist() for a, b in zip(rows.splits[:-1], rows.splits[1:], strict=True)]


def test_rows_slice_gather_and_concat_like_lists_of_rows():
    rows = [[1.0, 2.0], [], [3.0], [4.0, 5.0, 6.0]]
    lengths = [len(r) for r in rows]
    ragged = Rows(np.array([v for r in rows for v in r]), np.concatenate([[0], np.cumsum(lengths)]))
    assert _ragged_rows(ragged[1:3]) == rows[1:3]
    assert _ragged_rows(ragged[[3, 0, 2, 0]]) == [rows[3], rows[0], rows[2], rows[0]]
    assert _ragged_rows(concat([ragged[2:], ragged[:1]])) == rows[2:] + rows[:1]
    assert len(ragged[2:]) == 2 and ragged.astype("float32").dtype == np.float32


def test_vector_sizes_are_checked_and_sparse_rows_noted():
    rows = [[1.0, 2.0, 3.0], (3, {1: 5.0}), (3, {})]
    widths: dict[str, int] = {}
    sparse: set[str] = set()
    normalize_column("v", vectors(rows), widths, "training data", sparse=sparse)
    assert widths == {"v": 3} and sparse == {"v"}
    normalize_column("d", vectors([[1.0, 2.0]]), widths, "training data", sparse=sparse)
    assert sparse == {"v"}  # all dense: not sparse
    with pytest.raises(
        FeedConfigError, match=r"vector column 'v' of the training data has vectors of different sizes \(3 to 4\)"
    ):
        normalize_column("v", vectors([(4, {0: 1.0})]), widths, "training data")
    with pytest.raises(FeedConfigError, match=r"sizes \(2 to 3\)"):
        normalize_column("w", vectors([[1.0, 2.0], [1.0, 2.0, 3.0]]), {}, "training data")


def test_vectors_become_dense_arrays_or_sparse_rows_as_the_feed_says():
    rows = [[1.0, 2.0, 3.0, 4.0], (4, {1: 5.0, 3: -1.0}), (4, {}), [0.0, 0.0, 7.0, 0.0]]
    batch = pa.record_batch([vectors(rows)], ["v"])
    densified = to_numpy(batch, ["v"], {"v": 4})["v"]
    assert densified.tolist() == [dense(r, 4) for r in rows]
    kept = to_numpy(batch, ["v"], {"v": 4}, sparse={"v"})["v"]
    assert kept.width == 4
    # each row's values sit at its indices (a dense row at every index)
    rebuilt = np.zeros((4, 4))
    for i, (a, b) in enumerate(zip(kept.splits[:-1], kept.splits[1:], strict=True)):
        rebuilt[i, kept.indices[a:b]] = kept.values[a:b]
    assert rebuilt.tolist() == [dense(r, 4) for r in rows]
    assert len(kept.values) == 4 + 2 + 0 + 4  # the sparse rows were not densified


def test_the_spill_keeps_sparse_vectors_sparse_and_strings_as_bytes(tmp_path):
    path = str(tmp_path / "s.arrow")
    feed = Feed(["v", "t"], label="y")
    writer = SpillWriter(path, feed.columns, feed=feed)
    rows = [(1000, {i: 1.0}) for i in range(50)]
    writer.write(pa.record_batch([vectors(rows), pa.array(["x"] * 50), pa.array(range(50))], ["v", "t", "y"]))
    stats = writer.close()
    assert stats.widths == {"v": 1000} and stats.sparse == {"v"}
    assert stats.bytes < 50 * 1000 * 8 / 20  # far less than the dense rows would take
    spilled = next(read_batches(path))
    assert spilled.column("v").to_pylist()[3]["indices"] == [3]
    assert spill_schema(path).field("t").type == pa.binary()


def test_schema_check_accepts_the_new_types_and_names_misplaced_options():
    fields = [
        ("v", "vector"),
        ("t", "string"),
        ("b", "binary"),
        ("m", "decimal(10,2)"),
        ("d", "date"),
        ("s", "timestamp"),
    ]
    fields += [("n", "timestamp_ntz"), ("a", "array<int>"), ("y", "double"), ("y2", "string"), ("w", "float")]
    check_schema(fields, Feed(["v", "t", "b", "m", "d", "s", "n", "a"], label=["y", "y2"], weight="w"))
    with pytest.raises(
        FeedConfigError, match="column 't' .* type string: Feed\\(pad=...\\) and Feed\\(ragged=...\\) take"
    ):
        check_schema(fields, Feed("t", ragged="t"))
    with pytest.raises(FeedConfigError, match=r"column .a. .*Feed\(densify=...\) takes vectors"):
        check_schema(fields, Feed("a", densify="a"))
    with pytest.raises(FeedConfigError, match="array<string>, which cannot be fed"):
        check_schema([("x", "array<string>")], Feed("x"))
    with pytest.raises(FeedConfigError, match="weight=.*needs a label"):
        Feed("x", weight="w")


def test_batches_carry_sample_weights_and_a_dict_of_labels(tmp_path):
    path = str(tmp_path / "s.arrow")
    feed = Feed("x", label=["y1", "y2"], weight="w", batch_size=4, shuffle=False)
    writer = SpillWriter(path, feed.columns, feed=feed)
    n = 10
    writer.write(
        pa.record_batch(
            [pa.array(np.arange(n) * 1.0), pa.array(range(n)), pa.array(range(n, 2 * n)), pa.array(np.ones(n) / 2)],
            ["x", "y1", "y2", "w"],
        )
    )
    writer.close()
    share = FeedShare("train", path, n, steps_per_epoch=3, feed=feed)
    batches = list(iter_epoch(share))
    assert len(batches) == 3
    x, y, w = batches[0]
    assert x.dtype == np.float32 and set(y) == {"y1", "y2"} and w.dtype == np.float64
    assert y["y2"].tolist() == (y["y1"] + n).tolist() == (x + n).astype(int).tolist()


def test_the_parameter_server_record_layout_of_every_column_kind():
    feed = Feed(["v", "t", "r"], label="y", ragged="r")
    dtypes = {"v": "<f8", "t": "|O", "r": "<i8", "y": "<f8"}
    columns = record_columns(feed, dtypes, {"v": 3}, sparse={"v"})
    assert [(c.name, c.kind, c.dtype, c.width, c.parts) for c in columns] == [
        ("v", "sparse", "<f4", 3, 2), ("t", "bytes", "|O", 0, 1),
        ("r", "ragged", "<i8", 0, 1), ("y", "fixed", "<f8", 0, 0),
    ]  # fmt: skip
    assert sum(c.nbytes for c in columns) == 8  # only the label is in the fixed part
    columns = record_columns(Feed("v", label="y", weight="w"), {**dtypes, "w": "<f8"}, {"v": 3})
    assert [(c.name, c.dtype, c.width) for c in columns] == [("v", "<f4", 3), ("y", "<f8", 0), ("w", "<f8", 0)]
    assert all(c.kind == "fixed" for c in columns)
    assert tuple(VECTOR.field(i).name for i in range(4)) == VECTOR_FIELDS


TF_SCRIPT = """
import json, pickle, sys
import numpy as np
import tensorflow as tf
from airflow_tfos.runtime.feed.dataset import make_dataset
share = pickle.load(open(sys.argv[1], "rb"))
dataset = make_dataset(share)
spec = dataset.element_spec
print(json.dumps({"x": {k: type(v).__name__ for k, v in spec[0].items()}, "cardinality": int(dataset.cardinality())}))
rows = []
for x, y, w in dataset:
    v = tf.sparse.to_dense(x["v"]).numpy().tolist()
    r = x["r"].to_list()
    for i in range(len(v)):
        t = x["t"][i].numpy().decode()
        rows.append({"v": v[i], "r": r[i], "t": t, "y": float(y["y"][i]), "k": int(y["k"][i]), "w": float(w[i])})
print(json.dumps(rows))
inputs = {
    "v": tf.keras.Input(shape=(3,), sparse=True, name="v"),
    "r": tf.keras.Input(shape=(None,), ragged=True, name="r"),
    "t": tf.keras.Input(shape=(), dtype=tf.string, name="t"),
}
lookup = tf.keras.layers.StringLookup(vocabulary=["a", "b"], output_mode="one_hot")(inputs["t"])
summed = tf.keras.layers.Lambda(lambda r: tf.expand_dims(tf.reduce_sum(tf.cast(r, tf.float32), axis=1), 1))(inputs["r"])
dense_v = tf.keras.layers.Dense(1, use_bias=False, kernel_initializer="ones", name="dv")(inputs["v"])
y = tf.keras.layers.Concatenate()([dense_v, summed, lookup])
model = tf.keras.Model(inputs, {"y": tf.keras.layers.Dense(1, kernel_initializer="ones", name="y")(y),
                                "k": tf.keras.layers.Dense(1, kernel_initializer="zeros", name="k")(y)})
model.compile(loss={"y": "mse", "k": "mse"})
print(json.dumps(model.evaluate(dataset, verbose=0, return_dict=True)))
"""


def test_a_mixed_table_feeds_tf_sparse_ragged_and_string_tensors_with_weights(tmp_path):
    """Sparse vectors, ragged arrays, strings, a weight and two labels through the spill and ``make_dataset``;
    the rows TF sees equal the rows spilled, and Keras's weighted loss equals the one computed by hand."""
    n = 10
    v_rows = [(3, {i % 3: float(i)}) if i % 2 else [float(i), 1.0, 0.0] for i in range(n)]
    r_rows = [list(range(i % 4)) for i in range(n)]
    t_rows = ["a" if i % 3 else "b" for i in range(n)]
    w_rows = [0.5 * (i % 3) for i in range(n)]
    table = {
        "v": vectors(v_rows),
        "r": pa.array(r_rows),
        "t": pa.array(t_rows),
        "y": pa.array([float(i) for i in range(n)]),
    }
    table |= {"k": pa.array(range(n)), "w": pa.array(w_rows)}
    feed = Feed(["v", "r", "t"], label=["y", "k"], weight="w", ragged="r", batch_size=4, shuffle=False)
    path = str(tmp_path / "s.arrow")
    writer = SpillWriter(path, feed.columns, feed=feed)
    writer.write(pa.record_batch(list(table.values()), list(table)))
    stats = writer.close()
    share = FeedShare(
        "validation", path, n, 3, widths=stats.widths, feed=feed, sparse=frozenset(stats.sparse), once=True
    )
    (tmp_path / "share.pickle").write_bytes(pickle.dumps(share))
    done = subprocess.run(
        [sys.executable, "-c", TF_SCRIPT, str(tmp_path / "share.pickle")], capture_output=True, text=True, timeout=120
    )
    lines = done.stdout.strip().splitlines()
    assert len(lines) >= 3, done.stderr[-3000:]
    assert json.loads(lines[-3])["x"] == {"v": "SparseTensorSpec", "r": "RaggedTensorSpec", "t": "TensorSpec"}
    seen = json.loads(lines[-2])
    expected = [
        {"v": dense(v_rows[i], 3), "r": r_rows[i], "t": t_rows[i], "y": float(i), "k": i, "w": w_rows[i]}
        for i in range(n)
    ]
    assert seen == expected
    # the model: y = v . 1 + sum(r) + onehot(t) . 1 (no bias), k = 0; per-row loss (y - yhat)^2 + k^2
    losses = []
    for i in range(n):
        predicted = sum(dense(v_rows[i], 3)) + sum(r_rows[i]) + 1.0  # one-hot of a known word sums to 1
        losses.append((i - predicted) ** 2 + i**2)
    batches = [range(s, min(s + 4, n)) for s in range(0, n, 4)]
    weighted = [sum(w_rows[i] * losses[i] for i in b) / len(b) for b in batches]
    by_hand = sum(weighted[j] * len(b) for j, b in enumerate(batches)) / n
    assert json.loads(lines[-1])["loss"] == pytest.approx(by_hand, rel=1e-5)
    unweighted = sum(losses) / n
    assert abs(by_hand - unweighted) > 1  # the weights matter


NATIVE_SCRIPT = """
import json, pickle, sys
native = pickle.load(open(sys.argv[1], "rb"))
rows = []
for x, y, w in native.build(False):
    for i in range(int(w.shape[0])):
        rows.append({"v": x[i].numpy().tolist(), "id": float(y["id"][i]), "k": int(y["k"][i]), "w": float(w[i])})
print(json.dumps(rows))
"""


def test_under_parameter_servers_dense_vectors_weights_and_two_labels_are_read_natively(tmp_path):
    from airflow_tfos.runtime.feed.native import NativeShares, write_records

    n = 12
    v_rows = [[float(i), 0.5] if i % 2 else (2, {1: float(i)}) for i in range(n)]
    feed = Feed("v", label=["id", "k"], weight="w", batch_size=4, shuffle=False, densify="v")
    path = str(tmp_path / "s.arrow")
    writer = SpillWriter(path, feed.columns, feed=feed)
    columns = [
        vectors(v_rows),
        pa.array([float(i) for i in range(n)]),
        pa.array(range(n)),
        pa.array([i / 4 for i in range(n)]),
    ]
    writer.write(pa.record_batch(columns, list(feed.columns)))
    stats = writer.close()
    assert stats.sparse == {"v"}  # sparse rows: fed under parameter servers only because the feed densifies
    records = record_columns(feed, {"v": "<f8", "id": "<f8", "k": "<i8", "w": "<f8"}, stats.widths)
    native = NativeShares("train", records, rows_per_epoch=n, steps_per_worker=3, num_workers=1, feed=feed)
    write_records(read_batches(path), records, str(tmp_path / native.file_name))
    (tmp_path / "native.pickle").write_bytes(pickle.dumps(native))
    done = subprocess.run(
        [sys.executable, "-c", NATIVE_SCRIPT, str(tmp_path / "native.pickle")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-3000:]
    expected = [{"v": dense(v_rows[i], 2), "id": float(i), "k": i, "w": i / 4} for i in range(n)]
    assert json.loads(lines[-1]) == expected
