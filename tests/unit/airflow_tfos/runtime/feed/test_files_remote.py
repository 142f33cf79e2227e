"""InputMode.TENSORFLOW readers on HDFS (the WebHDFS emulator): listing, sharding and reading remote files."""

from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from airflow_tfos.runtime.feed.files import csv_dataset, list_files, parquet_dataset, shard_files, tfrecord_dataset
from airflow_tfos.shared.feed import Feed
from airflow_tfos.shared.storage import storage_for


def table(start: int, rows: int) -> pa.Table:
    ids = list(range(start, start + rows))
    return pa.table({"a": ids, "b": [float(i) * 2 for i in ids], "y": [i % 3 for i in ids]})


def upload(uri: str, data: bytes) -> None:
    storage_for(uri).write_bytes(uri, data)


def ids_read(dataset) -> list[int]:
    return sorted(int(v) for x, _ in dataset for v in x["a"].numpy())


def test_parquet_and_csv_files_on_hdfs_are_listed_sharded_and_read(emu):
    feed = Feed(features=["a", "b"], label="y", batch_size=7, shuffle=False)
    for i in range(3):
        sink = io.BytesIO()
        pq.write_table(table(i * 50, 50), sink)
        upload(emu.uri(f"/data/pq/part-{i}.parquet"), sink.getvalue())
        sink = io.BytesIO()
        pcsv.write_csv(table(i * 50, 50), sink)
        upload(emu.uri(f"/data/csv/part-{i}.csv"), sink.getvalue())
    upload(emu.uri("/data/pq/_SUCCESS"), b"")
    files = list_files(emu.uri("/data/pq"))
    assert [f.path for f in files] == [emu.uri(f"/data/pq/part-{i}.parquet") for i in range(3)]
    shards = [shard_files(files, 2, i) for i in range(2)]
    assert sorted(ids_read(parquet_dataset(shards[0], feed)) + ids_read(parquet_dataset(shards[1], feed))) == list(
        range(150)
    )
    csv = csv_dataset(list_files(emu.uri("/data/csv/*.csv")), feed)
    assert ids_read(csv) == list(range(150))
    # batches of batch_size rows across the files' own batches; the 150th row ends a smaller last batch
    assert [int(y.shape[0]) for _, y in csv] == [7] * 21 + [3]


def test_tfrecord_files_on_hdfs_are_downloaded_for_tensorflow(emu, tmp_path):
    import tensorflow as tf

    local = tmp_path / "records.tfrecord"
    with tf.io.TFRecordWriter(str(local)) as writer:
        for i in range(5):
            writer.write(f"record-{i}".encode())
    upload(emu.uri("/data/tfr/records.tfrecord"), local.read_bytes())
    files = list_files(emu.uri("/data/tfr"))
    assert [r.numpy() for r in tfrecord_dataset(files)] == [f"record-{i}".encode() for i in range(5)]
