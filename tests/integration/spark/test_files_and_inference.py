"""InputMode.TENSORFLOW file shards read by the nodes, and batch inference with a SavedModel, on the local cluster."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airflow_tfos.runtime import run
from airflow_tfos.runtime.driver.inference import predict, write_predictions
from airflow_tfos.shared.errors import FeedConfigError
from tests.support import programs
from tests.support.helpers import read_records


@pytest.mark.integration
@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_tensorflow_mode_nodes_read_disjoint_shards_of_the_files(spark, tmp_path, fmt):
    frame = spark.range(0, 600, numPartitions=6).selectExpr("id as a", "cast(id * 2 as double) as b", "id % 3 as y")
    writer = frame.write.mode("overwrite")
    (writer.option("header", True).csv if fmt == "csv" else writer.parquet)(str(tmp_path / "data"))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run(
        spark.sparkContext,
        programs.tf_mode_files,
        {"pattern": str(tmp_path / "data"), "format": fmt},
        num_nodes=2,
        run_dir=str(run_dir),
    )
    records = read_records(str(run_dir), "files")
    chief, worker = records["chief:0"], records["worker:0"]
    assert not set(chief["files"]) & set(worker["files"])
    assert sorted(chief["ids"] + worker["ids"]) == list(range(600))  # every row read once, by one node
    assert min(chief["rows"], worker["rows"]) >= 200


@pytest.mark.integration
@pytest.mark.parametrize("units", [1, 3])
def test_predict_scores_every_row_in_place_with_a_saved_model(spark, tmp_path, units):
    export = tmp_path / "model"
    run(spark.sparkContext, programs.export_linear_model, {"export_dir": str(export), "units": units}, num_nodes=1)
    frame = spark.range(0, 2000, numPartitions=4).selectExpr(
        "id", "array(cast(id % 7 as float), cast(id % 5 as float)) as x"
    )
    scored = predict(frame, str(export), "x", batch_size=128)
    assert scored.columns == ["id", "x", "prediction"]
    rows = scored.collect()
    assert len(rows) == 2000
    for row in rows:
        expected = 3 * (row["id"] % 7) - 2 * (row["id"] % 5) + 1
        values = [row["prediction"]] if units == 1 else row["prediction"]
        assert values == pytest.approx([expected] * units, abs=1e-4)


@pytest.mark.integration
def test_predict_rejects_a_clashing_column_before_running(spark, tmp_path):
    export = tmp_path / "model"
    run(spark.sparkContext, programs.export_linear_model, {"export_dir": str(export)}, num_nodes=1)
    frame = spark.range(3).selectExpr("array(1f, 2f) as x", "1 as prediction")
    with pytest.raises(FeedConfigError, match="already has a column 'prediction'"):
        predict(frame, str(export), "x")


def test_a_failed_rewrite_of_predictions_leaves_the_previous_ones_whole(spark, tmp_path):
    output = str(tmp_path / "predictions")
    assert (
        write_predictions(spark.range(0, 30, numPartitions=2).selectExpr("id", "id * 2.0 as prediction"), output) == 30
    )
    failing = spark.range(0, 40, numPartitions=2).selectExpr("id", "assert_true(id < 35) as prediction")
    with pytest.raises(Exception, match="assert_true|id < 35"):
        write_predictions(failing, output)
    assert spark.read.parquet(output).count() == 30  # the previous predictions, whole
    assert (
        write_predictions(spark.range(0, 50, numPartitions=2).selectExpr("id", "id * 3.0 as prediction"), output) == 50
    )
    assert sorted(r["prediction"] for r in spark.read.parquet(output).collect()) == [3.0 * i for i in range(50)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions"]  # no staging or aside directory left


def _write_id_parquet(path, rows_per_file: list[int]) -> str:
    """Parquet files of rows ``x = [id, 1]``, ``y = id``: distinct ids over all files, ``rows_per_file`` each."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.mkdir()
    start = 0
    for part, rows in enumerate(rows_per_file):
        ids = np.arange(start, start + rows)
        x = pa.array([[float(i), 1.0] for i in ids], type=pa.list_(pa.float64()))
        pq.write_table(pa.table({"x": x, "y": ids}), path / f"part-{part}.parquet")
        start += rows
    return str(path)


def _ids_in(files) -> set[int]:
    import pyarrow.parquet as pq

    return {int(i) for f in files for i in pq.read_table(f, columns=["y"]).column("y").to_pylist()}


@pytest.mark.integration
def test_under_mwms_each_replica_trains_on_every_row_of_its_nodes_files_once_per_epoch(spark, tmp_path):
    pattern = _write_id_parquet(tmp_path / "data", [200, 130, 120, 90])  # 540 rows: shares of 290 and 250
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    run(
        spark.sparkContext,
        programs.mwms_file_rows_seen,
        {"pattern": pattern, "batch_size": 32, "workers": True},
        num_nodes=2,
        run_dir=str(run_dir),
    )
    records = read_records(str(run_dir), "fileseen")
    owned = {name: _ids_in(record["files"]) for name, record in records.items()}
    longest = max(-(-len(ids) // 32) for ids in owned.values())
    for name, record in records.items():
        rows = len(owned[name])
        full, rest = divmod(rows, 32)
        # one step of the replica is batch_size of its node's rows (not batch_size / workers), the last one
        # what is left; a node whose batches run out first gets empty ones until the other is done
        assert record["sizes"][: full + bool(rest)] == [32] * full + ([rest] if rest else []), name
        assert set(record["sizes"][full + bool(rest) :]) <= {0}, name
        assert sorted(record["seen"]) == sorted(owned[name]), name  # every row of the node's files, once
        assert record["fit_steps"] == [longest, longest], name  # fit's steps cover every row of either node
    chief, worker = owned["chief:0"], owned["worker:0"]
    assert not chief & worker and chief | worker == set(range(540))


@pytest.mark.integration
def test_predict_writes_each_output_of_a_model_to_its_own_column_from_string_and_vector_inputs(spark, tmp_path):
    from pyspark.ml.linalg import Vectors, VectorUDT
    from pyspark.sql import types as T

    export = tmp_path / "model"
    script = "from tests.support.programs import export_two_output_model as e; import sys, types\n"
    script += "e({'export_dir': sys.argv[1]}, types.SimpleNamespace(is_chief=True))"
    done = subprocess.run([sys.executable, "-c", script, str(export)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    schema = T.StructType(
        [T.StructField("id", T.LongType()), T.StructField("sv", VectorUDT()), T.StructField("t", T.StringType())]
    )
    words = ["", "ab", "été", "xyz"]
    rows = [
        (i, Vectors.sparse(4, {i % 4: float(i)}) if i % 2 else Vectors.dense([1.0, 2.0, 0.0, 0.5]), words[i % 4])
        for i in range(50)
    ]
    frame = spark.createDataFrame(rows, schema).coalesce(1)
    scored = predict(frame, str(export), ["sv", "t"], outputs="*", batch_size=16)
    assert scored.columns == ["id", "sv", "t", "score", "shout"]
    assert [f.dataType.simpleString() for f in scored.schema.fields[-2:]] == ["float", "string"]
    for row in scored.collect():
        i = row["id"]
        word = words[i % 4].encode()  # TF counts bytes and upper-cases ASCII letters only
        assert row["score"] == pytest.approx((float(i) if i % 2 else 3.5) + len(word))
        assert row["shout"] == word.upper().decode()
    with pytest.raises(FeedConfigError, match="already has a column 'score': rename the DataFrame's column"):
        predict(frame.withColumnRenamed("id", "score"), str(export), ["sv", "t"], outputs="*")
