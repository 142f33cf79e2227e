"""Reading a node's Parquet slices with pyarrow: local files as they are, HDFS through ranged WebHDFS reads.

What :mod:`.direct` plans (the slices) is read here, by the barrier task (:func:`read_slices`, to probe or
spill) and by a node's TF process every epoch (:func:`stream_slices`). Nothing here touches Spark.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed


@dataclass(frozen=True)
class Slice:
    """Rows ``start`` to ``stop`` (exclusive) of row group ``row_group`` of the Parquet file ``path``."""

    path: str
    row_group: int
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


def storage_path(uri: str, webhdfs_config: str | None = None) -> tuple[object, str]:
    """The storage that reads ``uri`` (as Spark names an input file) and the path to give it; HDFS with
    ``webhdfs_config`` where this process has no WebHDFS settings of its own (an executor)."""
    if uri.startswith("file:"):
        from airflow_tfos.shared.storage.base import LocalStorage

        return LocalStorage(), unquote(uri[len("file:") :].removeprefix("//"))
    from airflow_tfos.runtime.program.saved_models import storage_of

    return storage_of(uri, webhdfs_config), uri


def open_parquet(uri: str, webhdfs_config: str | None = None, buffer_size: int = 0):
    """A pyarrow ``ParquetFile`` over ``uri``: a local file as is, a remote one through ranged reads. By default
    pyarrow reads the fed columns' chunks of a row group whole before decoding them (``pre_buffer``); with
    ``buffer_size``, it reads each chunk that many bytes (or one page) at a time as it decodes."""
    import pyarrow.parquet as pq

    from airflow_tfos.shared.storage.ranged import RangedFile

    storage, path = storage_path(uri, webhdfs_config)
    local = storage.local_path(path)
    if local is not None:
        return pq.ParquetFile(local, buffer_size=buffer_size, pre_buffer=not buffer_size)
    infos = storage.list(path)
    if not infos:
        raise FileNotFoundError(f"no file {uri}")
    return pq.ParquetFile(RangedFile(storage, path, infos[0].size), buffer_size=buffer_size, pre_buffer=not buffer_size)


#: About how many bytes of rows :func:`read_slices` decodes at a time. It opens files with pyarrow's default
#: ``pre_buffer``, which holds a row group's fed column chunks while they are decoded (up to 128 MiB when Spark
#: wrote them); :func:`stream_slices` reads them in ``STREAM_BUFFER_BYTES`` pieces instead.
BATCH_BYTES = 16 * 2**20


def read_slices(slices: Iterable[Slice], columns: Sequence[str], webhdfs_config: str | None = None) -> Iterator:
    """Arrow record batches of ``columns`` of the slices' rows, in order, about ``BATCH_BYTES`` decoded at a time."""
    current, handle = None, None
    for part in slices:
        if part.path != current:
            current, handle = part.path, open_parquet(part.path, webhdfs_config)
        yield from slice_batches(handle, part, columns)


def slice_batches(handle, part: Slice, columns: Sequence[str], batch_bytes: int = BATCH_BYTES) -> Iterator:
    """Arrow record batches of ``columns`` of one slice's rows, from its file's open ``ParquetFile``."""
    group = handle.metadata.row_group(part.row_group)
    rows = max(1024, int(batch_bytes * group.num_rows / max(group.total_byte_size, 1)))
    seen = 0
    try:
        for batch in handle.iter_batches(batch_size=rows, row_groups=[part.row_group], columns=list(columns)):
            low, high = max(part.start - seen, 0), min(part.stop - seen, batch.num_rows)
            seen += batch.num_rows
            if high > low:
                yield batch.slice(low, high - low)
            if seen >= part.stop:
                break
    except Exception as exc:  # a damaged file, or a column of another type in this file
        raise FeedConfigError(f"cannot read row group {part.row_group} of {part.path}: {exc}") from exc


#: Row groups a shuffled pass reads at once, their record batches taken in turn: rows of different row groups
#: (often written from different Spark partitions) meet in a shuffle window.
INTERLEAVE = 2
#: Decoded bytes per record batch of a pass: a shuffle window of 10,000 rows of 784 floats takes batches from
#: both interleaved row groups.
STREAM_BATCH_BYTES = 4 * 2**20
#: A pass reads each column chunk this many bytes (or one page, if larger) at a time (pyarrow's buffered stream),
#: not whole: memory stays about the same whatever the files' row-group size (Spark writes up to 128 MiB), and
#: on HDFS each read is one ranged request of this size. Measured on 784-float rows, it also decodes faster
#: than reading whole chunks first.
STREAM_BUFFER_BYTES = 4 * 2**20

_input_error: FeedConfigError | None = None


def input_error() -> FeedConfigError | None:
    """The first bad input this process's reads of Parquet slices met (a TF process streaming its share): the
    node reports it as the cause of its failure, whatever TensorFlow made of the exception on its way."""
    return _input_error


def stream_slices(
    slices: Sequence[Slice],
    feed: Feed,
    widths: dict[str, int],
    what: str,
    rng=None,
    webhdfs_config: str | None = None,
) -> Iterator:
    """One pass over ``slices``: record batches of the fed columns, checked and converted as the spill does
    (:func:`~airflow_tfos.runtime.feed.columns.normalize_column`; ``widths`` from the node's first rows, which
    every row must match). With ``rng``, slices are visited in a new order and ``INTERLEAVE`` of them are read
    in turn; without, in order, one after the other."""
    import pyarrow as pa

    from airflow_tfos.runtime.feed.columns import normalize_column

    global _input_error
    order = rng.permutation(len(slices)).tolist() if rng is not None else range(len(slices))
    pending = iter(order)
    handles: dict[str, object] = {}

    def batches(index: int) -> Iterator:
        part = slices[index]
        if part.path not in handles:
            handles[part.path] = open_parquet(part.path, webhdfs_config, buffer_size=STREAM_BUFFER_BYTES)
        return slice_batches(handles[part.path], part, feed.columns, STREAM_BATCH_BYTES)

    active = deque(batches(i) for i in itertools.islice(pending, INTERLEAVE if rng is not None else 1))
    try:
        while active:
            reader = active.popleft()
            batch = next(reader, None)
            if batch is None:
                following = next(pending, None)
                if following is not None:
                    active.append(batches(following))
                continue
            active.append(reader)
            arrays = [normalize_column(name, batch.column(name), widths, what, feed) for name in feed.columns]
            yield pa.RecordBatch.from_arrays(arrays, list(feed.columns))
    except FeedConfigError as exc:
        _input_error = _input_error or exc
        raise
