"""InputMode.TENSORFLOW: each node reads its own share of the files, and helpers turn them into tf.data.

:func:`shard_files` is pure: a deterministic, size-balanced split of a file list. The readers take the
files this node got (``ctx.shard_files(...)``) and return ``tf.data.Dataset`` pipelines; files are
reached through :mod:`airflow_tfos.shared.storage`, so every scheme registered there works. Under
MultiWorkerMirroredStrategy the readers are told the number of training nodes (``workers=``) and lay
each node's batches out for tf.distribute as the fed dataset does.

Remote files (``hdfs://``, ``webhdfs://``, ``swebhdfs://``) are read over WebHDFS by the storage layer's own
client, not by TensorFlow (TensorFlow 2.21 has no HDFS file system), and are not streamed into TensorFlow:
Parquet and CSV files are downloaded one at a time, as the reader reaches them, to a local temporary file
(seekable, which Parquet needs; removed once read). TFRecord files, which TensorFlow's reader opens
by name, are all downloaded when :func:`tfrecord_dataset` is called, into a cache directory of this
process that is removed when it exits. Local disk must hold them (TFRecord) or the largest (others).
"""

from __future__ import annotations

import atexit
import hashlib
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from airflow_tfos.runtime.feed.service import DataService
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed
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


@dataclass(frozen=True)
class WorkerFiles:
    """Files dealt over the workers of a parameter-server cluster, each worker reading its own in TensorFlow.

    Under ParameterServerStrategy the chief only coordinates: ``create_per_worker_dataset`` traces the
    chief's dataset function once and runs the graph on every worker, and inside it every worker looks
    alike (``input_context.input_pipeline_id`` is 0 on each). Every worker of such a cluster runs in a
    directory of its own holding its task index in a file (``WORKER_INDEX_FILE``); the graph
    :meth:`dataset_fn` builds reads that file by its relative name, so on each worker it finds that worker's
    index and keeps that worker's files. A Python reader (``parquet_dataset``, ``csv_dataset``,
    ``from_generator``) would run in the chief's process: the files are read with TensorFlow's own ops
    (``TFRecordDataset``, ``CsvDataset``, ``FixedLengthRecordDataset``, ``TextLineDataset``), by the names
    listed here, which must be paths every worker's TensorFlow can open: local or shared paths, or a scheme
    TensorFlow reads itself. TensorFlow 2.21 reads neither ``hdfs://`` nor ``webhdfs://``: this project reads
    HDFS over WebHDFS in Python (:func:`parquet_dataset`, :func:`csv_dataset`, :func:`tfrecord_dataset`), which
    under parameter servers would run in the chief's process.

    With ``service`` each pass over the files is served through the tf.data service
    (:mod:`~airflow_tfos.runtime.feed.service`): every worker's tf.data worker reads that worker's files, and
    each batch goes to whichever worker asks first, once per pass.

    :param shares: each worker's files, by task index: dealt largest first to the lightest worker, as
        :func:`shard_files` deals them to training nodes.
    :param service: the tf.data service of the cluster; None: each worker's dataset yields its own files.
    """

    shares: tuple[tuple[str, ...], ...]
    service: DataService | None = None

    @classmethod
    def deal(cls, files: Sequence[FileInfo], num_workers: int, service: DataService | None = None) -> WorkerFiles:
        """Deal ``files`` over ``num_workers`` workers (local paths made absolute: workers run elsewhere)."""
        if num_workers < 1:
            raise FeedConfigError("a parameter-server cluster without workers cannot read files: raise num_nodes")
        named = [FileInfo(_tf_name(f.path), f.size) for f in files]
        shares = tuple(tuple(f.path for f in shard_files(named, num_workers, i)) for i in range(num_workers))
        return cls(shares, service)

    @property
    def num_workers(self) -> int:
        return len(self.shares)

    def dataset_fn(self, read, repeat: bool = True):
        """A function for ``coordinator.create_per_worker_dataset`` or Keras ``DatasetCreator``: ``read(files)``
        over each worker's files (a 1-D string tensor of their names), which must return a ``tf.data.Dataset``
        of one pass over them built from TensorFlow's ops. With ``repeat`` pass after pass without end
        (schedule :meth:`steps_per_epoch` steps per pass), else one pass per iterator. With :attr:`service`,
        each pass hands every worker's batches to whichever worker asks first; without, each worker yields
        its own."""
        names = [name for share in self.shares for name in share]
        owners = [index for index, share in enumerate(self.shares) for _ in share]

        def one_pass():
            import tensorflow as tf

            from airflow_tfos.runtime.feed.native import WORKER_INDEX_FILE

            all_names, all_owners = tf.constant(names), tf.constant(owners, tf.int32)

            def own_files(_):
                # Runs in the worker's process (in its working directory), as the dataset's ops do.
                index = tf.strings.to_number(tf.strings.strip(tf.io.read_file(WORKER_INDEX_FILE)), tf.int32)
                return read(tf.boolean_mask(all_names, tf.equal(all_owners, index)))

            dataset = tf.data.Dataset.from_tensors(0).flat_map(own_files)
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
            return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)

        if self.service is not None:
            consumer = self.service.passes(one_pass, "files", repeat)
            return lambda input_context=None: consumer()

        def dataset_fn(input_context=None):
            dataset = one_pass()
            return dataset.repeat() if repeat else dataset

        return dataset_fn

    def epoch_dataset_fn(self, read):
        """:meth:`dataset_fn` whose dataset ends after one pass over the worker's files: for custom loops that
        take batches with ``iterator.get_next_as_optional()`` until they have counted :meth:`steps_per_epoch`."""
        return self.dataset_fn(read, repeat=False)

    def steps_by_worker(self, read) -> list[int]:
        """Elements (batches) of one pass of ``read`` over each worker's files, counted here by running it
        (its cardinality when tf.data knows it, else one pass over the data in this process)."""
        import tensorflow as tf

        counts = []
        for share in self.shares:
            dataset = read(tf.constant(list(share)))
            count = int(dataset.cardinality())
            if count == tf.data.INFINITE_CARDINALITY:
                raise FeedConfigError("read(files) must return one pass over the files: do not repeat() it")
            if count < 0:
                count = int(dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
            counts.append(count)
        return counts

    def steps_per_epoch(self, read) -> int:
        """Steps the chief schedules for one epoch: every worker's batches of one pass over its files."""
        return sum(self.steps_by_worker(read))


def _tf_name(path: str) -> str:
    """The name TensorFlow's ops open ``path`` by on a worker."""
    local = storage_for(path).local_path(path)
    if local is not None:
        return os.path.abspath(local)
    if path.split("://", 1)[0] in ("webhdfs", "swebhdfs"):
        raise FeedConfigError(
            f"{path}: TensorFlow's ops cannot open WebHDFS names on the workers, nor hdfs:// ones (TensorFlow "
            "2.21 has no HDFS file system; this project reads HDFS over WebHDFS in Python, which under parameter "
            "servers would run in the chief); put the files where every worker can open them by path (a shared "
            "disk), or read them with Spark and feed them (data=spark.read...)"
        )
    return path


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


def _file_dataset(files: Sequence[str | FileInfo], fmt: str, feed: Feed, workers: int):
    """Batches of ``feed.batch_size`` rows (the last may be smaller): Python hands over the files' record
    batches whole and tf.data's ``rebatch`` cuts them, by slicing, in C++. Laid out for ``workers``
    training nodes in step, as the fed dataset is (:func:`~airflow_tfos.runtime.feed.dataset.for_workers`)."""
    if not isinstance(workers, int) or workers < 1:
        raise FeedConfigError(f"workers must be a positive integer (ctx.num_workers), got {workers!r}")
    import tensorflow as tf

    from airflow_tfos.runtime.feed.dataset import checked_batches, for_workers, signature_of

    passes = itertools.count()

    def generate():
        # Each iteration of the dataset (each epoch) runs this anew: with feed.shuffle, a new order of the
        # files and of the rows within each record batch (a window of a row group), seeded by the pass.
        batches: Iterable = _arrow_batches(files, fmt, feed.columns)
        if feed.shuffle:
            rng = np.random.default_rng([feed.seed, next(passes)])
            order = [files[i] for i in rng.permutation(len(files))]
            batches = (b.take(rng.permutation(b.num_rows)) for b in _arrow_batches(order, fmt, feed.columns))
        yield from checked_batches(batches, feed)

    first = next(generate(), None)  # empty record batches are skipped
    if first is None:
        raise FeedConfigError(f"the {fmt} files given to this node hold no rows")
    dataset = tf.data.Dataset.from_generator(generate, output_signature=signature_of(first))
    dataset = dataset.rebatch(feed.batch_size, drop_remainder=False)
    return for_workers(dataset, workers).prefetch(tf.data.AUTOTUNE)


def parquet_dataset(files: Sequence[str | FileInfo], feed: Feed, *, workers: int = 1):
    """Batches of ``(features, label)`` from Parquet files, read with Arrow a row group at a time.

    :param files: this node's files (``ctx.shard_files(...)``).
    :param feed: the columns and the batch size.
    :param workers: the training nodes that read their own files in step: under
        MultiWorkerMirroredStrategy pass ``ctx.num_workers``. tf.distribute takes each node's batch for a
        global one and, left to itself, keeps ``batch_size / workers`` of its rows per step (and so
        1/``workers`` of the node's rows per epoch); laid out for ``workers`` nodes, each replica gets
        ``batch_size`` of its own node's rows per step and every row once per epoch. With more than one,
        iterating the dataset directly (without tf.distribute) yields each batch ``workers`` times over.
        1 (the default): the batches as they are, with tf.data's auto-sharding off.

    With ``feed.shuffle`` (the default) every epoch reads the files in a new order and shuffles the rows
    within each record batch (one row group, or a part of one); every row still comes once per epoch.
    """
    return _file_dataset(files, "parquet", feed, workers)


def csv_dataset(files: Sequence[str | FileInfo], feed: Feed, *, workers: int = 1):
    """Batches of ``(features, label)`` from CSV files with a header row, streamed with Arrow.

    The parameters are :func:`parquet_dataset`'s.
    """
    return _file_dataset(files, "csv", feed, workers)
