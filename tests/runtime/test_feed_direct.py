"""Direct reads: training nodes read their share of Parquet files themselves (real local cluster, real TF)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tfos.runtime import TFClusterRun
from airflow_tfos.runtime.feed.direct import Slice, plan_direct, read_slices, row_groups, split_rows
from airflow_tfos.runtime.node.cluster import plan_roles
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed
from airflow_tfos.shared.rundir import RunDir
from tests.runtime import programs
from tests.runtime.helpers import assert_no_node_processes, read_records

#: rows per file, and the row-group size each file is written with: unequal files and row groups
FILES = ((700, 100), (300, 64), (257, 257))


def write_ids(folder: Path, files=FILES, first: int = 0, width: int = 3, noise: bool = False) -> list[int]:
    """Parquet files of rows ``id`` (int64), ``x`` (``width`` floats, all equal to the id / 1000, or random with
    ``noise``) and ``y`` (the id as a double); return the ids written."""
    folder.mkdir(parents=True)
    ids = []
    for number, (rows, group) in enumerate(files):
        part = np.arange(first, first + rows)
        first += rows
        values = np.random.default_rng(first).random(rows * width) if noise else np.repeat(part / 1000, width)
        x = pa.FixedSizeListArray.from_arrays(pa.array(values.astype("float32")), width)
        table = pa.table(
            {"id": part, "x": pa.array(x.to_pylist(), pa.list_(pa.float32())), "y": part.astype("float64")}
        )
        pq.write_table(table, folder / f"part-{number}.parquet", row_group_size=group)
        ids.extend(part.tolist())
    return ids


def run_cluster(sc, main_fun, args=None, **kwargs):
    tf_run = TFClusterRun(sc, main_fun, args, **kwargs).start()
    try:
        return tf_run.wait(300)
    finally:
        assert_no_node_processes(tf_run.cluster_id)


def epoch_ids_of(spark, tmp_path: Path, frame, feed: Feed, validation=None) -> dict[str, dict]:
    """Run :func:`programs.epoch_ids` for 2 epochs on 2 nodes; return each node's record."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run_cluster(
        spark.sparkContext,
        programs.epoch_ids,
        {"epochs": 2},
        num_nodes=2,
        run_dir=str(run_dir),
        data=frame,
        validation_data=validation,
        feed=feed,
    )
    return read_records(str(run_dir), "ids")


# --- planning and reading, no Spark -------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [1, 2, 3, 5])
def test_shares_cover_every_row_once_and_differ_by_at_most_one_row(nodes):
    groups = [("a", 0, 100), ("a", 1, 7), ("b", 0, 64), ("c", 0, 1), ("c", 1, 300)]
    shares = split_rows(groups, nodes, seed=3)
    sizes = [sum(s.rows for s in share) for share in shares]
    assert sum(sizes) == 472 and max(sizes) - min(sizes) <= 1
    covered = sorted((s.path, s.row_group, i) for share in shares for s in share for i in range(s.start, s.stop))
    assert covered == sorted((p, g, i) for p, g, n in groups for i in range(n))  # each row exactly once
    assert split_rows(groups, nodes, seed=3) == shares  # the same plan on every call


def test_read_slices_yield_exactly_the_rows_named(tmp_path):
    ids = write_ids(tmp_path / "data")
    groups = row_groups([str(p) for p in sorted((tmp_path / "data").iterdir())])
    assert [g[2] for g in groups] == [100] * 7 + [64] * 4 + [44, 257]
    first = groups[0][0]
    rows = [
        v
        for batch in read_slices([Slice(first, 2, 10, 15), Slice(first, 0, 0, 3)], ["id"])
        for v in batch.column("id").to_pylist()
    ]
    assert rows == ids[210:215] + ids[0:3]


