"""Unit tests of the feed's pure and local parts: balancing, schema checks, spill files, DataFeed."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from airflow_tfos.runtime.feed.dataset import FeedShare, iter_epoch
from airflow_tfos.runtime.feed.plan import balance, balance_once, check_schema
from airflow_tfos.runtime.feed.rows import DataFeed, RowFeedManager
from airflow_tfos.runtime.feed.spill import SpillWriter, read_batches, spill_rows
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed


class TestBalance:
    def test_pad_gives_every_node_the_largest_nodes_steps(self):
        plan = balance([100, 90, 64], batch_size=32, mode="pad")
        assert plan.steps_per_epoch == 4
        assert [s.padded for s in plan.shares] == [28, 38, 64]
        assert "4 steps of 32 rows per epoch on every node" in plan.describe(["a", "b", "c"], 32)

    def test_drop_stops_at_the_smallest_nodes_full_batches(self):
        plan = balance([100, 90, 64], batch_size=32, mode="drop")
        assert plan.steps_per_epoch == 2
        assert [s.dropped for s in plan.shares] == [36, 26, 0]

    def test_empty_and_starved_nodes_are_errors(self):
        with pytest.raises(FeedConfigError, match="is empty"):
            balance([0, 0], 8)
        with pytest.raises(FeedConfigError, match="at least one node got none"):
            balance([5, 0], 8)
        with pytest.raises(FeedConfigError, match="leaves no full batch"):
            balance([5, 9], 8, mode="drop")

    def test_validation_counts_every_row_once_in_the_largest_nodes_steps(self):
        plan = balance_once([49, 48, 0], batch_size=16)
        assert plan.steps_per_epoch == 4  # ceil(49 / 16): the others get empty batches at the end
        assert [(s.rows_per_epoch, s.padded, s.dropped) for s in plan.shares] == [(49, 0, 0), (48, 0, 0), (0, 0, 0)]
        text = plan.describe(["chief:0", "worker:0", "worker:1"], 16)
        assert "every row once per pass, in at most 4 steps of up to 16 rows" in text and "repeated" not in text
        with pytest.raises(FeedConfigError, match="validation data is empty"):
            balance_once([0, 0], 8)


def test_schema_check_accepts_numbers_and_numeric_arrays():
    check_schema([("x", "array<float>"), ("y", "int"), ("z", "double")], Feed(features=["x", "z"], label="y"))
    with pytest.raises(FeedConfigError, match="map<string,int>.*flatten it into numeric columns"):
        check_schema([("x", "map<string,int>")], Feed(features="x"))
    with pytest.raises(FeedConfigError, match="is both a feature and the label"):
        Feed(features=["x"], label="x")
    for bad in ("int32", "bfloat16", "float", 3):  # "float" is NumPy's float64: accepted below
        if bad == "float":
            assert Feed("x", cast_floats=bad).cast_floats == "float"
            continue
        with pytest.raises(FeedConfigError, match=f"cast_floats must name a floating-point type.*{bad!r}"):
            Feed("x", cast_floats=bad)


def test_spill_round_trip_and_epoch_batches(tmp_path):
    path = str(tmp_path / "s.arrow")
    writer = SpillWriter(path, ["x", "y"])
    for start in (0, 7, 13):
        n = [7, 6, 5][(0, 7, 13).index(start)]
        xs = pa.array([[float(i), float(-i)] for i in range(start, start + n)])
        writer.write(pa.record_batch([xs, pa.array(range(start, start + n)), pa.array(["junk"] * n)], ["x", "y", "z"]))
    stats = writer.close()
    assert (stats.rows, stats.widths) == (18, {"x": 2})
    assert sum(b.num_rows for b in read_batches(path)) == 18
    share = FeedShare(
        "train", path, 18, steps_per_epoch=5, widths={"x": 2}, feed=Feed("x", "y", batch_size=4, shuffle=False)
    )
    batches = list(iter_epoch(share))
    assert len(batches) == 5 and all(x.shape == (4, 2) and x.dtype == np.float32 for x, _ in batches)
    labels = np.concatenate([y for _, y in batches]).tolist()
    assert labels == [*range(18), 0, 1]  # padded with the node's own first rows


@pytest.mark.parametrize("cast", ["float32", None])
def test_the_spill_stores_float_features_as_the_node_feeds_them(tmp_path, cast):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(50, 4)) * 1e3
    x[0, :3] = [1e300, np.nan, 1e-310]  # overflow, NaN, a denormal: rounded as NumPy rounds them
    z, y = rng.normal(size=50), rng.normal(size=50)
    feed = Feed(["x", "z"], label="y", batch_size=50, shuffle=False, cast_floats=cast)
    path = str(tmp_path / "s.arrow")
    writer = SpillWriter(path, feed.columns, feed=feed)
    flat = pa.array(x.reshape(-1))
    xs = pa.ListArray.from_arrays(pa.array(np.arange(0, x.size + 1, 4, dtype=np.int32)), flat)
    with np.errstate(over="ignore"):
        writer.write(pa.record_batch([xs, pa.array(z), pa.array(y)], ["x", "z", "y"]))
        expected = (x.astype(cast), z.astype(cast)) if cast else (x, z)
    stats = writer.close()
    spilled = pa.Table.from_batches(list(read_batches(path)))
    kind = pa.float32() if cast else pa.float64()
    assert spilled.schema.types == [pa.list_(kind), kind, pa.float64()]  # the label is kept as Spark sent it
    assert stats.bytes == spilled.nbytes  # what the driver's log reports is what went to disk
    ((bx, by),) = iter_epoch(FeedShare("train", path, 50, steps_per_epoch=1, widths={"x": 4}, feed=feed))
    features = np.concatenate([bx["x"], bx["z"][:, None]], axis=1)  # two features: a dict of them
    want = np.concatenate([expected[0], expected[1][:, None]], axis=1)
    assert features.dtype == want.dtype and np.array_equal(features.view("u1"), want.view("u1"))
    assert by.dtype == np.float64 and np.array_equal(by, y)


def test_the_spill_never_widens_floats_and_keeps_vectors_as_spark_sent_them(tmp_path):
    feed = Feed(["x", "v"], batch_size=2, shuffle=False, cast_floats="float64")
    path = str(tmp_path / "s.arrow")
    writer = SpillWriter(path, feed.columns, feed=feed)
    vectors = pa.array(
        [{"type": 1, "size": None, "indices": None, "values": [1.0, 2.0]}] * 2,
        pa.struct([("type", pa.int8()), ("size", pa.int32()), ("indices", pa.list_(pa.int32())),
                   ("values", pa.list_(pa.float64()))]),
    )  # fmt: skip
    writer.write(pa.record_batch([pa.array([0.5, 1.5], pa.float32()), vectors], ["x", "v"]))
    writer.close()
    (spilled,) = read_batches(path)
    assert spilled.schema.field("x").type == pa.float32() and spilled.column("v").equals(vectors)
    (batch,) = iter_epoch(FeedShare("train", path, 2, steps_per_epoch=1, widths={"v": 2}, feed=feed))
    assert batch["x"].dtype == np.float64 and batch["x"].tolist() == [0.5, 1.5]  # widened by the reader


def test_a_validation_share_yields_each_row_once_the_last_batch_short(tmp_path):
    path = str(tmp_path / "s.arrow")
    _spill_labelled(path, batches=3, rows=7)
    feed = Feed("x", "y", batch_size=4, shuffle=True, seed=3)
    share = FeedShare("validation", path, 21, steps_per_epoch=9, widths={"x": 2}, feed=feed, once=True)
    batches = list(iter_epoch(share))
    assert [len(y) for _, y in batches] == [4, 4, 4, 4, 4, 1]  # not padded to the plan's 9 steps
    assert np.concatenate([y for _, y in batches]).tolist() == list(range(21))  # in order, none repeated


def _spill_labelled(path: str, batches: int, rows: int) -> None:
    """Spill ``batches`` record batches of ``rows`` rows; row ``i`` has label ``i`` and features ``[i, -i]``."""
    writer = SpillWriter(path, ["x", "y"])
    for b in range(batches):
        labels = range(b * rows, (b + 1) * rows)
        writer.write(pa.record_batch([pa.array([[float(i), float(-i)] for i in labels]), pa.array(labels)], ["x", "y"]))
    writer.close()


def _shuffled_share(path: str, steps: int) -> FeedShare:
    feed = Feed("x", "y", batch_size=10, shuffle=True, shuffle_window=30, seed=7)
    return FeedShare("train", path, 100, steps_per_epoch=steps, widths={"x": 2}, feed=feed, rank=1)


def test_shuffled_epochs_visit_every_row_once_in_a_new_order(tmp_path):
    path = str(tmp_path / "s.arrow")
    _spill_labelled(path, batches=5, rows=20)
    share = _shuffled_share(path, steps=10)

    def labels(epoch):
        batches = list(iter_epoch(share, epoch))
        assert all(x.shape == (10, 2) for x, _ in batches)
        assert all((x[:, 0] == y).all() for x, y in batches)  # features stay with their label
        return np.concatenate([y for _, y in batches]).tolist()

    first, second = labels(0), labels(1)
    assert sorted(first) == sorted(second) == list(range(100))
    assert first != second and first != sorted(first)
    assert labels(0) == first  # the same seed, rank and epoch give the same order
    # record batches are visited in a shuffled order, not only shuffled within themselves
    assert {y // 20 for y in first[:20]} != {0}


def test_the_tf_dataset_gives_the_numpy_batches_epoch_after_epoch_padded(tmp_path):
    path = str(tmp_path / "s.arrow")
    _spill_labelled(path, batches=5, rows=20)
    share = _shuffled_share(path, steps=12)  # 120 rows per epoch from 100: 20 padded
    expected = [np.concatenate([y for _, y in iter_epoch(share, epoch)]).tolist() for epoch in (0, 1)]
    assert all(len(e) == 120 and set(e) == set(range(100)) for e in expected)
    (tmp_path / "share.pickle").write_bytes(pickle.dumps(share))
    script = f"""
