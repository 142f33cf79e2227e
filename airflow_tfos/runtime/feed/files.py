"""InputMode.TENSORFLOW: each node reads its own share of the files, and helpers turn them into tf.data.

:func:`shard_files` is pure: a deterministic, size-balanced split of a file list. The readers take the
files this node got (``ctx.shard_files(...)``) and return ``tf.data.Dataset`` pipelines; files are
reached through :mod:`airflow_tfos.shared.storage`, so every scheme registered there works.

Remote files (``hdfs://``, ``webhdfs://``) are not streamed from the network into TensorFlow: Parquet
and CSV files are downloaded one at a time, as the reader reaches them, to a local temporary file
(seekable, which Parquet needs; removed once read). TFRecord files, which TensorFlow's reader opens
by name, are all downloaded when :func:`tfrecord_dataset` is called, into a cache directory of this
process that is removed when it exits. Local disk must hold them (TFRecord) or the largest (others).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence

from airflow_tfos.runtime.feed.plan import Feed, FeedConfigError
from airflow_tfos.shared.storage import FileInfo, storage_for


def shard_files(files: Sequence[FileInfo], num_shards: int, index: int) -> list[FileInfo]:
    """Return shard ``index`` of ``num_shards``: files dealt largest first to the lightest shard.

    The same list always gives the same shards, on every node, whatever order it was listed in.
    """
    if num_shards < 1 or not 0 <= index < num_shards:
        raise ValueError(f"shard index {index} out of range for {num_shards} shards")
    if len(files) < num_shards:
        raise FeedConfigError(
            f"{len(files)} file(s) for {num_shards} training nodes: every node needs at least one file; split "
            "the data into at least as many files as nodes (e.g. df.repartition(n).write), or use fewer nodes"
        )
    loads = [0] * num_shards
    shards: list[list[FileInfo]] = [[] for _ in range(num_shards)]
    for info in sorted(files, key=lambda f: (-f.size, f.path)):
        target = min(range(num_shards), key=lambda s: (loads[s], s))
        shards[target].append(info)
        loads[target] += info.size
    return sorted(shards[index], key=lambda f: f.path)


def list_files(paths: str | Iterable[str]) -> list[FileInfo]:
    """Expand a path, directory, glob, or a list of them into files with sizes."""
    patterns = [paths] if isinstance(paths, str) else list(paths)
    found: dict[str, FileInfo] = {}
    for pattern in patterns:
        matches = storage_for(pattern).list(pattern)
        if not matches:
            raise FeedConfigError(f"no files match {pattern!r}: check the path (and that the data was written)")
        found.update((f.path, f) for f in matches)
    return list(found.values())


def tfrecord_dataset(files: Sequence[str | FileInfo], compression_type: str | None = None):
    """A ``tf.data.TFRecordDataset`` over ``files`` (records as serialized bytes, to be parsed)."""
    import tensorflow as tf

    paths = [f.path if isinstance(f, FileInfo) else f for f in files]
    return tf.data.TFRecordDataset([local_copy(p) for p in paths], compression_type=compression_type)


_CACHE: list[str] = []


def local_copy(path: str) -> str:
    """A local path holding the file at ``path``: itself when local, else a download cached in this process."""
    storage = storage_for(path)
    local = storage.local_path(path)
    if local is not None:
        return local
    if not _CACHE:
        _CACHE.append(tempfile.mkdtemp(prefix="airflow-tfos-files-"))
        atexit.register(shutil.rmtree, _CACHE[0], True)
    digest = hashlib.sha256(path.encode()).hexdigest()[:16]
    target = os.path.join(_CACHE[0], f"{digest}-{os.path.basename(path.rstrip('/'))}")
    if not os.path.exists(target):
        with storage.open(path, "rb") as source, open(f"{target}.part", "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
        os.replace(f"{target}.part", target)
    return target


def _arrow_batches(files: Sequence[str | FileInfo], fmt: str, columns: Sequence[str]) -> Iterator:
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    for f in files:
        path = f.path if isinstance(f, FileInfo) else f
        with storage_for(path).open(path, "rb") as stream:
            if fmt == "parquet":
                yield from pq.ParquetFile(stream).iter_batches(columns=list(columns))
            else:
                reader = pcsv.open_csv(stream, convert_options=pcsv.ConvertOptions(include_columns=list(columns)))
                yield from reader


def _file_dataset(files: Sequence[str | FileInfo], fmt: str, feed: Feed):
    """Batches of ``feed.batch_size`` rows (the last may be smaller): Python hands over the files' record
    batches whole and tf.data's ``rebatch`` cuts them, by slicing, in C++."""
    import tensorflow as tf

    from airflow_tfos.runtime.feed.dataset import checked_batches, signature_of

    def generate():
        yield from checked_batches(_arrow_batches(files, fmt, feed.columns), feed)

    first = next(generate(), None)  # empty record batches are skipped
    if first is None:
        raise FeedConfigError(f"the {fmt} files given to this node hold no rows")
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature_of(first))
    return dataset.rebatch(feed.batch_size, drop_remainder=False).prefetch(tf.data.AUTOTUNE)


def parquet_dataset(files: Sequence[str | FileInfo], feed: Feed):
    """Batches of ``(features, label)`` from Parquet files, read with Arrow a row group at a time."""
    return _file_dataset(files, "parquet", feed)


def csv_dataset(files: Sequence[str | FileInfo], feed: Feed):
    """Batches of ``(features, label)`` from CSV files with a header row, streamed with Arrow."""
    return _file_dataset(files, "csv", feed)
