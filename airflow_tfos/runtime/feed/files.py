"""InputMode.TENSORFLOW: each node reads its own share of the files, and helpers turn them into tf.data.

:func:`shard_files` is pure: a deterministic, size-balanced split of a file list. The readers take the
files this node got (``ctx.shard_files(...)``) and return ``tf.data.Dataset`` pipelines; files are
reached through :mod:`airflow_tfos.storage`, so every scheme registered there works.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from airflow_tfos.runtime.feed.plan import Feed, FeedConfigError
from airflow_tfos.storage import FileInfo, storage_for


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
    local = [storage_for(p).local_path(p) for p in paths]
    if any(p is None for p in local):
        raise FeedConfigError("TFRecord files must be on a local or TF-readable file system")
    return tf.data.TFRecordDataset(local, compression_type=compression_type)


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
    import tensorflow as tf

    from airflow_tfos.runtime.feed.dataset import rebatch, signature_of

    def generate():
        yield from rebatch(_arrow_batches(files, fmt, feed.columns), feed)

    first = next(generate(), None)
    if first is None:
        raise FeedConfigError(f"the {fmt} files given to this node hold no rows")
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature_of(first))
    return dataset.prefetch(tf.data.AUTOTUNE)


def parquet_dataset(files: Sequence[str | FileInfo], feed: Feed):
    """Batches of ``(features, label)`` from Parquet files, read with Arrow a row group at a time."""
    return _file_dataset(files, "parquet", feed)


def csv_dataset(files: Sequence[str | FileInfo], feed: Feed):
    """Batches of ``(features, label)`` from CSV files with a header row, streamed with Arrow."""
    return _file_dataset(files, "csv", feed)
