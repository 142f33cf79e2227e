"""Inside a node: its share of the data (spilled, or Parquet slices it reads itself) as NumPy batches and as a
``tf.data.Dataset``."""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from airflow_tfos.runtime.feed.columns import Rows, as_tensor, concat, normalize_column, spec_of, to_numpy
from airflow_tfos.runtime.feed.native import NativeShares
from airflow_tfos.runtime.feed.spill import count_batches, read_batches, spill_schema
from airflow_tfos.shared.feed import Feed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeedShare:
    """One node's share of one data set (training or validation), as spilled on its executor.

    :param split: ``train`` or ``validation``.
    :param path: the local spill file ("" when ``streamed``).
    :param rows: rows in the file.
    :param steps_per_epoch: batches per epoch, the same on every node.
    :param widths: element count of each fixed-width array or vector column.
    :param feed: the feed settings.
    :param rank: the node's training rank (seeds its shuffle).
    :param spill_seconds: how long reading the partition from Spark and spilling it took.
    :param spill_peak_rss_mb: the Spark task's peak resident memory while spilling.
    :param spill_started_at: when the Spark task began to read its partition (seconds since the epoch).
    :param native: under parameter servers, the workers' record files read by TF's own ops (the chief
        holds no rows: its share has ``rows=0`` and no ``path``).
    :param workers: training nodes that read their own shares in step (MultiWorkerMirroredStrategy's
        workers). tf.distribute takes each worker's batch for a *global* one: it splits every batch among
        all workers' replicas and keeps only this worker's part, or, with auto-sharding off, runs every
        part as a step of its own, so that ``fit`` (which counts steps by the dataset's cardinality) would
        see 1/``workers`` of the node's rows. :func:`make_dataset` therefore repeats each batch
        ``workers`` times and lets tf.distribute keep one copy: each step of each worker trains on
        ``batch_size`` of its own rows, and an epoch on every row once.
    :param sparse: vector columns fed as ``tf.SparseTensor`` (some node holds a sparse row of them, and
        the feed does not densify them).
    :param once: every row exactly once per pass, none repeated or left out (validation data): the last
        batch may be short, and nodes may hold different numbers of batches (``steps_per_epoch`` is the
        largest node's); under MultiWorkerMirroredStrategy tf.distribute gives a worker whose rows are used
        up empty batches until every worker is done, so metrics count each row once.
    :param streamed: direct reads: the node's TF process reads its ``slices`` of the Parquet files every epoch
        (:func:`~airflow_tfos.runtime.feed.parquet_reads.stream_slices`); nothing was spilled.
    :param slices: with ``streamed``: the node's row-group slices.
    :param schema: with ``streamed``: the Arrow schema of the checked columns (base64 of its IPC form).
    :param webhdfs_config: with ``streamed``, files on HDFS: the run's WebHDFS settings.
    :param order: a digest of the order its rows are replayed in (of the spill, or of the slices): a resumed
        attempt whose share has the interrupted attempt's digest can skip the batches trained already.
    """

    split: str
    path: str
    rows: int
    steps_per_epoch: int
    widths: dict[str, int] = field(default_factory=dict)
    feed: Feed = None  # type: ignore[assignment]
    rank: int = 0
    spill_seconds: float = 0.0
    spill_peak_rss_mb: float = 0.0
    spill_started_at: float = 0.0
    native: NativeShares | None = None
    workers: int = 1
    once: bool = False
    sparse: frozenset[str] = frozenset()
    streamed: bool = False
    slices: tuple = ()
    schema: str = ""
    webhdfs_config: str | None = None
    order: str = ""

    @property
    def rows_per_epoch(self) -> int:
        return self.rows if self.once else self.steps_per_epoch * self.feed.batch_size

    @property
    def repeated(self) -> int:
        """Rows this node feeds a second time each epoch to fill its last steps (balance ``pad``)."""
        return max(self.rows_per_epoch - self.rows, 0) if self.rows else 0

    @property
    def left_out(self) -> int:
        """Rows of this node no epoch feeds (balance ``drop``: what does not fill the common steps)."""
        return max(self.rows - self.rows_per_epoch, 0)

    def balance_record(self) -> dict[str, int]:
        """What one epoch feeds of this share, for the ``feed`` event: rows fed, repeated, left out."""
        return {"rows_per_epoch": self.rows_per_epoch, "repeated": self.repeated, "dropped": self.left_out}