def test_a_streamed_pass_reads_every_row_once_interleaving_row_groups_in_a_new_order(tmp_path, monkeypatch):
    """What a node's TF process reads each epoch: every row of its slices once; with a shuffle, the slices in a
    new order and two row groups read in turn; the same checks as the spill, with the widths of the first row."""
    from airflow_tfos.runtime.feed import parquet_reads as direct_reads

    monkeypatch.setattr(direct_reads, "STREAM_BATCH_BYTES", 1)  # record batches of 1,024 rows at most
    monkeypatch.setattr(direct_reads, "_input_error", None)
    ids = write_ids(tmp_path / "data", files=((3000, 1500), (2500, 1000)))
    groups = row_groups([str(p) for p in sorted((tmp_path / "data").iterdir())])
    slices = split_rows(groups, 1)[0]
    feed = Feed(features="x", label="y")

    def one_pass(rng):
        widths = {"x": 3}
        return [
            [int(v) for v in batch.column("y").to_pylist()]
            for batch in direct_reads.stream_slices(slices, feed, widths, "training data", rng)
        ]

    in_order = one_pass(None)
    assert [i for batch in in_order for i in batch] == [
        i for s in slices for i in range(s.start + _first_id(groups, s), s.stop + _first_id(groups, s))
    ]
    passes = [one_pass(np.random.default_rng(epoch)) for epoch in range(2)]
    for batches in passes:
        assert sorted(i for batch in batches for i in batch) == ids  # every row once
        sources = [_group_of(groups, batch[0]) for batch in batches]
        assert len(set(sources[:2])) == 2  # the first two batches come from two row groups read in turn
    assert passes[0] != passes[1]  # a new order each pass
    with pytest.raises(FeedConfigError, match="^array column 'x' of the training data has rows of different"):
        list(direct_reads.stream_slices(slices, feed, {"x": 2}, "training data"))
    assert str(direct_reads.input_error()).startswith("array column 'x'")  # what the node reports as its cause


def _first_id(groups, part: Slice) -> int:
    """The id of row 0 of ``part``'s row group (ids run on through the files and their row groups)."""
    before = 0
    for path, group, rows in groups:
        if (path, group) == (part.path, part.row_group):
            return before
        before += rows
    raise AssertionError(part)


def _group_of(groups, row_id: int) -> int:
    bounds = np.cumsum([rows for _, _, rows in groups])
    return int(np.searchsorted(bounds, row_id, side="right"))


def test_remote_files_are_read_by_ranged_requests_not_whole(emu, tmp_path, monkeypatch):
    """Footers and row groups of files on (emulated) HDFS come through OPEN requests with offset and length; the
    bytes served are those of the row groups read (and the footers), far less than the files."""
    from airflow_tfos.runtime.feed import parquet_reads as direct_reads
    from airflow_tfos.shared.storage import storage_for

    ids = write_ids(tmp_path / "local", files=((2000, 200), (2000, 200)), width=64, noise=True)
    uris = [emu.uri(f"/data/part-{i}.parquet") for i in range(2)]
    sizes = 0
    for i, uri in enumerate(uris):
        content = (tmp_path / "local" / f"part-{i}.parquet").read_bytes()
        storage_for(uri).write_bytes(uri, content)
        sizes += len(content)

    emu.requests.clear()
    groups = row_groups(uris)
    assert sum(g[2] for g in groups) == 4000
    shares = split_rows(groups, 4, seed=0)
    rows = [v for batch in read_slices(shares[1], ["id", "y"]) for v in batch.column("id").to_pylist()]
    assert len(rows) == 1000 and set(rows) <= set(ids)
    opens = [r for r in emu.requests if r.op == "OPEN" and r.server.startswith("datanode")]
    assert opens and all("offset" in r.query and "length" in r.query for r in opens)
    served = [int(r.query["length"]) for r in opens]
    # footers (64 KiB each) and the two narrow columns of a quarter of the rows: no file copied whole
    assert max(served) <= 64 * 2**10 and sum(served) < sizes / 2

    # A TF process's pass streams each column chunk in reads of STREAM_BUFFER_BYTES (or of one page, if larger),
    # each one ranged request: one row group of 2,000 rows of 64 floats (a 500 KiB chunk) in pages of 16 KiB
    # comes in pieces, never whole.
    monkeypatch.setattr(direct_reads, "STREAM_BUFFER_BYTES", 16 * 2**10)
    values = np.random.default_rng(1).random((2000, 64)).astype("float32")
    table = pa.table({"x": pa.array(list(values), pa.list_(pa.float32())), "y": np.arange(2000.0)})
    local = tmp_path / "paged.parquet"
    pq.write_table(table, local, row_group_size=2000, data_page_size=16 * 2**10, use_dictionary=False)
    uri = emu.uri("/data/paged.parquet")
    storage_for(uri).write_bytes(uri, local.read_bytes())
    emu.requests.clear()
    feed = Feed(features="x", label="y")
    streamed = [
        int(v)
        for batch in direct_reads.stream_slices([Slice(uri, 0, 0, 2000)], feed, {"x": 64}, "training data")
        for v in batch.column("y").to_pylist()
    ]
    assert streamed == list(range(2000))
    opens = [r for r in emu.requests if r.op == "OPEN" and r.server.startswith("datanode")]
    served = [int(r.query["length"]) for r in opens]
    assert max(served) <= 64 * 2**10 < local.stat().st_size  # the footer's read is the largest
    assert len(opens) >= 500 * 2**10 // (64 * 2**10)


