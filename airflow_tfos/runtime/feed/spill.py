"""A node's share of the data on local disk, in Arrow IPC file form.

The Spark task writes the Arrow record batches of its partition to a local file as they arrive
(:class:`SpillWriter`), checking them on the way, so that the partition is read from Spark once,
however many epochs follow, and never held in memory whole. The node's TF process replays the file
(:func:`read_batches`) one record batch at a time, in any order: the file form keeps an index of its
record batches, so each epoch can visit them in a new order.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_tfos.runtime.feed.columns import normalize_column
from airflow_tfos.shared.feed import Feed


def order_key(batch: pa.RecordBatch, label: str | None) -> bytes:
    """What a batch adds to a spill's order digest: its size and its label values (a flat label column), else
    its first and last rows; cheap beside the spill, and different when rows come in another order."""
    head = batch.num_rows.to_bytes(8, "little")
    column = batch.column(label) if label and label in batch.schema.names else None
    if column is not None and pa.types.is_primitive(column.type) and column.null_count == 0:
        return head + column.to_numpy(zero_copy_only=False).tobytes()
    edges = batch.slice(0, 1).to_pylist() + batch.slice(batch.num_rows - 1, 1).to_pylist()
    return head + repr(edges).encode()


@dataclass
class SpillStats:
    """What was written: rows, record batches, bytes, each array or vector column's element count, and the
    vector columns that hold sparse rows."""

    rows: int = 0
    batches: int = 0
    bytes: int = 0
    widths: dict[str, int] = field(default_factory=dict)
    sparse: set[str] = field(default_factory=set)
    #: a digest of the rows' order (each batch's size and label values, or its first and last rows): two spills
    #: with the same digest replay their epochs alike (:func:`airflow_tfos.runtime.program.checkpoint.fit_resumable`)
    order: str = ""


class SpillWriter:
    """Write record batches to ``path``, checking the fed columns and converting them by the feed's rules
    (:func:`~airflow_tfos.runtime.feed.columns.normalize_column`).

    The checks run in the caller's thread, so a bad batch fails :meth:`write` itself; the disk writes
    run in a thread of their own, so that reading the next batch from Spark goes on meanwhile. At most
    ``QUEUED`` batches wait for the disk: memory stays bounded however large the partition.

    Floating-point features are stored as the feed's ``cast_floats`` (float32 by default), the type the node
    feeds them as: casting once here, rather than on every epoch's read, halves what float64 columns (Spark's
    ``double``) write to disk and read back.

    Batches are stored cut into record batches of about ``BATCH_BYTES`` (Spark sends 10,000 rows at a
    time, 30 MiB of 784-float rows): the units in which epochs are replayed and their order shuffled.

    :param path: the local file.
    :param columns: the columns to keep (features and label), in order.
    :param what: how the data is named in errors (``training data``, ``validation data``).
    :param feed: the feed whose ``fill``, ``pad`` and ``ragged`` apply.
    """

    QUEUED = 2
    BATCH_BYTES = 4 * 2**20

    def __init__(self, path: str, columns: Sequence[str], what: str = "training data", feed: Feed | None = None):
        self.path = path
        self.columns = list(columns)
        self.what = what
        self.feed = feed
        self.stats = SpillStats()
        self._order = hashlib.blake2b(digest_size=16)
        cast = feed.cast_floats if feed is not None else None
        self._narrow = pa.from_numpy_dtype(np.dtype(cast)) if cast else None
        self._queue: queue.Queue[pa.RecordBatch | None] = queue.Queue(maxsize=self.QUEUED)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._write_all, name=f"spill {os.path.basename(path)}", daemon=True)
        self._thread.start()

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        stats = self.stats
        arrays = [
            normalize_column(name, batch.column(name), stats.widths, self.what, self.feed, stats.sparse)
            for name in self.columns
        ]
        batch = pa.RecordBatch.from_arrays(arrays, self.columns)
        self._raise_if_failed()
        self._queue.put(batch)
        self.stats.rows += batch.num_rows
        self._order.update(order_key(batch, self.feed.label if self.feed is not None else None))

    def close(self) -> SpillStats:
        """Wait for the queued batches to reach the disk and close the file."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self._raise_if_failed()
        self.stats.order = self._order.hexdigest()
        return self.stats

    def abort(self) -> None:
        """Close, leaving no thread or open file behind, and ignore what went wrong (another error is
        already on its way)."""
        with contextlib.suppress(OSError):
            self.close()

    def _narrowed(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """The batch with its floating-point features as the feed's ``cast_floats``."""
        arrays = [
            narrow_floats(batch.column(i), self._narrow) if name in self.feed.features else batch.column(i)
            for i, name in enumerate(self.columns)
        ]
        return pa.RecordBatch.from_arrays(arrays, self.columns)

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise OSError(f"cannot write the {self.what} to local disk at {self.path}: {self._error}") from self._error

    def _write_all(self) -> None:
        sink = writer = None
        while (batch := self._queue.get()) is not None:
            if self._error is not None:
                continue  # keep draining, so that write() and close() never block
            try:
                if self._narrow is not None:  # here, beside the reads from Spark: Arrow's cast frees the GIL
                    batch = self._narrowed(batch)
                self.stats.bytes += batch.nbytes  # as stored (read once close() joined this thread)
                if writer is None:
                    sink = pa.OSFile(self.path, "wb")
                    writer = pa.ipc.new_file(sink, batch.schema)
                rows = max(1, int(self.BATCH_BYTES * batch.num_rows / max(batch.nbytes, 1)))
                for offset in range(0, batch.num_rows, rows):
                    writer.write_batch(batch.slice(offset, rows))
                    self.stats.batches += 1
            except Exception as exc:  # reported to the caller by its next write() or close()
                self._error = exc
        try:
            if writer is not None and self._error is None:
                writer.close()
        except Exception as exc:
            self._error = self._error or exc
        try:
            if sink is None:
                sink = pa.OSFile(self.path, "wb")  # no rows: an empty file
            sink.close()
        except Exception as exc:
            self._error = self._error or exc


def narrow_floats(column: pa.Array, kind: pa.DataType) -> pa.Array:
    """``column`` with its floating-point numbers (plain, or the elements of an array column) as ``kind`` when
    that is narrower, rounded as NumPy's ``astype`` rounds them; other columns (vectors among them) as they
    are (a wider ``kind`` is left to the reader: the spill would only grow)."""

    def narrows(value: pa.DataType) -> bool:
        return pa.types.is_floating(value) and value.bit_width > kind.bit_width  # kind: Feed checked it is a float

    value = column.type.value_type if pa.types.is_list(column.type) or pa.types.is_large_list(column.type) else None
    if value is None and narrows(column.type):
        return pc.cast(column, kind)
    if value is not None and narrows(value):
        target = pa.large_list(kind) if pa.types.is_large_list(column.type) else pa.list_(kind)
        return pc.cast(column, target)
    return column


def count_batches(path: str) -> int:
    """How many record batches a spill file holds (read from its footer)."""
    with pa.OSFile(path, "rb") as source:
        return pa.ipc.open_file(source).num_record_batches if source.size() else 0


def spill_schema(path: str) -> pa.Schema:
    """The Arrow schema of a spill file."""
    with pa.OSFile(path, "rb") as source:
        return pa.ipc.open_file(source).schema


def read_batches(path: str, order: Sequence[int] | None = None) -> Iterator[pa.RecordBatch]:
    """Replay a spill file one record batch at a time, in file order or in ``order`` (batch indexes).

    Plain reads rather than a memory map: mapped pages would count in the TF process's resident memory
    and grow with the data; read this way, memory holds one record batch at a time.
    """
    with pa.OSFile(path, "rb") as source:
        if source.size() == 0:
            return
        reader = pa.ipc.open_file(source)
        for index in range(reader.num_record_batches) if order is None else order:
            yield reader.get_batch(index)


# Rows of an RDD (TFoS programs) are Python objects; they are spilled in pickled chunks, not per row.
ROWS_PER_CHUNK = 1024


def spill_rows(rows: Iterable, path: str) -> int:
    """Write Python rows to ``path`` in pickled chunks; return how many rows were written."""
    count = 0
    chunk: list = []
    with open(path, "wb") as f:
        for row in rows:
            chunk.append(row)
            if len(chunk) == ROWS_PER_CHUNK:
                pickle.dump(chunk, f, protocol=pickle.HIGHEST_PROTOCOL)
                count += len(chunk)
                chunk = []
        if chunk:
            pickle.dump(chunk, f, protocol=pickle.HIGHEST_PROTOCOL)
            count += len(chunk)
    return count


def read_row_chunks(path: str) -> Iterator[list]:
    """Replay the chunks written by :func:`spill_rows`."""
    with open(path, "rb") as f:
        while True:
            try:
                yield pickle.load(f)
            except EOFError:
                return
