"""A Spark driver of its own for the parameter-server tests, which need more executors than the session's.

    python -m tests.support.ps_driver <num_nodes> <run_dir> <scenario>...

Starts ``local-cluster[num_nodes,1,...]`` (one TF node per one-core executor, one parameter server) and
runs each scenario in turn, printing ``RESULT <scenario> <json>`` with the chief's return value and
``ended_after``: the seconds from the chief's return to the run's end as the driver saw it.
Scenarios: ``unfed``, ``count_ids``, ``count_file_ids`` and ``keras_files`` (InputMode.TENSORFLOW: TFRecord
files read by the workers), ``keras``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tests.conftest import local_cluster_conf
from tests.support import ps_programs

#: Rows of the count_ids data (ids 3 i + 1, so that an id is not a row's position): 400 in each of the
#: 3 input partitions, dealt round-robin, give 2 or 3 workers equal shares, so no row is repeated.
ID_ROWS = 1200
BATCH = 25
#: Records in each TFRecord file of the count_file_ids data (ids 3 i + 1 again, 600 of them): the workers'
#: shares hold different numbers of rows, neither a whole number of batches of FILE_BATCH.
FILE_ROWS = (150, 120, 110, 90, 80, 50)
FILE_BATCH = 16


def id_frame(spark):
    return spark.range(0, ID_ROWS, numPartitions=3).selectExpr(
        "array(cast(id * 3 + 1 as double)) as x", "id * 3 + 1 as id"
    )


#: Rows and vector size of the ``mixed`` scenario's table.
MIXED_ROWS, MIXED_SIZE = 300, 5


def mixed_row(i: int) -> tuple:
    """Row ``i`` of the ``mixed`` table: ``(id, string, ragged array, vector)``, the vector as
    ``(dense values)`` or ``(indices, values)``: dense, sparse with two entries, empty sparse, in turn."""
    vector = [float(i % 7)] * MIXED_SIZE if i % 3 == 0 else ([i % 4, 4], [i / 10, -1.0]) if i % 3 == 1 else ([], [])
    return i, "ab" * (i % 5), [i / 2] * (i % 3), vector


def mixed_frame(spark):
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql import types as T

    schema = T.StructType(
        [
            T.StructField("id", T.LongType()),
            T.StructField("s", T.StringType()),
            T.StructField("r", T.ArrayType(T.DoubleType())),
            T.StructField("v", VectorUDT()),
        ]
    )
    rows = []
    for i, text, ragged, vector in map(mixed_row, range(MIXED_ROWS)):
        v = Vectors.dense(vector) if isinstance(vector, list) else Vectors.sparse(MIXED_SIZE, *vector)
        rows.append((i, text, ragged, v))
    return spark.createDataFrame(rows, schema).repartition(3)


def write_id_files(directory: Path) -> str:
    """Write FILE_ROWS TFRecord files of ids (as text, one per record) into ``directory``; return a glob."""
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    start = 0
    for part, rows in enumerate(FILE_ROWS):
        with tf.io.TFRecordWriter(str(directory / f"part-{part}.tfrecord")) as writer:
            for i in range(start, start + rows):
                writer.write(str(3 * i + 1).encode())
        start += rows
    return str(directory / "*.tfrecord")


def write_linear_files(directory: Path, rows_per_file=(200, 250, 300, 350)) -> str:
    """Write TFRecord files of ``tf.train.Example`` rows ``x`` (2 floats), ``y = 3 x0 - 2 x1 + 1``; return a glob."""
    import numpy as np
    import tensorflow as tf

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(5)
    for part, rows in enumerate(rows_per_file):
        with tf.io.TFRecordWriter(str(directory / f"part-{part}.tfrecord")) as writer:
            for x in rng.random((rows, 2)):
                feature = {
                    "x": tf.train.Feature(float_list=tf.train.FloatList(value=x)),
                    "y": tf.train.Feature(float_list=tf.train.FloatList(value=[3 * x[0] - 2 * x[1] + 1])),
                }
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return str(directory / "*.tfrecord")


def linear_frame(spark, rows: int, seed: int):
    base = spark.range(0, rows, numPartitions=3).selectExpr(f"rand({seed}) as a", f"rand({seed + 1}) as b")
    return base.selectExpr("array(a, b) as x", "3 * a - 2 * b + 1 as y")


def run_scenario(sc, spark, num_nodes: int, run_dir: str, scenario: str) -> dict:
    from airflow_tfos.runtime import TFClusterRun
    from airflow_tfos.shared.feed import Feed

    kwargs = {"num_nodes": num_nodes, "num_ps": 1, "run_dir": run_dir}
    if scenario == "unfed":
        tf_run = TFClusterRun(sc, ps_programs.ps_unfed, {"steps": 10}, **kwargs)
    elif scenario == "count_ids":
        feed = Feed(features="x", label="id", batch_size=BATCH, shuffle_window=100)
        args = {"max_id": 3 * ID_ROWS, "epochs": 2}
        tf_run = TFClusterRun(sc, ps_programs.ps_count_ids, args, data=id_frame(spark), feed=feed, **kwargs)
    elif scenario == "count_file_ids":
        pattern = write_id_files(Path(run_dir) / "data")
        args = {"pattern": pattern, "batch_size": FILE_BATCH, "max_id": 3 * sum(FILE_ROWS), "epochs": 2}
        tf_run = TFClusterRun(sc, ps_programs.ps_count_file_ids, args, **kwargs)
    elif scenario == "mixed":
        feed = Feed(features=["s", "r", "v"], label="id", ragged=["r"], batch_size=BATCH, shuffle=False)
        args = {"size": MIXED_SIZE, "rows": MIXED_ROWS}
        tf_run = TFClusterRun(sc, ps_programs.ps_mixed_types, args, data=mixed_frame(spark), feed=feed, **kwargs)
    elif scenario == "keras_files":
        args = {"pattern": write_linear_files(Path(run_dir) / "data"), "epochs": 12}
        tf_run = TFClusterRun(sc, ps_programs.ps_keras_fit_files, args, **kwargs)
    elif scenario == "keras":
        feed = Feed(features="x", label="y", batch_size=32)
        tf_run = TFClusterRun(
            sc,
            ps_programs.ps_keras_fit,
            {"epochs": 6},
            data=linear_frame(spark, 4000, 1),
            validation_data=linear_frame(spark, 640, 7),
            feed=feed,
            **kwargs,
        )
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    result = tf_run.start().wait(400)
    ended = time.time()
    return {**result, "ended_after": round(ended - result["returned_at"], 2), "run_id": tf_run.cluster_id}


def main(num_nodes: int, run_dir: str, scenarios: list[str]) -> int:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    conf = local_cluster_conf(num_nodes, app_name="airflow-tfos-ps").set("spark.executor.memory", "640m")
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    spark = SparkSession(sc)
    try:
        for scenario in scenarios:
            scenario_dir = Path(run_dir) / scenario
            scenario_dir.mkdir(parents=True, exist_ok=True)
            result = run_scenario(sc, spark, num_nodes, str(scenario_dir), scenario)
            sys.stdout.write(f"RESULT {scenario} {json.dumps(result)}\n")
            sys.stdout.flush()
    finally:
        sc.stop()
    return 0


def main_checkpointed(run_dir: str, epochs: int = 3, every: int = 10) -> int:
    """Run ``ps_checkpointed`` on ps, chief and 2 workers (``local-cluster[4,...]``), resumable with
    max_attempts=3, on 800 fed rows in batches of 16 (52 steps an epoch: 26 per worker); print
    ``RESULT checkpointed <json>``. tests/integration/spark/test_ps_checkpoints.py runs it with ``python -c``.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from airflow_tfos.runtime import TFClusterRun
    from airflow_tfos.shared.feed import Feed

    conf = local_cluster_conf(4, app_name="airflow-tfos-ps-checkpoints").set("spark.executor.memory", "640m")
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    try:
        args = {"epochs": epochs, "every": every, "sleep": 0.1}
        tf_run = TFClusterRun(
            sc,
            ps_programs.ps_checkpointed,
            args,
            num_nodes=4,
            num_ps=1,
            run_dir=run_dir,
            data=linear_frame(SparkSession(sc), 800, 3),
            feed=Feed(features="x", label="y", batch_size=16),
            max_attempts=3,
        )
        result = tf_run.start().wait(400)
        sys.stdout.write(f"RESULT checkpointed {json.dumps(result)}\n")
        sys.stdout.flush()
    finally:
        sc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2], sys.argv[3:]))
