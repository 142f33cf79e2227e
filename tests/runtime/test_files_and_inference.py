"""InputMode.TENSORFLOW file shards and readers, and batch inference with a SavedModel."""

from __future__ import annotations

import pytest

from airflow_tfos.runtime import run
from airflow_tfos.runtime.feed import FeedConfigError
from airflow_tfos.runtime.feed.files import shard_files
from airflow_tfos.runtime.inference import predict, write_predictions
from airflow_tfos.shared.storage import FileInfo, storage_for
from tests.runtime import programs
from tests.runtime.helpers import read_records


class TestShardFiles:
    files = [FileInfo(f"f{i}", size) for i, size in enumerate([100, 90, 50, 40, 30, 10, 5])]

    def test_shards_are_disjoint_complete_and_balanced_by_size(self):
        shards = [shard_files(self.files, 3, i) for i in range(3)]
        names = sorted(f.path for shard in shards for f in shard)
        assert names == sorted(f.path for f in self.files)
        loads = [sum(f.size for f in shard) for shard in shards]
        assert max(loads) - min(loads) <= 45  # greedy by size: 105 / 100 / 120

    def test_same_split_whatever_the_listing_order(self):
        assert shard_files(list(reversed(self.files)), 2, 1) == shard_files(self.files, 2, 1)

    def test_fewer_files_than_nodes_is_a_clear_error(self):
        with pytest.raises(FeedConfigError, match="2 file\\(s\\) for 3 training nodes"):
            shard_files(self.files[:2], 3, 0)


def test_unknown_scheme_names_the_supported_ones():
    with pytest.raises(ValueError, match="no storage for 's3://b/k': supported are file://"):
        storage_for("s3://b/k")


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
