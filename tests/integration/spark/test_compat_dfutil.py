"""TFoS's dfutil on a real local Spark cluster: DataFrames to TFRecord files and back, locally and on HDFS."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_tfos.runtime.compat import dfutil
from airflow_tfos.shared.storage import storage_for
from airflow_tfos.testing.webhdfs import WebHDFSEmulator

pytestmark = pytest.mark.integration

SCHEMA = (
    "id bigint, small int, flag boolean, x float, y double, name string, raw binary, xs array<double>, ns array<int>"
)


def frame(spark, rows: int = 12, partitions: int = 2):
    data = [
        (i, i % 5, i % 2 == 0, i / 3, i * 1.5, f"row-{i}", bytes([i, 255 - i]), [i / 7, -i / 7], [i, i + 1, i + 2])
        for i in range(rows)
    ]
    return spark.createDataFrame(data, SCHEMA).repartition(partitions), data


def expected_rows(data) -> list[tuple]:
    """What reading back gives, computed independently: sorted columns, float32 floats, ints as longs."""
    f32 = lambda v: float(np.float32(v))  # noqa: E731
    return sorted(
        (int(flag), i, name, [i, i + 1, i + 2], bytearray(raw), small, f32(x), [f32(v) for v in xs], y)
        for i, small, flag, x, y, name, raw, xs, _ in data
    )


def read_back(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.select("flag", "id", "name", "ns", "raw", "small", "x", "xs", "y").collect())


def test_dataframe_saved_as_tfrecords_loads_back_with_inferred_schema(spark, tmp_path):
    df, data = frame(spark)
    out = str(tmp_path / "tfr")
    dfutil.saveAsTFRecords(df, out)
    assert sorted(p.name for p in (tmp_path / "tfr").iterdir()) == ["_SUCCESS", "part-r-00000", "part-r-00001"]

    loaded = dfutil.loadTFRecords(spark.sparkContext, out, binary_features=["raw"])
    assert loaded.schema.simpleString() == (
        "struct<flag:bigint,id:bigint,name:string,ns:array<bigint>,raw:binary,small:bigint,x:double,"
        "xs:array<double>,y:double>"
    )
    assert read_back(loaded) == expected_rows(data)
    assert dfutil.isLoadedDF(loaded) and not dfutil.isLoadedDF(df)

    # The files are plain TFRecords of tf.train.Example: TensorFlow reads them itself.
    import tensorflow as tf

    ids = sorted(
        int(tf.train.Example.FromString(r.numpy()).features.feature["id"].int64_list.value[0])
        for r in tf.data.TFRecordDataset(sorted(str(p) for p in (tmp_path / "tfr").glob("part-*")))
    )
    assert ids == list(range(12))

    with pytest.raises(FileExistsError, match="already exists: delete it or write to a new directory"):
        dfutil.saveAsTFRecords(df, out)


def test_tfrecords_on_hdfs_round_trip(spark):
    df, data = frame(spark, rows=8, partitions=2)
    with WebHDFSEmulator() as emu:
        out = emu.uri("/user/tester/tfr")
        dfutil.saveAsTFRecords(df, out)
        assert storage_for(out).listdir(out) == ["_SUCCESS", "part-r-00000", "part-r-00001"]
        loaded = dfutil.loadTFRecords(spark.sparkContext, out, ["raw"])
        assert read_back(loaded) == expected_rows(data)


def test_dfutil_errors_name_the_cause(spark, tmp_path):
    with pytest.raises(TypeError, match=r"cannot write when \(timestamp\)"):
        dfutil.saveAsTFRecords(spark.sql("select current_timestamp() as when, 1 as ok"), str(tmp_path / "t"))
    assert not (tmp_path / "t").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(Exception, match="no files match"):
        dfutil.loadTFRecords(spark.sparkContext, str(tmp_path / "empty"))
