"""Shares read by TensorFlow's own ops: the feed under ParameterServerStrategy.

Under parameter servers the chief only coordinates: ``ClusterCoordinator.create_per_worker_dataset``
traces the chief's ``dataset_fn`` once and runs the graph on every worker. A dataset built in Python
(``from_generator``) would run its generator in the chief's process, so every batch would come from the
chief whatever the number of workers. Here each worker's Spark task rewrites its spilled share as
fixed-width records (one row per record, its columns' bytes side by side, little-endian) in the node's
own directory, which is the working directory of that worker's TF process. The dataset function opens
the file by a *relative* name with ``tf.data.FixedLengthRecordDataset``, so on each worker it resolves
to that worker's own share, read on its own host by TF's C++ readers; no Python process takes part.

Fixed-width records rather than TFRecord: rows of numbers have a fixed size once their array widths
are known (the feed checks that they are), so a record needs no framing, no checksum and no parsing
(``tf.io.decode_raw`` on a slice of a batch of records). The chief hands steps to whichever worker is
free, so the shares are served through the tf.data service (:mod:`~airflow_tfos.runtime.feed.service`):
each worker's tf.data worker reads its own share, and every batch goes to one worker, once per pass.

Columns of varying size (strings and binary, ragged arrays, sparse vectors) make records of varying size.
Then each record is a line of web-safe base64 (read by ``tf.data.TextLineDataset``, decoded by
``tf.io.decode_base64``, both in C++ on the worker), holding the fixed-width columns as above, then one
int32 byte count per varying part, then the parts: a string's bytes, a ragged row's elements, a sparse
row's indices (int64) then values. A batch's parts are cut with ``tf.strings.substr`` at per-row offsets
and become ``tf.string``, ``tf.RaggedTensor`` and ``tf.SparseTensor`` values, as the Python feed makes them.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from airflow_tfos.runtime.feed.columns import Rows
from airflow_tfos.runtime.feed.service import DataService
from airflow_tfos.shared.feed import Feed

#: Name of each split's record file, relative to the worker's working directory.
RECORD_FILES = {"train": "airflow-tfos-train.rec", "validation": "airflow-tfos-validation.rec"}
#: Holds a worker's task index, in the working directory of every worker of a parameter-server cluster:
#: a graph the chief traces reads it there to find which worker runs it (InputMode.TENSORFLOW files).
WORKER_INDEX_FILE = "airflow-tfos-worker-index"


#: How a column sits in a record: ``fixed`` width, ``bytes`` (strings, binary), ``ragged`` (arrays of
#: varying length), ``sparse`` (Spark ML vectors with sparse rows: indices, then values).
RECORD_KINDS = ("fixed", "bytes", "ragged", "sparse")


@dataclass(frozen=True)
class RecordColumn:
    """One fed column in a record: its NumPy type (little-endian; of the elements for ``ragged`` and
    ``sparse``), element count (0: a scalar; ``sparse``: the vector's size) and kind (:data:`RECORD_KINDS`)."""

    name: str
    dtype: str
    width: int = 0
    kind: str = "fixed"

    @property
    def nbytes(self) -> int:
        """Bytes in the record's fixed part (a varying column has none there)."""
        return np.dtype(self.dtype).itemsize * max(self.width, 1) if self.kind == "fixed" else 0

    @property
    def parts(self) -> int:
        """Varying parts it adds to a record (a sparse row: its indices, then its values)."""
        return {"fixed": 0, "bytes": 1, "ragged": 1, "sparse": 2}[self.kind]


def consumer_options():
    """Options of a per-worker dataset: no auto-sharding (each worker's pipeline is its own already)."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def record_columns(
    feed: Feed, dtypes: dict[str, str], widths: dict[str, int], sparse=frozenset()
) -> tuple[RecordColumn, ...]:
    """The record layout of the fed columns: spilled types, floating-point features cast as the feed says;
    strings, ragged arrays and sparse vectors as varying parts."""
    columns = []
    for name in feed.columns:
        kind = np.dtype(dtypes[name])
        layout = (
            "bytes"
            if kind.kind == "O"
            else "ragged"
            if name in feed.ragged
            else "sparse"
            if name in sparse
            else "fixed"
        )
        if feed.cast_floats and kind.kind == "f" and name in feed.features:
            kind = np.dtype(feed.cast_floats)
        width = int(widths.get(name, 0)) if layout in ("fixed", "sparse") else 0
        dtype = "|O" if layout == "bytes" else kind.newbyteorder("<").str
        columns.append(RecordColumn(name, dtype, width, layout))
    return tuple(columns)


@dataclass(frozen=True)
class NativeShares:
    """The workers' shares of one split as record files, as every node of a parameter-server cluster
    sees them (the chief included, which holds none).

    :param split: ``train`` or ``validation``.
    :param columns: the record layout.
    :param rows_per_epoch: rows each worker feeds per epoch (balanced: ``steps_per_worker * batch_size``).
    :param steps_per_worker: batches each worker's dataset yields per epoch.
    :param num_workers: workers holding a share.
    :param feed: the feed settings.
    """

    split: str
    columns: tuple[RecordColumn, ...]
    rows_per_epoch: int
    steps_per_worker: int
    num_workers: int
    feed: Feed

    @property
    def file_name(self) -> str:
        return RECORD_FILES[self.split]

    @property
    def record_bytes(self) -> int:
        """Bytes of a record's fixed part (all of it, unless :attr:`varying`)."""
        return sum(c.nbytes for c in self.columns)

    @property
    def varying(self) -> bool:
        """Whether records vary in size (then they are base64 lines)."""
        return any(c.kind != "fixed" for c in self.columns)

    @property
    def steps_per_epoch(self) -> int:
        """Batches of one epoch over every worker: the steps the chief schedules."""
        return self.steps_per_worker * self.num_workers

    def dataset_fn(self, repeat: bool = True, service: DataService | None = None):
        """A function for ``create_per_worker_dataset`` or Keras ``DatasetCreator``: batches of the workers'
        shares, ``steps_per_epoch`` per pass over all of them; with ``repeat`` pass after pass without end (as
        TF advises under parameter servers), else one pass per iterator.

        With ``service`` (the default under parameter servers, :mod:`~airflow_tfos.runtime.feed.service`)
        each pass serves every worker's share through the tf.data service: each batch to whichever worker
        asks first, every batch once per pass. Without it, each worker yields its own share,
        ``steps_per_worker`` batches per pass."""
        if service is not None:
            consumer = service.passes(self.one_pass, self.split, repeat)
            return lambda input_context=None: consumer()
        shares = self

        def dataset_fn(input_context=None):
            return shares.build(repeat)

        return dataset_fn

    def build(self, repeat: bool = True):
        """Build a worker's pipeline over its own share (called on the chief, run on each worker)."""
        import tensorflow as tf

        dataset = self.one_pass()
        if repeat:
            dataset = dataset.repeat()
        else:
            dataset = dataset.apply(tf.data.experimental.assert_cardinality(self.steps_per_worker))
        return dataset  # one_pass set the options: no auto-sharding

    def one_pass(self):
        """One pass over the share in this process's working directory: ``steps_per_worker`` batches."""
        import tensorflow as tf

        feed = self.feed
        if self.varying:
            records = tf.data.TextLineDataset(self.file_name, buffer_size=1 << 20)
        else:
            records = tf.data.FixedLengthRecordDataset(self.file_name, self.record_bytes, buffer_size=1 << 20)
        if feed.shuffle:
            records = records.shuffle(feed.shuffle_window, seed=feed.seed, reshuffle_each_iteration=True)
        # A worker short of rows repeats its own (balance "pad"); one with more stops early ("drop").
        epoch = records.repeat().take(self.rows_per_epoch).batch(feed.batch_size, drop_remainder=True)
        epoch = epoch.map(self.decode, num_parallel_calls=tf.data.AUTOTUNE)
        return epoch.with_options(consumer_options()).prefetch(tf.data.AUTOTUNE)

    def decode(self, records):
        """Turn a batch of records into ``(features, label)`` tensors shaped as ``ctx.dataset()``'s."""
        import tensorflow as tf

        if self.varying:
            records = tf.io.decode_base64(records)
        values = {}
        offset = 0
        for column in self.columns:
            if column.kind != "fixed":
                continue
            raw = tf.strings.substr(records, offset, column.nbytes)
            decoded = tf.io.decode_raw(raw, tf.as_dtype(np.dtype(column.dtype)), little_endian=True)
            shape = [self.feed.batch_size, column.width] if column.width else [self.feed.batch_size]
            values[column.name] = tf.reshape(decoded, shape)  # whole batches only: the shape is static
            offset += column.nbytes
        if self.varying:
            values.update(self._decode_parts(records, offset))
        return self.feed.arrange(values)

    def _decode_parts(self, records, offset: int) -> dict:
        """The varying columns of a batch of records whose fixed part ends at ``offset``."""
        import tensorflow as tf

        count = sum(c.parts for c in self.columns)
        lengths = tf.reshape(
            tf.io.decode_raw(tf.strings.substr(records, offset, 4 * count), tf.int32, little_endian=True),
            [self.feed.batch_size, count],
        )
        starts = offset + 4 * count + tf.math.cumsum(lengths, axis=1, exclusive=True)
        rows = self.feed.batch_size
        values, part = {}, 0

        def flat(index: int, dtype):
            cut = tf.strings.substr(records, starts[:, index], lengths[:, index])
            decoded = tf.io.decode_raw(tf.strings.reduce_join(cut), dtype, little_endian=True)
            counts = tf.cast(lengths[:, index] // dtype.size, tf.int64)
            return tf.reshape(decoded, [-1]), counts

        for column in self.columns:
            if column.kind == "bytes":
                values[column.name] = tf.strings.substr(records, starts[:, part], lengths[:, part])
            elif column.kind == "ragged":
                elements, counts = flat(part, tf.as_dtype(np.dtype(column.dtype)))
                values[column.name] = tf.RaggedTensor.from_row_lengths(elements, counts, validate=False)
            elif column.kind == "sparse":
                indices, counts = flat(part, tf.int64)
                elements, _ = flat(part + 1, tf.as_dtype(np.dtype(column.dtype)))
                row_ids = tf.repeat(tf.range(rows, dtype=tf.int64), counts)
                values[column.name] = tf.SparseTensor(
                    tf.stack([row_ids, indices], axis=1), elements, [rows, column.width]
                )
            part += column.parts
        return values


def write_records(batches, columns: Sequence[RecordColumn], path: str) -> tuple[int, int]:
    """Write Arrow record batches as records to ``path`` (fixed-width, or base64 lines when a column varies);
    return (rows, bytes) written."""
    from airflow_tfos.runtime.feed.columns import to_numpy

    fixed = [c for c in columns if c.kind == "fixed"]
    count = sum(c.parts for c in columns)
    layout = np.dtype(
        [(c.name, c.dtype, (c.width,)) if c.width else (c.name, c.dtype) for c in fixed]
        + ([("__lengths", "<i4", (count,))] if count else [])
    )
    widths = {c.name: c.width for c in columns if c.width}
    sparse = frozenset(c.name for c in columns if c.kind == "sparse")
    rows = size = 0
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as out:
        for batch in batches:
            arrays = to_numpy(batch, [c.name for c in columns], widths, sparse)
            block = np.empty(batch.num_rows, dtype=layout)
            for column in fixed:
                block[column.name] = arrays[column.name]
            data = _varying_records(block, arrays, columns) if count and batch.num_rows else block.tobytes()
            out.write(data)
            rows += batch.num_rows
            size += len(data)
    os.replace(tmp, path)
    return rows, size


def _row_parts(value, dtype: str) -> list[bytes]:
    """Each row's bytes of one varying column: strings as they are; a ragged row's elements; a sparse row's
    indices (int64) or values, in ``dtype``."""
    if isinstance(value, np.ndarray):  # strings and binary (objects)
        return [v if isinstance(v, bytes) else str(v).encode() for v in value]
    flat = np.ascontiguousarray(value.values, dtype=np.dtype(dtype)).tobytes()
    size = np.dtype(dtype).itemsize
    return [flat[a * size : b * size] for a, b in zip(value.splits[:-1], value.splits[1:], strict=True)]


def _varying_records(block: np.ndarray, arrays: dict, columns: Sequence[RecordColumn]) -> bytes:
    """The batch's records as base64 lines: fixed part, part byte counts, then the parts."""
    parts: list[list[bytes]] = []
    for column in columns:
        value = arrays[column.name]
        if column.kind == "sparse":
            parts.append(_row_parts(Rows(value.indices, value.splits), "<i8"))
        if column.kind != "fixed":
            parts.append(_row_parts(value, column.dtype))
    block["__lengths"] = np.array([[len(p) for p in row] for row in zip(*parts, strict=True)], dtype="<i4")
    fixed = block.tobytes()
    step = block.dtype.itemsize
    lines = [
        base64.urlsafe_b64encode(fixed[i * step : (i + 1) * step] + b"".join(row)) + b"\n"
        for i, row in enumerate(zip(*parts, strict=True))
    ]
    return b"".join(lines)
