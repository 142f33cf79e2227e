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

[1] tests/integration/spark/test_ps_visitation.py (one Spark application of 4 executors for them all), with worker 1
    slowed on purpose: the coordinator hands steps to whichever worker is free.
[2] ``balance`` does not apply: each node reads its own files to their end (nodes may hold different
    numbers of rows; tf.distribute hands a node done early empty batches), so every row comes once.
[3] the workers read the files (``ctx.worker_files``); the shuffle is the user's read function's.
[4] TFoS's feed has no ``balance`` and no shuffle: ``TFCluster.train`` streams ``num_epochs`` passes of each
    node's rows, the shorter nodes repeating rows to match the longest (as TFoS did).
[5] under ParameterServerStrategy the chief schedules every step and the workers run no Python: a Python
    ``DataFeed`` on a worker feeds nothing the coordinator's steps read (use ``ctx.dataset_fn``).

One node and MWMS run on the session's local cluster, a TF cluster per cell; of the balanced cells half run by
default (BALANCED_CELLS), all with AIRFLOW_TFOS_FULL_MATRIX=1.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_tfos.shared.rundir import RunDir
from tests.integration.spark import visitation_programs as programs
from tests.support.helpers import feed_balance, logged_balance, read_records, report_visitation

pytestmark = pytest.mark.integration

#: Rows of the data (ids 0..ROWS-1), batches of BATCH: no node's share fills a whole number of batches.
ROWS, BATCH = 203, 20
#: Rows of the Parquet files of the TENSORFLOW-mode cells (ids in order across the files).
FILE_ROWS = (37, 41, 53, 29, 43)
STRATEGIES = {"one": 1, "mwms": 2}
BALANCED = [(s, b, o) for s in ("frame", "parquet") for b in ("drop", "pad") for o in ("ordered", "shuffle")]
#: The balanced cells run: half of the 2 x 2 x 2 x 2 (input, balance, order, strategy), the half where the strategy
#: is MWMS exactly when an odd number of the other three are at their second level; so each level of each factor
#: comes four times and each pair of levels of two factors twice. All sixteen with AIRFLOW_TFOS_FULL_MATRIX=1.
BALANCED_CELLS = [
    (*cell, strategy)
    for cell in BALANCED
    for strategy in STRATEGIES
    if os.environ.get("AIRFLOW_TFOS_FULL_MATRIX") == "1"
    or (strategy == "mwms") == (sum((cell[0] == "parquet", cell[1] == "pad", cell[2] == "shuffle")) % 2 == 1)
]


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


@pytest.mark.parametrize(("source", "balance", "order", "strategy"), BALANCED_CELLS)
def test_visitation_matrix_fed_rows_once_per_epoch_but_what_balance_states(
    spark, parquet_ids, tmp_path, caplog, strategy, source, balance, order
):
    from airflow_tfos.runtime import TFClusterRun
    from airflow_tfos.shared.feed import Feed

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
    assert logged_balance(caplog.text, run.cluster_id) == {
        node: {k: b[k] for k in ("rows", "repeated", "dropped")} for node, b in stated.items()
    }
    assert all((b["repeated"] if balance == "drop" else b["dropped"]) == 0 for b in stated.values())
    assert sum(b["repeated"] + b["dropped"] for b in stated.values()) > 0
    for epoch in range(programs.EPOCHS):
        owned = [_check_balanced_epoch(r["epochs"][epoch], stated[node], node) for node, r in records.items()]
        report_visitation(
            f"{strategy}-{source}-{balance}-{order} epoch {epoch}",
            [i for r in records.values() for i in r["epochs"][epoch]],
            sum(range(ROWS)),
            sum(b["repeated"] for b in stated.values()),
            sum(b["dropped"] for b in stated.values()),
        )
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
        report_visitation(
            f"{strategy}-files-{order} epoch {epoch}", [i for s in seen for i in s], sum(range(sum(FILE_ROWS)))
        )
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
    for epoch in range(epochs):
        trained = [
            i
            for node, r in records.items()
            for i in r["epochs"][0][
                epoch * stated[node]["rows_per_epoch"] : (epoch + 1) * stated[node]["rows_per_epoch"]
            ]
        ]
        repeated = sum(b["repeated"] for b in stated.values())
        report_visitation(f"{strategy}-datafeed epoch {epoch}", trained, sum(range(ROWS)), repeated)


def _resumed_and_whole(spark, tmp_path, frame) -> tuple[dict, dict]:
    """The same run twice: whole, and with attempt 0 dying at step 19 (epoch 1, batch 8 of 11) after its checkpoint
    of step 15 (epoch 1, 4 batches in); one node, shuffled, 203 rows padded to 220 (11 steps per epoch)."""
    from airflow_tfos.runtime import TFClusterRun
    from airflow_tfos.shared.feed import Feed

    feed = Feed(features="x", label="id", batch_size=BATCH, balance="pad", shuffle=True, shuffle_window=64)
    results = {}
    for name, crash_at in (("whole", None), ("resumed", 19)):
        run = TFClusterRun(
            spark.sparkContext,
            programs.resumed_counts,
            {"max_id": ROWS, "epochs": 3, "every": 5, "crash_at": crash_at},
            num_nodes=1,
            run_dir=str(tmp_path / name),
            data=frame,
            feed=feed,
            max_attempts=2,
        )
        results[name] = run.start().wait(240)
    assert (results["whole"]["attempt"], results["resumed"]["attempt"]) == (0, 1)
    (restore,) = RunDir(str(tmp_path / "resumed")).events("restore")
    assert (restore["step"], restore["epoch"], restore["in_epoch"]) == (15, 1, 4)
    return results["whole"], results["resumed"]


def test_visitation_a_run_resumed_mid_epoch_trains_exactly_the_rows_of_an_uninterrupted_run(spark, tmp_path):
    # The resumed attempt restores the counts of step 15 and finishes epoch 1 read in the order attempt 0 read
    # it (the same rows on the node in the same order, the same shuffle), without its first 4 batches: what
    # each id was trained on in the end is what the uninterrupted run trained, id by id (the 4 batches after
    # the checkpoint were lost with attempt 0 and trained again).
    whole, resumed = _resumed_and_whole(spark, tmp_path, _id_frame(spark))
    assert not RunDir(str(tmp_path / "resumed")).events("epoch_redone")
    assert whole["step"] == resumed["step"] == 33
    assert sum(whole["counts"]) == 33 * BATCH and min(whole["counts"]) >= 3
    assert resumed["counts"] == whole["counts"]


def test_visitation_a_resumed_epoch_whose_rows_come_in_another_order_is_trained_again_in_full(spark, tmp_path):
    # A DataFrame Spark computes in a new order each time: the resumed attempt's share replays in another order
    # than attempt 0's, so skipping 4 batches would skip other rows than those trained. The epoch is trained
    # again in full instead: 4 batches more than the uninterrupted run, every id at least once per epoch.
    import random

    from pyspark.sql import functions as F

    # Not F.rand(): its seed is fixed with the plan, and Spark computes that order alike each time.
    anew = F.udf(lambda: random.random(), "double").asNondeterministic()
    whole, resumed = _resumed_and_whole(spark, tmp_path, _id_frame(spark).orderBy(anew()))
    (redone,) = RunDir(str(tmp_path / "resumed")).events("epoch_redone")
    assert (redone["epoch"], redone["in_epoch"]) == (1, 4) and "another order" in redone["reason"]
    assert (whole["step"], resumed["step"]) == (33, 37)
    assert sum(resumed["counts"]) == 37 * BATCH and min(resumed["counts"]) >= 3
