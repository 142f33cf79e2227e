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
(``tf.io.decode_raw`` on a slice of a batch of records); and rather than the tf.data service, which
would need a dispatcher and would move batches between hosts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from airflow_tfos.runtime.feed.plan import Feed, FeedConfigError

#: Name of each split's record file, relative to the worker's working directory.
RECORD_FILES = {"train": "airflow-tfos-train.rec", "validation": "airflow-tfos-validation.rec"}
#: Holds a worker's task index, in the working directory of every worker of a parameter-server cluster:
#: a graph the chief traces reads it there to find which worker runs it (InputMode.TENSORFLOW files).
WORKER_INDEX_FILE = "airflow-tfos-worker-index"


@dataclass(frozen=True)
class RecordColumn:
    """One fed column in a record: its NumPy type (little-endian) and element count (0: a scalar)."""

    name: str
    dtype: str
    width: int = 0

    @property
    def nbytes(self) -> int:
        return np.dtype(self.dtype).itemsize * max(self.width, 1)


def record_columns(
    feed: Feed, dtypes: dict[str, str], widths: dict[str, int], sparse=frozenset()
) -> tuple[RecordColumn, ...]:
    """The record layout of the fed columns: spilled types, floating-point features cast as the feed says.
    Columns of varying size (strings, ragged arrays, sparse vectors) have none: they are refused."""
    columns = []
    for name in feed.columns:
        kind = np.dtype(dtypes[name])
        if kind.kind == "O" or name in feed.ragged or name in sparse:
            what = "strings" if kind.kind == "O" else "a ragged array" if name in feed.ragged else "sparse vectors"
            raise FeedConfigError(
                f"column {name!r} holds {what}, which the parameter-server feed cannot carry (its records have a "
                "fixed size): use MultiWorkerMirroredStrategy, or make the column fixed-width in Spark (or with "
                "Feed(pad=...) / Feed(densify=...))"
            )
        if feed.cast_floats and kind.kind == "f" and name in feed.features:
            kind = np.dtype(feed.cast_floats)
        columns.append(RecordColumn(name, kind.newbyteorder("<").str, int(widths.get(name, 0))))
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
        return sum(c.nbytes for c in self.columns)

    @property
    def steps_per_epoch(self) -> int:
        """Batches of one epoch over every worker: the steps the chief schedules."""
        return self.steps_per_worker * self.num_workers

    def dataset_fn(self, repeat: bool = True):
        """A function for ``create_per_worker_dataset`` or Keras ``DatasetCreator``: on each worker, batches
        of its own share, ``steps_per_worker`` per epoch; with ``repeat`` one epoch after another without
        end (as TF advises under parameter servers), else one epoch."""
        shares = self

        def dataset_fn(input_context=None):
            return shares.build(repeat)

        return dataset_fn

    def build(self, repeat: bool = True):
        """Build the per-worker pipeline (called on the chief, run on each worker)."""
        import tensorflow as tf

        feed = self.feed
        records = tf.data.FixedLengthRecordDataset(self.file_name, self.record_bytes, buffer_size=1 << 20)
        if feed.shuffle:
            records = records.shuffle(feed.shuffle_window, seed=feed.seed, reshuffle_each_iteration=True)
        # A worker short of rows repeats its own (balance "pad"); one with more stops early ("drop").
        epoch = records.repeat().take(self.rows_per_epoch).batch(feed.batch_size, drop_remainder=True)
        epoch = epoch.map(self.decode, num_parallel_calls=tf.data.AUTOTUNE)
        dataset = epoch.repeat() if repeat else epoch
        if not repeat:
            dataset = dataset.apply(tf.data.experimental.assert_cardinality(self.steps_per_worker))
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)

    def decode(self, records):
        """Turn a batch of records into ``(features, label)`` tensors shaped as ``ctx.dataset()``'s."""
        import tensorflow as tf

        values = {}
        offset = 0
        for column in self.columns:
            raw = tf.strings.substr(records, offset, column.nbytes)
            decoded = tf.io.decode_raw(raw, tf.as_dtype(np.dtype(column.dtype)), little_endian=True)
            shape = [self.feed.batch_size, column.width] if column.width else [self.feed.batch_size]
            values[column.name] = tf.reshape(decoded, shape)  # whole batches only: the shape is static
            offset += column.nbytes
        return self.feed.arrange(values)


def write_records(batches, columns: Sequence[RecordColumn], path: str) -> tuple[int, int]:
    """Write Arrow record batches as fixed-width records to ``path``; return (rows, bytes) written."""
    from airflow_tfos.runtime.feed.columns import to_numpy

    layout = np.dtype([(c.name, c.dtype, (c.width,)) if c.width else (c.name, c.dtype) for c in columns])
    widths = {c.name: c.width for c in columns if c.width}
    rows = 0
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as out:
        for batch in batches:
            arrays = to_numpy(batch, [c.name for c in columns], widths)
            block = np.empty(batch.num_rows, dtype=layout)
            for name, array in arrays.items():
                block[name] = array
            out.write(block.tobytes())
            rows += batch.num_rows
    os.replace(tmp, path)
    return rows, rows * layout.itemsize
