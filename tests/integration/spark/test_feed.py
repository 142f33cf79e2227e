"""InputMode.SPARK on a real local cluster: DataFrames fed to real TF training as Arrow batches."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from airflow_tfos.runtime import TFClusterRun
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed
from tests.support import programs
from tests.support.helpers import assert_no_node_processes, read_records

pytestmark = pytest.mark.integration


def linear_frame(spark, rows: int, partitions: int = 3):
    """Rows of x = [a, b] and y = 3a - 2b + 1, spread unevenly over ``partitions`` input partitions."""
    base = spark.range(0, rows, numPartitions=partitions).selectExpr(
        "id", "cast(rand(1) as double) as a", "cast(rand(2) as double) as b"
    )
    # Uneven input partitions: the first holds far more rows than the others.
    skewed = base.repartitionByRange(partitions, "id").where("id < 10 or id % 3 = 0 or id > 100")
    return skewed.selectExpr("array(a, b) as x", "a", "b", "3 * a - 2 * b + 1 as y")


def run_cluster(sc, main_fun, args=None, **kwargs):
    tf_run = TFClusterRun(sc, main_fun, args, **kwargs).start()
    try:
        return tf_run.wait(300)
    finally:
        assert_no_node_processes(tf_run.cluster_id)


def test_dataframe_feed_trains_in_step_with_validation_data(spark, tmp_path, caplog):
    frame = linear_frame(spark, 4000)
    total = frame.count()
    feed = Feed(features="x", label="y", batch_size=32)
    with caplog.at_level("INFO", logger="airflow_tfos"):
        result = run_cluster(
            spark.sparkContext,
            programs.feed_keras,
            {"epochs": 3},
            num_nodes=2,
            run_dir=str(tmp_path),
            data=frame,
            feed=feed,
            validation_data=frame.limit(300),
        )
    records = read_records(str(tmp_path), "feed")
    chief, worker = records["chief:0"], records["worker:0"]
    assert chief["rows"] + worker["rows"] == total  # every row reached exactly one node
    assert abs(chief["rows"] - worker["rows"]) <= 3  # round-robin, whatever the input skew
    assert chief["steps_per_epoch"] == worker["steps_per_epoch"] == -(-max(chief["rows"], worker["rows"]) // 32)
    assert chief["weights"] == worker["weights"]  # synchronous training on different data
    assert chief["validation_steps"] == worker["validation_steps"] >= 4
    assert len(result["val_loss"]) == 3
    assert result["loss"][-1] < result["loss"][0]
    logged = caplog.text
    assert "steps of 32 rows per epoch on every node" in logged and "repeated" in logged


def test_validation_metrics_count_each_row_once_on_uneven_shares(spark, tmp_path, caplog):
    """The exported val_* equal an independent evaluation of the exported model on the validation rows,
    although the nodes hold different numbers of validation batches (49 and 48 rows, batches of 16)."""
    import numpy as np

    from airflow_tfos.runtime import predict

    points = spark.range(0, 600, numPartitions=3).selectExpr("array(rand(1) - 0.5, rand(2) - 0.5) as x", "rand(3) as n")
    frame = points.selectExpr("x", "cast(x[0] + 0.6 * x[1] + (n - 0.5) * 0.4 > 0 as double) as y").cache()
    validation = frame.limit(97).cache()
    with caplog.at_level("INFO", logger="airflow_tfos"):
        run_cluster(
            spark.sparkContext,
            programs.exact_validation,
            num_nodes=2,
            run_dir=str(tmp_path),
            data=frame,
            feed=Feed(features="x", label="y", batch_size=16),
            validation_data=validation,
        )
    records = read_records(str(tmp_path), "exact")
    assert sorted(r["validation_rows"] for r in records.values()) == [48, 49]
    exported = json.loads((tmp_path / "export" / "_SUCCESS").read_text())["metrics"]
    scored = predict(validation, str(tmp_path / "export"), "x").select("y", "prediction").collect()
    y = np.array([r[0] for r in scored])
    p = np.clip(np.array([r[1] for r in scored], dtype="float64"), 1e-7, 1 - 1e-7)
    accuracy = float(((p > 0.5) == (y > 0.5)).mean())
    loss = float(-(y * np.log(p) + (1 - y) * np.log(1 - p)).mean())
    assert len(y) == 97 and 0.6 < accuracy < 1.0
    # fit (given no validation steps: it runs until every node's rows are used up) and evaluate (given
    # ctx.validation_steps) count each validation row once, on both nodes
    for values in (exported, *(r["logs"] for r in records.values())):
        assert values["val_accuracy"] == pytest.approx(accuracy, abs=1e-6)
        assert values["val_loss"] == pytest.approx(loss, abs=1e-5)
    for record in records.values():
        assert record["evaluate"] == pytest.approx([loss, accuracy], abs=1e-5)
    assert "validation data: every row once per pass, in at most 4 steps of up to 16 rows" in caplog.text


def test_under_mwms_each_replica_trains_on_every_row_of_its_node_once_per_epoch(spark, tmp_path):
    frame = spark.range(0, 1000, numPartitions=3).selectExpr("array(cast(id as double), 1.0d) as x", "id as y")
    run_cluster(
        spark.sparkContext,
        programs.mwms_rows_seen,
        num_nodes=2,
        run_dir=str(tmp_path),
        data=frame,
        feed=Feed(features="x", label="y", batch_size=32),
    )
    records = read_records(str(tmp_path), "seen")
    owned = {}
    for name, record in records.items():
        steps = record["steps_per_epoch"]
        # one step of the replica is batch_size of its node's rows (not batch_size / workers, in twice the
        # steps fit does not run): fit's steps per epoch cover every row of the node
        assert record["sizes"] == [32] * steps, name
        assert record["fit_steps"] == [steps, steps], name
        assert len(record["seen"]) == steps * 32, name
        owned[name] = set(record["seen"])
    chief, worker = owned["chief:0"], owned["worker:0"]
    assert not chief & worker and chief | worker == set(range(1000))  # every row, on exactly one node


def test_scalar_and_array_columns_replayed_each_epoch_with_the_evaluator_left_out(spark, tmp_path):
    frame = spark.range(0, 1000, numPartitions=4).selectExpr(
        "cast(id as float) as a",
        "cast(id * 2 as double) as b",
        "array_repeat(cast(id as float), 784) as image",
        "cast(id % 10 as int) as label",
    )
    feed = Feed(features=["a", "b", "image"], label="label", batch_size=100, balance="drop")
    result = run_cluster(
        spark.sparkContext,
        programs.feed_shapes,
        num_nodes=3,
        eval_node=True,
        run_dir=str(tmp_path),
        data=frame,
        feed=feed,
    )
    records = read_records(str(tmp_path), "shapes")
    assert records["evaluator:0"] == {"has_feed": False}
    assert result["shapes"] == {"a": [[100], "float32"], "b": [[100], "float32"], "image": [[100, 784], "float32"]}
    for label in ("chief:0", "worker:0"):
        assert records[label]["steps"] == 5  # 500 rows per node, full batches of 100
        assert records[label]["epoch_rows"] == [500, 500]  # the spill replays every epoch


def test_early_stop_ends_the_run_without_feeding_the_remaining_epochs(spark, tmp_path):
    frame = linear_frame(spark, 20000)
    started = time.monotonic()
    result = run_cluster(
        spark.sparkContext,
        programs.feed_keras,
        {"epochs": 200, "stop_after_batches": 3},
        num_nodes=2,
        run_dir=str(tmp_path),
        data=frame,
        feed=Feed(features="x", label="y", batch_size=16),
    )
    assert len(result["loss"]) == 1  # stopped in the first of 200 epochs
    assert time.monotonic() - started < 120


@pytest.mark.parametrize(
    ("make_frame", "message"),
    [
        (lambda s: s.range(0).selectExpr("array(1d, 2d) as x", "1d as y"), "training data is empty"),
        (lambda s: s.range(1).selectExpr("array(1d, 2d) as x", "1d as y"), "at least one node got none"),
        (
            lambda s: s.range(100).selectExpr("array(1d, 2d) as x", "if(id = 42, null, 1d) as y"),
            "column 'y' of the training data has null values",
        ),
        (
            lambda s: s.range(100).selectExpr("if(id = 7, array(1d), array(1d, 2d)) as x", "1d as y"),
            "array column 'x' of the training data has rows of different lengths",
        ),
    ],
    ids=["empty", "fewer-rows-than-workers", "nulls", "ragged-arrays"],
)
def test_bad_data_is_rejected_before_training_with_the_column_named(spark, make_frame, message):
    started = time.monotonic()
    with pytest.raises(FeedConfigError, match=message):
        run_cluster(
            spark.sparkContext,
            programs.feed_keras,
            num_nodes=2,
            data=make_frame(spark),
            feed=Feed(features="x", label="y", batch_size=8),
        )
    assert time.monotonic() - started < 60


@pytest.mark.parametrize(
    ("select", "message"),
    [
        ("map('k', 1.0) as x", "column 'x' of the training DataFrame has type map<string,decimal"),
        ("named_struct('p', 1.0) as x", "flatten it into numeric columns"),
        ("array('a', 'b') as x", "array<string>, which cannot be fed to TF"),
    ],
)
def test_unsupported_column_types_fail_before_launch(spark, select, message):
    frame = spark.range(10).selectExpr(select, "1d as y")
    with pytest.raises(FeedConfigError, match=message):
        TFClusterRun(
            spark.sparkContext, programs.feed_keras, num_nodes=2, data=frame, feed=Feed(features="x", label="y")
        ).start()


def test_missing_column_and_missing_feed_are_named(spark):
    frame = spark.range(10).selectExpr("1d as x", "1d as y")
    with pytest.raises(FeedConfigError, match="column 'z' is not in the training DataFrame"):
        TFClusterRun(spark.sparkContext, programs.feed_keras, num_nodes=2, data=frame, feed=Feed(features="z")).start()
    with pytest.raises(FeedConfigError, match="also pass feed=Feed"):
        TFClusterRun(spark.sparkContext, programs.feed_keras, num_nodes=2, data=frame)


def test_partition_keys_worked_out_without_spark_match_sparks_hash_partitioning(spark):
    from pyspark.sql import functions as F

    from airflow_tfos.runtime.feed.spark_side import partition_keys, spark_int_hash

    values = spark.range(-50, 300).select(
        F.col("id").cast("int").alias("v"), F.hash(F.col("id").cast("int")).alias("h")
    )
    assert {r["v"]: r["h"] for r in values.collect()} == {v: spark_int_hash(v) for v in range(-50, 300)}
    for n in (1, 2, 3, 5, 8):
        keys = partition_keys(n)
        placed = (
            spark.createDataFrame([(k,) for k in keys.values()], "k int")
            .repartition(n, "k")
            .select("k", F.spark_partition_id().alias("p"))
            .collect()
        )
        assert {r["p"]: r["k"] for r in placed} == keys


def mixed_frame(spark, rows: int):
    """Rows of every type the feed takes, built in Python; return the DataFrame and each row as the model
    should see it (worked out here, independently of the feed)."""
    import datetime
    import decimal

    import numpy as np
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql import types as T

    fields = [("id", T.DoubleType()), ("y2", T.DoubleType()), ("dv", VectorUDT()), ("sv", VectorUDT())]
    fields += [("t", T.StringType()), ("m", T.DecimalType(10, 2)), ("d", T.DateType()), ("ts", T.TimestampType())]
    fields += [("f", T.DoubleType()), ("tok", T.ArrayType(T.IntegerType())), ("p", T.ArrayType(T.DoubleType()))]
    fields += [("w", T.DoubleType())]
    schema = T.StructType([T.StructField(name, kind) for name, kind in fields])
    day, start = datetime.date(2024, 1, 1), datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    data, expected = [], {}
    f32 = lambda v: float(np.float32(v))  # noqa: E731 - float features reach the model as float32
    for i in range(rows):
        sparse = [0.0] * 4
        sparse[i % 4] = 1.0
        sv = Vectors.sparse(4, {i % 4: 1.0}) if i % 3 else Vectors.dense([float(i % 2), 0.0, 1.0, 0.0])
        when = start + datetime.timedelta(seconds=37 * i)
        f = None if i % 5 == 0 else i / 10
        tok, p = list(range(i % 4)), [float(v) for v in range(i % 5)]
        row = (float(i), float(i % 7), Vectors.dense([i / 100, 1.0]), sv, "abc"[i % 3], decimal.Decimal(i) / 4)
        data.append((*row, day + datetime.timedelta(days=i), when, f, tok, p, 0.5 + i % 2))
        expected[i] = {
            "dv": [f32(i / 100), 1.0],
            "sv": sparse if i % 3 else [float(i % 2), 0.0, 1.0, 0.0],
            "t": "abc"[i % 3],
            "m": f32(i / 4),
            "d": f32((day - datetime.date(1970, 1, 1)).days * 86400 + i * 86400),
            "ts": f32(when.timestamp()),
            "f": -1.0 if f is None else f32(f),
            "tok": tok,
            "p": (p + [-1.0] * 3)[:3],
            "id": float(i),
            "y2": float(i % 7),
            "w": 0.5 + i % 2,
        }
    return spark.createDataFrame(data, schema), expected


def test_a_table_of_vectors_strings_dates_and_ragged_arrays_trains_under_mwms_with_validation(spark, tmp_path):
    """Every type through the spill and the feed on two workers: the rows each replica sees, training and
    validation, equal the DataFrame's rows (nulls filled, arrays padded, dates as epoch seconds)."""
    frame, expected = mixed_frame(spark, 120)
    feed = Feed(
        features=["dv", "sv", "t", "m", "d", "ts", "f", "tok", "p"],
        label=["id", "y2"],
        weight="w",
        fill={"f": -1.0},
        pad={"p": [3, -1.0]},
        ragged=["tok"],
        batch_size=16,
    )
    validation = frame.where("id < 30")
    result = run_cluster(
        spark.sparkContext,
        programs.mixed_types,
        num_nodes=2,
        run_dir=str(tmp_path),
        data=frame,
        feed=feed,
        validation_data=validation,
    )
    records = read_records(str(tmp_path), "mixed")
    trained = [row for r in records.values() for row in r["train"]]
    assert {row["id"] for row in trained} == set(map(float, range(120)))  # every row, some repeated (pad)
    for row in trained:
        assert row == expected[int(row["id"])], row
    validated = sorted((row for r in records.values() for row in r["validation"]), key=lambda row: row["id"])
    assert validated == [expected[i] for i in range(30)]  # each validation row once
    assert records["chief:0"]["weights"] == records["worker:0"]["weights"]
    assert len(result) == 2 and all(np.isfinite(v) for v in result + records["chief:0"]["val_loss"])


