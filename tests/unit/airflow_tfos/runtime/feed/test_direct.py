"""Direct reads: how training nodes' shares of Parquet files are planned and read, without Spark. On the local
cluster: tests/integration/spark/test_feed_direct.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tfos.runtime.feed.direct import Slice, plan_direct, read_slices, row_groups, split_rows
from airflow_tfos.runtime.node.cluster import plan_roles
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed

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