import json
import pickle
import numpy as np
from airflow_tfos.runtime.feed.dataset import make_dataset
share = pickle.load(open({str(tmp_path / "share.pickle")!r}, "rb"))
dataset = make_dataset(share)
print(dataset.cardinality().numpy(), dataset.element_spec[0].shape, dataset.options().autotune.enabled)
for epoch in range(2):
    print(json.dumps(np.concatenate([y for _, y in dataset.as_numpy_iterator()]).tolist()))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    lines = done.stdout.strip().splitlines()
    assert len(lines) >= 3, done.stderr[-2000:]
    assert lines[-3] == "12 (10, 2) False"  # autotuning off (feed/dataset.py:for_workers says why)
    assert [json.loads(line) for line in lines[-2:]] == expected


def test_spill_writer_rejects_nulls_and_ragged_arrays(tmp_path):
    writer = SpillWriter(str(tmp_path / "a"), ["x"])
    with pytest.raises(FeedConfigError, match="column 'x' of the training data has null values"):
        writer.write(pa.record_batch([pa.array([1.0, None])], ["x"]))
    writer.abort()
    writer = SpillWriter(str(tmp_path / "b"), ["x"])
    writer.write(pa.record_batch([pa.array([[1.0, 2.0]])], ["x"]))
    with pytest.raises(FeedConfigError, match="rows of different lengths"):
        writer.write(pa.record_batch([pa.array([[1.0, 2.0, 3.0]])], ["x"]))
    writer.abort()
    assert read_batches(str(tmp_path / "b")).__next__().num_rows == 1  # what was written before is kept


