"""The visitation matrix: in one epoch, which rows each input path trains on, under each strategy.

In every cell the ids seen in an epoch, collected on the training side, are each row of the data exactly
once, except what ``balance`` says: each node's ``feed`` event (and the driver's log line, which the test
reads too) states how many of its rows an epoch repeats (``pad``) or leaves out (``drop``), and the ids
are checked against exactly those counts.

The cells, and why some do not exist:

=====================  ==========================  ==========================  ===============================
input path             one node                    MWMS, 2 nodes               parameter servers, 2 workers
=====================  ==========================  ==========================  ===============================
DataFrame feed         drop/pad x ordered/shuffle  drop/pad x ordered/shuffle  drop/pad x ordered/shuffle [1]
direct Parquet reads   drop/pad x ordered/shuffle  drop/pad x ordered/shuffle  drop/pad x ordered/shuffle [1]
TENSORFLOW-mode files  ordered/shuffle [2]         ordered/shuffle [2]         ctx.worker_files [1] [3]
TFoS DataFeed          one cell [4]                one cell [4]                none [5]
=====================  ==========================  ==========================  ===============================

[1] tests/runtime/test_ps_visitation.py (one Spark application of 4 executors for them all), with worker 1
    slowed on purpose: the coordinator hands steps to whichever worker is free.
[2] ``balance`` does not apply: each node reads its own files to their end (nodes may hold different
    numbers of rows; tf.distribute hands a node done early empty batches), so every row comes once.
[3] the workers read the files (``ctx.worker_files``); the shuffle is the user's read function's.
[4] TFoS's feed has no ``balance`` and no shuffle: ``TFCluster.train`` streams ``num_epochs`` passes of each
    node's rows, the shorter nodes repeating rows to match the longest (as TFoS did).
[5] under ParameterServerStrategy the chief schedules every step and the workers run no Python: a Python
    ``DataFeed`` on a worker feeds nothing the coordinator's steps read (use ``ctx.dataset_fn``).

One node and MWMS run on the session's local cluster, a TF cluster per cell.
"""

from __future__ import annotations

import collections
import dataclasses
import logging

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.runtime import visitation_programs as programs
from tests.runtime.helpers import feed_balance, logged_balance, read_records

pytestmark = pytest.mark.integration

#: Rows of the data (ids 0..ROWS-1), batches of BATCH: no node's share fills a whole number of batches.
ROWS, BATCH = 203, 20
#: Rows of the Parquet files of the TENSORFLOW-mode cells (ids in order across the files).
FILE_ROWS = (37, 41, 53, 29, 43)
STRATEGIES = {"one": 1, "mwms": 2}
BALANCED = [(s, b, o) for s in ("frame", "parquet") for b in ("drop", "pad") for o in ("ordered", "shuffle")]


@pytest.fixture(scope="module")
def parquet_ids(spark, tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("visitation") / "ids.parquet")
    _id_frame(spark).write.parquet(path)
    return path