# --- on the local cluster -----------------------------------------------------------------------------------


@pytest.mark.integration
def test_nodes_read_their_row_groups_directly_every_row_once_per_epoch(spark, tmp_path, caplog):
    """Unequal files and row groups, cut into shares of 629 and 628 rows; balance ``pad`` (``drop`` plans the
    same steps from the same counts on both paths: ``plan_shares``)."""
    ids = write_ids(tmp_path / "train")
    validation_ids = write_ids(tmp_path / "validation", files=((90, 40),), first=10_000)
    frame = spark.read.parquet(str(tmp_path / "train")).select("x", "y")
    validation = spark.read.parquet(str(tmp_path / "validation"))
    batch = 64
    with caplog.at_level("INFO", logger="airflow_tfos"):
        records = epoch_ids_of(
            spark, tmp_path, frame, Feed(features="x", label="y", batch_size=batch, shuffle_window=50), validation
        )
    assert "feed: reading 4 Parquet file(s) directly on the nodes (plain scan, 2 column(s))" in caplog.text
    assert (
        "training data: read by each node from the Parquet files on every pass, nothing spilled: chief:0 629 rows in "
        in caplog.text
    )
    assert sorted(records) == ["chief:0", "worker:0"]
    steps = {r["steps_per_epoch"] for r in records.values()}
    total = len(ids)
    expected = -(-(total // 2 + 1) // batch)
    assert steps == {expected}  # the same steps on every node, from shares 628 and 629 rows
    owned = []
    for name, record in records.items():
        assert record["spill"] == "", name  # the TF process read the files itself
        first, second = record["epochs"]
        assert len(first) == len(second) == expected * batch, name
        assert first != second and sorted(first) != first  # shuffled, anew each epoch
        assert set(first) == set(second), name
        assert len(set(first)) in (total // 2, total // 2 + 1)  # every row of the share, some twice
        owned.append(set(first))
        assert np.isfinite(record["fit_loss"][0])
    assert not owned[0] & owned[1] and owned[0] | owned[1] == set(ids)  # every row on exactly one node
    seen_validation = [i for r in records.values() for i in r["validation"]]
    assert sorted(seen_validation) == validation_ids  # validation rows once each
    feeds = {e["worker"]: e for e in RunDir(str(tmp_path / "run")).events("feed")}
    assert {w: (e["source"], e["splits"]) for w, e in feeds.items()} == {
        "chief:0": ("parquet", {"train": 629, "validation": 45}),
        "worker:0": ("parquet", {"train": 628, "validation": 45}),
    }
    assert all("rows_per_sec" not in e for e in feeds.values())  # read while training: no rate to claim


@pytest.mark.integration
def test_balance_drop_on_direct_reads_stops_every_node_at_the_smallest_shares_full_batches(spark, tmp_path):
    ids = write_ids(tmp_path / "train")  # 1257 rows: shares of 629 and 628
    batch = 64
    frame = spark.read.parquet(str(tmp_path / "train")).select("x", "y")
    records = epoch_ids_of(
        spark, tmp_path, frame, Feed(features="x", label="y", batch_size=batch, balance="drop", read="direct")
    )
    expected = (len(ids) // 2) // batch  # full batches of the smaller share, computed here
    assert {r["steps_per_epoch"] for r in records.values()} == {expected}
    shares = []
    for name, record in records.items():
        for epoch in record["epochs"]:
            assert len(epoch) == expected * batch, name
            assert len(set(epoch)) == len(epoch), name  # nothing repeated: drop never pads
        shares.append(set(record["epochs"][0]) | set(record["epochs"][1]))
    assert not shares[0] & shares[1] and shares[0] | shares[1] <= set(ids)  # each row on one node at most


@pytest.mark.integration
def test_a_filtered_dataframe_goes_through_spark_and_read_direct_fails_naming_why(spark, tmp_path, caplog):
    write_ids(tmp_path / "train")
    frame = spark.read.parquet(str(tmp_path / "train"))
    roles = plan_roles(2, num_ps=0, master_node="chief")
    feed = Feed(features="x", label="y")
    direct, line = plan_direct(frame.where("id % 2 = 0"), feed, roles)
    assert direct is None and line == "feed: through Spark (the training DataFrame: the plan has a Filter)"
    direct, line = plan_direct(frame.selectExpr("x", "y * 2 as y"), feed, roles)
    assert direct is None and "the plan computes or renames a column" in line
    direct, line = plan_direct(frame, Feed(features="x", label="y", read="spark"), roles)
    assert direct is None and line == "feed: through Spark (Feed(read='spark'))"
    with pytest.raises(FeedConfigError, match=r"Feed\(read='direct'\) needs the training DataFrame to be a plain"):
        plan_direct(frame.where("id > 3"), Feed(features="x", label="y", read="direct"), roles)
    direct, _ = plan_direct(frame.select("x", "y"), Feed(features="x", label="y", read="direct"), roles)
    assert sum(s.rows for share in direct.splits["train"] for s in share) == 1257


def test_files_on_a_kerberized_hdfs_go_through_spark_as_the_tasks_hold_no_ticket(monkeypatch):
    import json

    from airflow_tfos.runtime.feed import direct as direct_reads
    from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV

    uri = "hdfs://nn.example:8020/data/part-0.parquet"
    monkeypatch.setattr(direct_reads, "scan_files", lambda df, feed: ([uri], "plain scan"))
    roles = plan_roles(2, num_ps=0, master_node="chief")
    monkeypatch.setenv(WEBHDFS_ENV, json.dumps({"namenodes": ["http://127.0.0.1:9"], "auth": "kerberos"}))
    direct, line = plan_direct(object(), Feed(features="x", label="y"), roles)
    assert direct is None
    assert line.startswith(f"feed: through Spark ({uri} is on a Kerberized HDFS")
    with pytest.raises(FeedConfigError, match=r"read='direct'\) cannot read the input files: .* Kerberized HDFS"):
        plan_direct(object(), Feed(features="x", label="y", read="direct"), roles)
    monkeypatch.setenv(WEBHDFS_ENV, json.dumps({"namenodes": ["http://127.0.0.1:9"]}))
    monkeypatch.setattr(direct_reads, "row_groups", lambda files: [(uri, 0, 10)])
    direct, line = plan_direct(object(), Feed(features="x", label="y"), roles)
    assert direct is not None and line.startswith("feed: reading 1 Parquet file(s) directly")


@pytest.mark.integration
def test_bad_parquet_input_fails_as_on_the_spark_path(spark, tmp_path):
    folder = tmp_path / "bad"
    folder.mkdir()
    y = pa.array([1.0] * 41 + [None] + [1.0] * 58)
    table = pa.table(
        {"x": pa.array([[1.0, 2.0]] * 100), "y": y, "m": pa.array([{"k": 1}] * 100, pa.map_(pa.string(), pa.int32()))}
    )
    pq.write_table(table, folder / "part-0.parquet", row_group_size=30)
    frame = spark.read.parquet(str(folder))
    with pytest.raises(FeedConfigError, match="column 'z' is not in the training DataFrame"):
        TFClusterRun(
            spark.sparkContext, programs.epoch_ids, num_nodes=2, data=frame, feed=Feed(features="z", label="y")
        ).start()
    with pytest.raises(FeedConfigError, match="column 'm' of the training DataFrame has type map<string,int>"):
        TFClusterRun(
            spark.sparkContext, programs.epoch_ids, num_nodes=2, data=frame, feed=Feed(features="m", label="y")
        ).start()
    # The null is in row 41, past the first row of its row group: only the node's TF process, reading its slices
    # while it trains, meets it; the run still fails with the cause first.
    started = time.monotonic()
    with pytest.raises(FeedConfigError, match="^column 'y' of the training data has null values"):
        run_cluster(
            spark.sparkContext,
            programs.epoch_ids,
            {"epochs": 1},
            num_nodes=2,
            data=frame,
            feed=Feed(features="x", label="y", read="direct"),
        )
    assert time.monotonic() - started < 60
    # The same for an array whose rows change length between row groups of one node's share (one node: its first
    # row, all the probe reads, gives the width every later row must have).
    wide = tmp_path / "wide"
    wide.mkdir()
    x = pa.array([[1.0, 2.0]] * 70 + [[1.0, 2.0, 3.0]] * 30)
    pq.write_table(pa.table({"x": x, "y": pa.array([1.0] * 100)}), wide / "part-0.parquet", row_group_size=10)
    with pytest.raises(FeedConfigError, match=r"^array column 'x' of the training data has rows of different lengths"):
        run_cluster(
            spark.sparkContext,
            programs.epoch_ids,
            {"epochs": 1},
            num_nodes=1,
            data=spark.read.parquet(str(wide)),
            feed=Feed(features="x", label="y", read="direct"),
        )