def make_feed(tmp_path, rows, rows_per_epoch=None, epochs=1):
    path = str(tmp_path / "rows")
    spill_rows(rows, path)
    return RowFeedManager(
        path=path,
        rows=len(rows),
        rows_per_epoch=rows_per_epoch or len(rows),
        epochs=epochs,
        progress_path=str(tmp_path / "progress"),
        results_path=str(tmp_path / "results"),
        feed_timeout=1.0,
        label="worker:0",
    )


class TestDataFeed:
    def test_batches_cover_every_epoch_then_stop(self, tmp_path):
        mgr = make_feed(tmp_path, list(range(2500)), epochs=2)
        feed = DataFeed(mgr)
        seen = []
        while not feed.should_stop():
            seen.extend(feed.next_batch(1000))
        assert seen == list(range(2500)) * 2

    def test_padding_repeats_the_nodes_rows(self, tmp_path):
        feed = DataFeed(make_feed(tmp_path, [1, 2, 3], rows_per_epoch=5))
        assert feed.next_batch(10) == [1, 2, 3, 1, 2]

    def test_input_mapping_returns_columns_in_sorted_name_order(self, tmp_path):
        feed = DataFeed(make_feed(tmp_path, [(1, "a"), (2, "b")]), input_mapping={"b_col": "t2", "a_col": "t1"})
        assert feed.next_batch(5) == {"t1": [1, 2], "t2": ["a", "b"]}

    def test_results_and_terminate(self, tmp_path):
        mgr = make_feed(tmp_path, list(range(10)))
        feed = DataFeed(mgr, train_mode=False)
        feed.batch_results([x * 2 for x in feed.next_batch(4)])
        feed.terminate()
        assert feed.should_stop()
        with open(mgr.results_path, "rb") as f:
            assert pickle.load(f) == [0, 2, 4, 6]
        with open(mgr.progress_path) as f:
            assert f.read() == "done"

    def test_an_unread_feed_is_reported_after_feed_timeout(self, tmp_path):
        import time

        mgr = make_feed(tmp_path, list(range(10)))
        feed = DataFeed(mgr)
        feed.next_batch(3)
        time.sleep(0.6)
        feed.next_batch(0)  # reports progress 3
        assert mgr.stalled() is None
        time.sleep(1.2)
        assert "read 3 of its 10 rows" in mgr.stalled()