@pytest.fixture(scope="module")
def id_files(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("visitation-files")
    start = 0
    for number, rows in enumerate(FILE_ROWS):
        ids = np.arange(start, start + rows)
        x = pa.array([[float(i)] for i in ids], type=pa.list_(pa.float64()))
        pq.write_table(pa.table({"x": x, "id": ids}), directory / f"part-{number}.parquet", row_group_size=16)
        start += rows
    return str(directory / "*.parquet")


def _id_frame(spark):
    return spark.range(0, ROWS, numPartitions=3).selectExpr("array(cast(id as double)) as x", "id")


def _visits(out) -> dict[str, dict]:
    records = read_records(str(out), "visits")
    assert records, "no node recorded what it trained on"
    return records


def _check_balanced_epoch(seen: list[int], balance: dict, node: str) -> set[int]:
    """One node's epoch: ``rows_per_epoch`` ids, each of its rows once but the ``dropped`` ones (absent) and
    the ``repeated`` ones (twice); returns the node's distinct ids."""
    counts = collections.Counter(seen)
    assert len(seen) == balance["rows_per_epoch"], (node, len(seen), balance)
    assert len(counts) == balance["rows"] - balance["dropped"], (node, len(counts), balance)
    assert sum(c - 1 for c in counts.values()) == balance["repeated"] and max(counts.values()) <= 2, (node, balance)
    return set(counts)


def _check_order(records: dict, shuffle: bool) -> None:
    for node, record in records.items():
        first, second = record["epochs"][:2]
        if shuffle:
            assert first != sorted(first) and first != second, node  # shuffled, anew each epoch
        else:
            assert first == second, node  # the same order every epoch


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(("source", "balance", "order"), BALANCED)
def test_visitation_matrix_fed_rows_once_per_epoch_but_what_balance_states(
    spark, parquet_ids, tmp_path, caplog, strategy, source, balance, order
):
    from airflow_tfos.runtime import TFClusterRun
    from airflow_tfos.runtime.feed import Feed

    feed = Feed(features="x", label="id", batch_size=BATCH, balance=balance, shuffle=order == "shuffle")
    data = _id_frame(spark)
    if source == "parquet":
        data, feed = spark.read.parquet(parquet_ids), dataclasses.replace(feed, read="direct")
    out = tmp_path / "out"
    out.mkdir()
    run_dir = str(tmp_path / "run")
    with caplog.at_level(logging.INFO, logger="airflow_tfos"):
        run = TFClusterRun(
            spark.sparkContext,
            programs.replica_ids,
            {"out": str(out)},
            num_nodes=STRATEGIES[strategy],
            run_dir=run_dir,
            data=data,
            feed=feed,
        )
        run.start().wait(240)
    records, stated = _visits(out), feed_balance(run_dir)
    assert set(stated) == set(records) and sum(b["rows"] for b in stated.values()) == ROWS
    # The driver's log states the same figures, node by node; the balance mode did what it says.
    assert logged_balance(caplog.text, run.run_id) == {
        node: {k: b[k] for k in ("rows", "repeated", "dropped")} for node, b in stated.items()
    }
    assert all((b["repeated"] if balance == "drop" else b["dropped"]) == 0 for b in stated.values())
    assert sum(b["repeated"] + b["dropped"] for b in stated.values()) > 0
    for epoch in range(programs.EPOCHS):
        owned = [_check_balanced_epoch(r["epochs"][epoch], stated[node], node) for node, r in records.items()]
        # No row on two nodes; what no node trained on is exactly the rows left out.
        assert sum(map(len, owned)) == len(set().union(*owned))
        assert ROWS - len(set().union(*owned)) == sum(b["dropped"] for b in stated.values())
    _check_order(records, order == "shuffle")


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("order", ["ordered", "shuffle"])
def test_visitation_matrix_tensorflow_mode_files_every_row_once_per_epoch(spark, id_files, tmp_path, strategy, order):
    from airflow_tfos.runtime import TFClusterRun

    out = tmp_path / "out"
    out.mkdir()
    args = {"out": str(out), "pattern": id_files, "batch_size": BATCH, "shuffle": order == "shuffle"}
    TFClusterRun(
        spark.sparkContext, programs.replica_ids, args, num_nodes=STRATEGIES[strategy], run_dir=str(tmp_path / "run")
    ).start().wait(240)
    records = _visits(out)
    assert len(records) == STRATEGIES[strategy]
    for epoch in range(programs.EPOCHS):
        seen = [r["epochs"][epoch] for r in records.values()]
        # Each node its own files' rows once; together every row of the files once.
        assert all(len(s) == len(set(s)) for s in seen)
        assert sorted(i for s in seen for i in s) == list(range(sum(FILE_ROWS)))
    _check_order(records, order == "shuffle")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_visitation_matrix_tfos_datafeed_every_row_once_per_epoch_short_nodes_repeating(sc, tmp_path, caplog, strategy):
    from airflow_tfos.runtime.compat import TFCluster

    out = tmp_path / "out"
    out.mkdir()
    epochs = 2
    rows = sc.parallelize([([float(i)], i) for i in range(ROWS)], 3)
    with caplog.at_level(logging.INFO, logger="airflow_tfos"):
        cluster = TFCluster.run(
            sc,
            programs.datafeed_ids,
            {"out": str(out), "batch_size": BATCH},
            STRATEGIES[strategy],
            0,
            input_mode=TFCluster.InputMode.SPARK,
        )
        cluster.train(rows, num_epochs=epochs)
        cluster.shutdown()
    records = _visits(out)
    stated = feed_balance(next(iter(records.values()))["run_dir"])
    assert set(stated) == set(records) and sum(b["rows"] for b in stated.values()) == ROWS
    run_ids = {
        line.split("TF cluster ", 1)[1].split(":", 1)[0] for line in caplog.messages if "TFCluster.train:" in line
    }
    assert len(run_ids) == 1, caplog.messages
    assert logged_balance(caplog.text, run_ids.pop()) == {
        node: {k: b[k] for k in ("rows", "repeated", "dropped")} for node, b in stated.items()
    }
    owned = []
    for node, record in records.items():
        (stream,) = record["epochs"]
        per_epoch = stated[node]["rows_per_epoch"]
        assert len(stream) == epochs * per_epoch, node
        # The stream is epoch after epoch: each epoch every row of the node once, and as many repeated as stated.
        epoch_ids = [
            _check_balanced_epoch(stream[e * per_epoch : (e + 1) * per_epoch], stated[node], node)
            for e in range(epochs)
        ]
        assert epoch_ids[0] == epoch_ids[1]
        owned.append(epoch_ids[0])
    assert sorted(i for ids in owned for i in ids) == list(range(ROWS))