def test_a_sparse_vector_width_mismatch_fails_naming_the_column_and_sizes(spark):
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql import types as T

    schema = T.StructType([T.StructField("v", VectorUDT()), T.StructField("y", T.DoubleType())])
    rows = [(Vectors.sparse(5 if i == 7 else 4, {0: 1.0}), 1.0) for i in range(20)]
    with pytest.raises(FeedConfigError, match=r"vector column 'v' of the training data has vectors of different sizes"):
        run_cluster(
            spark.sparkContext,
            programs.feed_keras,
            num_nodes=2,
            data=spark.createDataFrame(rows, schema).repartition(1),
            feed=Feed(features="v", label="y", batch_size=4),
        )


def test_a_frame_already_dealt_out_one_partition_per_node_is_fed_without_a_second_shuffle(spark, tmp_path, caplog):
    from airflow_tfos.runtime.feed.spark_side import round_robin_partitions

    rows = spark.range(0, 1001, numPartitions=3).selectExpr("array(cast(id as float), 1.0f) as x", "id as y")
    assert round_robin_partitions(rows) is None
    assert round_robin_partitions(rows.repartition(2, "y")) is None  # hashed: no balance promised
    assert round_robin_partitions(rows.repartition(3)) == 3
    frame = rows.repartition(2).cache()
    frame.count()
    assert round_robin_partitions(frame.select("x", "y")) == 2
    sc = spark.sparkContext
    with caplog.at_level("INFO", logger="airflow_tfos"):
        tf_run = TFClusterRun(
            sc,
            programs.epoch_ids,
            {"epochs": 2},
            num_nodes=2,
            run_dir=str(tmp_path),
            data=frame,
            feed=Feed(features="x", label="y", batch_size=50),
        ).start()
        try:
            tf_run.wait(300)
        finally:
            assert_no_node_processes(tf_run.cluster_id)
    assert "already dealt out round-robin into 2 partitions, one per node: no layout shuffle" in caplog.text
    tracker = sc.statusTracker()
    stages = [s for j in tracker.getJobIdsForGroup(tf_run.job_group) for s in tracker.getJobInfo(j).stageIds]
    ran = [(s, info.name) for s in stages if (info := tracker.getStageInfo(s)) and info.numCompletedTasks]
    assert len(ran) == 1, ran  # the barrier stage alone ran (the cached frame's own shuffle is skipped)
    records = read_records(str(tmp_path), "ids")
    owned = []
    for name, record in records.items():
        assert record["steps_per_epoch"] == 11, name  # 501 and 500 rows in batches of 50, padded to the larger
        assert len(set(record["epochs"][0])) in (500, 501), name
        owned.append(set(record["epochs"][0]))
    assert not owned[0] & owned[1] and owned[0] | owned[1] == set(range(1001))
    frame.unpersist()