def _cast(array, feed: Feed):
    if feed.cast_floats and array.dtype.kind == "f":
        return array.astype(feed.cast_floats, copy=False)
    return array


def epoch_chunks(share: FeedShare, epoch: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """Yield one epoch of the node's rows in chunks of whole record batches, ``rows_per_epoch`` rows in
    all, as dicts of NumPy arrays (``(rows,)`` or ``(rows, width)`` per column).

    With ``shuffle``, every epoch visits the spilled record batches in a new order and shuffles the rows
    within windows of about ``shuffle_window`` rows. A node short of rows (balance ``pad``) goes on with
    its own rows from the start; one with more (``drop``) stops early.
    """
    feed = share.feed
    rng = np.random.default_rng([feed.seed, share.rank, epoch]) if feed.shuffle and not share.once else None
    units = len(share.slices) if share.streamed else count_batches(share.path)
    wanted = share.rows_per_epoch
    while wanted > 0 and units:
        for chunk in _windows(_record_batches(share, units, rng), share, rng):
            n = _length(chunk)
            if n >= wanted:
                yield {k: v[:wanted] for k, v in chunk.items()}
                return
            yield chunk
            wanted -= n


def _record_batches(share: FeedShare, units: int, rng: np.random.Generator | None) -> Iterator[pa.RecordBatch]:
    """One pass over the node's rows as checked record batches: its spill file's batches (in a new order with
    ``rng``), or its Parquet slices read anew."""
    if share.streamed:
        from airflow_tfos.runtime.feed.parquet_reads import stream_slices

        what = "training data" if share.split == "train" else "validation data"
        return stream_slices(share.slices, share.feed, dict(share.widths), what, rng, share.webhdfs_config)
    return read_batches(share.path, rng.permutation(units).tolist() if rng is not None else None)


def _length(chunk: dict[str, np.ndarray]) -> int:
    return len(next(iter(chunk.values())))


def _windows(batches, share: FeedShare, rng: np.random.Generator | None) -> Iterator[dict[str, np.ndarray]]:
    """Turn record batches into NumPy chunks; with ``rng``, merge them into windows of at least
    ``shuffle_window`` rows and shuffle each window's rows."""
    columns = share.feed.columns
    pending: list[dict[str, np.ndarray]] = []
    held = 0
    window = share.feed.shuffle_window if rng is not None else 1
    for batch in batches:
        pending.append(to_numpy(batch, columns, share.widths, share.sparse))
        held += batch.num_rows
        if held >= window:
            yield _merge(pending, rng)
            pending, held = [], 0
    if pending:
        yield _merge(pending, rng)


def _merge(parts: list[dict[str, np.ndarray]], rng: np.random.Generator | None) -> dict[str, np.ndarray]:
    merged = parts[0] if len(parts) == 1 else {k: concat([p[k] for p in parts]) for k in parts[0]}
    if rng is not None:
        order = rng.permutation(_length(merged))
        merged = {k: v[order] for k, v in merged.items()}
    return merged


def iter_epoch(share: FeedShare, epoch: int = 0) -> Iterator:
    """Yield exactly ``steps_per_epoch`` batches of ``batch_size`` rows: ``(features, label)``, or the
    features alone without a label. Features are one array, or a dict of arrays for several columns.
    A ``once`` share (validation data) yields each of its rows once, the last batch possibly short."""
    for batch in _exact_batches(epoch_chunks(share, epoch), share.feed.batch_size, keep_rest=share.once):
        yield _shape(batch, share.feed)


def _exact_batches(chunks, size: int, keep_rest: bool = False) -> Iterator:
    """Cut chunks of rows (dicts of equally long arrays) into batches of exactly ``size`` rows; rows
    left at the end are dropped, or with ``keep_rest`` yielded as one short batch."""
    carry: dict[str, np.ndarray] | None = None
    for chunk in chunks:
        if carry is not None:
            chunk = {k: concat([carry[k], chunk[k]]) for k in chunk}
        n = _length(chunk)
        start = 0
        while n - start >= size:
            yield {k: v[start : start + size] for k, v in chunk.items()}
            start += size
        carry = {k: v[start:] for k, v in chunk.items()}
    if keep_rest and carry is not None and _length(carry):
        yield carry


def _shape(batch: dict, feed: Feed):
    return feed.arrange({name: _cast(batch[name], feed) if name in feed.features else batch[name] for name in batch})


def _map(fn, value):
    if isinstance(value, dict):
        return {k: _map(fn, v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_map(fn, v) for v in value)
    return fn(value)


def signature_of(value):
    """The ``tf.TypeSpec`` structure of a batch, with the batch dimension left open."""
    return _map(spec_of, value)


def _is_composite(value) -> bool:
    """Whether a batch holds :class:`Rows` (ragged arrays, sparse vectors)."""
    found = []
    _map(lambda v: found.append(isinstance(v, Rows)), value)
    return any(found)


def checked_batches(batches, feed: Feed) -> Iterator:
    """Turn Arrow record batches into NumPy ones shaped like :func:`iter_epoch`'s (whatever their number
    of rows), checking that each fed column can be a tensor and that array columns keep one length.
    Vector columns are densified: files carry no promise that a column's rows are all dense or not."""
    widths: dict[str, int] = {}
    for batch in batches:
        if not batch.num_rows:
            continue  # an empty row group: nothing to check, and no width to shape it with
        arrays = [normalize_column(name, batch.column(name), widths, "files", feed) for name in feed.columns]
        yield _shape(to_numpy(pa.RecordBatch.from_arrays(arrays, feed.columns), feed.columns, widths), feed)


def make_dataset(share: FeedShare):
    """Return a ``tf.data.Dataset`` of one epoch (``steps_per_epoch`` batches), replayed from local disk (or
    read anew from the node's Parquet slices) each time it is iterated (a new shuffle each time), with
    tf.data's auto-sharding off: the data is already this node's own.

    Python hands over whole record batches or shuffle windows (thousands of rows at a time), and
    tf.data's ``rebatch`` cuts them into batches in C++ by slicing: no step of the pipeline works
    row by row, so feeding costs the training loop almost nothing.
    """
    import tensorflow as tf

    feed = share.feed
    epochs = EpochCounter()

    empty = _shape(_empty(share), feed)
    if _is_composite(empty):
        # Ragged arrays and sparse vectors: batched here (tf.data's rebatch takes dense tensors only), and
        # handed over as tf.RaggedTensor and tf.SparseTensor.
        def batches():
            chunks = epoch_chunks(share, next(epochs))
            for batch in _exact_batches(chunks, feed.batch_size, keep_rest=share.once):
                yield _map(as_tensor, _shape(batch, feed))

        dataset = tf.data.Dataset.from_generator(batches, output_signature=signature_of(empty))
        if not share.once:
            dataset = dataset.apply(tf.data.experimental.assert_cardinality(share.steps_per_epoch))
        return _counted(for_workers(dataset, share.workers).prefetch(tf.data.AUTOTUNE), epochs)

    def chunks():
        for chunk in epoch_chunks(share, next(epochs)):
            yield _shape(chunk, feed)

    dataset = tf.data.Dataset.from_generator(chunks, output_signature=signature_of(empty))
    if share.once:
        # Every row once, the last batch short. The cardinality is left unknown: nodes hold different numbers
        # of batches, and Keras, given no steps, then runs until every worker's rows are used up (under
        # MultiWorkerMirroredStrategy a worker done early gets empty batches), the same steps on every node.
        dataset = dataset.rebatch(feed.batch_size, drop_remainder=False)
    else:
        dataset = dataset.rebatch(feed.batch_size, drop_remainder=True)
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(share.steps_per_epoch))
    return _counted(for_workers(dataset, share.workers).prefetch(tf.data.AUTOTUNE), epochs)


class EpochCounter:
    """Which epoch the next pass over a dataset of :func:`make_dataset` is: it seeds that pass's shuffle.

    Each iteration of the dataset starts the next epoch. A run resumed mid-way starts its dataset at the
    epoch it resumes in (:func:`start_epoch`), so that a shuffled epoch it finishes is read in the order the
    interrupted attempt read it, and skipping the batches already trained on skips exactly those.
    """

    def __init__(self) -> None:
        self._next = 0
        self._lock = threading.Lock()

    def __next__(self) -> int:
        with self._lock:
            epoch, self._next = self._next, self._next + 1
            return epoch

    def start_at(self, epoch: int) -> None:
        with self._lock:
            self._next = epoch


#: The attribute of a dataset from :func:`make_dataset` that holds its :class:`EpochCounter`.
_EPOCHS_ATTR = "airflow_tfos_epochs"


def _counted(dataset, epochs: EpochCounter):
    setattr(dataset, _EPOCHS_ATTR, epochs)
    return dataset


def replays_epochs(dataset) -> bool:
    """Whether ``dataset`` is one of :func:`make_dataset` (``ctx.dataset()``), whose passes :func:`start_epoch` sets."""
    return getattr(dataset, _EPOCHS_ATTR, None) is not None


def start_epoch(dataset, epoch: int) -> bool:
    """Make the next pass over ``dataset`` (from :func:`make_dataset`: ``ctx.dataset()``) read epoch ``epoch``'s
    order; False when ``dataset`` is not one (a transformed dataset counts its passes from 0)."""
    epochs = getattr(dataset, _EPOCHS_ATTR, None)
    if epochs is None:
        return False
    epochs.start_at(epoch)
    return True


def for_workers(dataset, workers: int):
    """Lay out a node's own batches for ``workers`` training nodes in step (see ``FeedShare.workers``).

    tf.distribute takes each worker's batch for a global one and splits it among all workers' replicas:
    with several workers each batch is repeated once per worker and auto-sharded by data, so that every
    replica gets the whole batch of its own node's rows; with one, auto-sharding is off (the data is the
    node's own already).

    tf.data's autotuning is off: this pipeline has nothing for it to tune (a generator, slicing, a copy). With it on,
    in a process held to one core (a one-core executor), a small model trained at 0.55-0.58 of the steps per second
    and some passes ended with the process idle for up to 0.3 s after the last batch (``bench/tfdata.py``).
    ``prefetch(tf.data.AUTOTUNE)`` still prefetches. A program that adds heavy parallel steps of its own can turn
    it back on with ``options.autotune.enabled = True`` on the dataset it gets.
    """
    import tensorflow as tf

    options = tf.data.Options()
    options.autotune.enabled = False
    if workers <= 1:
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        return dataset.with_options(options)

    def repeat(part):
        if isinstance(part, tf.SparseTensor):
            return tf.sparse.concat(0, [part] * workers)
        return tf.concat([part] * workers, axis=0)

    def repeat_batch(*parts):
        repeated = tf.nest.map_structure(repeat, parts)
        return repeated[0] if len(repeated) == 1 else repeated

    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.map(repeat_batch, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.with_options(options)


def _empty(share: FeedShare) -> dict:
    """Zero rows of each fed column with the spilled types and widths: the pipeline's signature."""
    if share.streamed:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(share.schema)))
    else:
        schema = spill_schema(share.path)
    empty = pa.RecordBatch.from_pylist([], schema=schema)
    return to_numpy(empty, share.feed.columns, share.widths, share.sparse)
