"""Direct reads on the local cluster: training nodes read their share of Parquet files themselves (real TF).
Planning and reading without Spark: tests/unit/airflow_tfos/runtime/feed/test_direct.py."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tfos.runtime import TFClusterRun
from airflow_tfos.runtime.feed.direct import plan_direct
from airflow_tfos.runtime.node.cluster import plan_roles
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed
from airflow_tfos.shared.rundir import RunDir
from tests.support import programs
from tests.support.helpers import assert_no_node_processes, read_records
from tests.unit.airflow_tfos.runtime.feed.test_direct import write_ids


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
            # the node whose share has no null ends its epoch and writes its record here, whichever ends first
            run_dir=str(tmp_path / "null-run"),
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
            run_dir=str(tmp_path / "wide-run"),
        )