def test_tfrecord_dataset_reads_the_files_it_is_given(tmp_path):
    script = f"""
import tensorflow as tf
from airflow_tfos.runtime.feed.files import tfrecord_dataset
paths = []
for i in range(2):
    path = {str(tmp_path)!r} + f"/part-{{i}}.tfrecord"
    with tf.io.TFRecordWriter(path) as w:
        for j in range(3):
            w.write(f"{{i}}-{{j}}".encode())
    paths.append(path)
print(sorted(r.decode() for r in tfrecord_dataset(paths).as_numpy_iterator()))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == str(sorted(f"{i}-{j}" for i in range(2) for j in range(3)))


def test_a_spill_that_cannot_reach_the_disk_fails_with_the_path_named(tmp_path):
    writer = SpillWriter(str(tmp_path / "missing" / "s.arrow"), ["x"])
    batch = pa.record_batch([pa.array([1.0, 2.0])], ["x"])

    def spill():
        for _ in range(2 * SpillWriter.QUEUED + 2):  # more than the queue holds: must not block
            writer.write(batch)
        writer.close()

    with pytest.raises(OSError, match=r"cannot write the training data to local disk at .*missing"):
        spill()


def test_a_bad_batch_mid_spill_fails_with_its_own_error_and_leaves_no_writer_behind(tmp_path):
    import threading

    from airflow_tfos.runtime.feed.spark_side import SPLIT_COLUMN, spill_partition

    def batches():
        yield pa.record_batch([pa.array([1.0, 2.0]), pa.array([0, 1], pa.int32())], ["x", SPLIT_COLUMN])
        yield pa.record_batch([pa.array([None, 3.0]), pa.array([0, 1], pa.int32())], ["x", SPLIT_COLUMN])

    # the disk fails as well (no such directory), but the bad batch is refused before the disk error is
    # looked at, and that error is the one reported; the validation writer must not be left running
    with pytest.raises(FeedConfigError, match="column 'x' of the training data has null values"):
        spill_partition(batches(), str(tmp_path / "gone"), Feed("x", shuffle=False), with_validation=True)
    names = {"spill train.arrow", "spill validation.arrow"}
    assert [t for t in threading.enumerate() if t.name in names] == []
    spilled = spill_partition(iter([]), str(tmp_path), Feed("x"), with_validation=False)
    assert spilled["train"]["rows"] == 0 and [t for t in threading.enumerate() if t.name in names] == []
