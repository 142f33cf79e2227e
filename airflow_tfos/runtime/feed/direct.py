"""Direct reads: training nodes read their share of Parquet files themselves, not through Spark.

A DataFrame that is a plain scan of Parquet files (``spark.read.parquet(path)``, as the operators'
``data={"format": "parquet", ...}`` builds, with at most a selection of plain columns) holds nothing that
Spark computes: its rows are the files' rows. Then :func:`plan_direct`, on the driver, reads each file's
footer (row-group sizes only), cuts the rows into one share per training node, equal to a row, and hands
each node its list of :class:`Slice` (file, row group, rows).

Nothing is copied before training starts. In the barrier task, :func:`probe_direct` counts the node's rows
from its slices and reads only its first rows, for the columns' widths and types (checked by the feed's
rules); the node's TF process then reads its slices itself, every epoch
(:func:`.parquet_reads.stream_slices`): slices in a new order each epoch, two row groups interleaved, rows
shuffled within a window, every batch checked by the same rules as on the Spark path. The balancing
(``pad``/``drop``), the steps per epoch and ``ctx.dataset()`` are those of the Spark path. A bad value met
while training fails the run with the same :class:`FeedConfigError` (:func:`.parquet_reads.input_error`).
What is skipped is Spark's JVM-to-Python row transfer, the shuffle that lays rows out on the nodes, and the
spill to local disk. Under parameter servers the workers' TF ops read fixed-width record files: there
:func:`spill_direct` reads the slices once into the spill the record files are written from.

Any other DataFrame (a filter, a computed column, a join, a cached frame, a partitioned table whose
partition columns are fed, a type whose Arrow form Spark converts) keeps the Spark path; the driver's log
says which path was taken and why. ``Feed(read="direct")`` fails on such a DataFrame, naming why;
``Feed(read="spark")`` always goes through Spark.
"""

from __future__ import annotations

import base64
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

from airflow_tfos.runtime.feed.parquet_reads import Slice, open_parquet, read_slices, slice_batches, storage_path
from airflow_tfos.runtime.feed.plan import NUMERIC_TYPES
from airflow_tfos.runtime.node.cluster import NodeRole
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV

#: Spark types whose Parquet form pyarrow reads as Spark's Arrow path sends them.
DIRECT_TYPES = NUMERIC_TYPES | {"string", "binary", "date"}
_PARQUET_FORMAT = "org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat"


@dataclass(frozen=True)
class DirectInput:
    """What each node reads, per split (``train``, ``validation``): slices indexed by executor id (nodes
    that are not fed get none).

    :param files: how many files the training (and validation) data span.
    :param reason: why the direct path was taken, for the log.
    :param webhdfs_config: the driver's WebHDFS settings (``AIRFLOW_TFOS_WEBHDFS``, which holds no secret), for
        executors that have none of their own.
    """

    splits: dict[str, tuple[tuple[Slice, ...], ...]]
    files: int
    reason: str
    webhdfs_config: str | None = None

    def slices(self, split: str, executor_id: int) -> tuple[Slice, ...]:
        return self.splits[split][executor_id]


def _children(plan) -> list:
    children = plan.children()
    return [children.apply(i) for i in range(children.size())]


def scan_files(df, feed: Feed) -> tuple[list[str] | None, str]:
    """The Parquet files ``df`` reads when it is a plain scan of them (at most a selection of plain columns);
    else None and the reason, as the log says it ("the plan has a Filter")."""
    try:
        return _scan_files(df, feed)
    except Exception as exc:  # not a classic DataFrame (Spark Connect), or a plan of another Spark's shape
        return None, f"its plan cannot be inspected ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"


def _scan_files(df, feed: Feed) -> tuple[list[str] | None, str]:
    node = df._jdf.queryExecution().optimizedPlan()
    while node.nodeName() == "Project":
        projected = node.projectList()
        for i in range(projected.size()):
            if projected.apply(i).getClass().getSimpleName() != "AttributeReference":
                return None, "the plan computes or renames a column"
        node = _children(node)[0]
    if node.nodeName() != "LogicalRelation":
        return None, f"the plan has a {node.nodeName()}"
    relation = node.relation()
    if relation.getClass().getSimpleName() != "HadoopFsRelation":
        return None, f"it reads a {relation.getClass().getSimpleName()}, not files"
    if relation.fileFormat().getClass().getName() != _PARQUET_FORMAT:
        return None, f"its files are {relation.fileFormat().toString()}, not Parquet"
    partition_columns = set(relation.partitionSchema().fieldNames())
    fed_partition_columns = sorted(partition_columns & set(feed.columns))
    if fed_partition_columns:
        return None, f"the fed column(s) {fed_partition_columns} are partition columns (not in the files)"
    for f in df.schema.fields:
        kind = f.dataType.simpleString()
        numeric_array = kind.startswith("array<") and kind[6:-1] in NUMERIC_TYPES
        if f.name in feed.columns and kind not in DIRECT_TYPES and not numeric_array:
            return None, f"column {f.name!r} has type {kind}, which Spark converts on its way"
    files = list(df.inputFiles())
    if not files:
        return None, "it lists no files"
    return files, "plain scan"


def row_groups(files: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(file, row group, rows)`` of every non-empty row group of ``files`` (their footers only)."""
    found = []
    for uri in files:
        try:
            metadata = open_parquet(uri).metadata
        except Exception as exc:
            raise FeedConfigError(f"cannot read the Parquet footer of {uri}: {exc}") from exc
        found.extend((uri, i, metadata.row_group(i).num_rows) for i in range(metadata.num_row_groups))
    return [g for g in found if g[2]]


def split_rows(groups: Sequence[tuple[str, int, int]], nodes: int, seed: int = 0) -> list[list[Slice]]:
    """Cut the row groups into ``nodes`` shares whose row counts differ by at most one.

    Row groups are taken in a seeded order (so that a node's share spans many files, not the first few),
    and each share is a run of whole row groups, cut at most once at each end.
    """
    import numpy as np

    order = np.random.default_rng([seed, len(groups)]).permutation(len(groups)).tolist()
    total = sum(g[2] for g in groups)
    targets = [total // nodes + (1 if i < total % nodes else 0) for i in range(nodes)]
    shares: list[list[Slice]] = [[] for _ in range(nodes)]
    node, room = 0, targets[0]
    for index in order:
        path, group, rows = groups[index]
        start = 0
        while start < rows:
            while room == 0 and node + 1 < nodes:
                node += 1
                room = targets[node]
            take = min(room, rows - start)
            shares[node].append(Slice(path, group, start, start + take))
            start += take
            room -= take
    return shares


def plan_direct(data, feed: Feed, roles: Sequence[NodeRole], validation_data=None) -> tuple[DirectInput | None, str]:
    """Decide the path for ``data`` (and ``validation_data``) by ``feed.read``; return the nodes' slices when
    they read the files themselves (else None), and the line for the driver's log."""
    from airflow_tfos.runtime.feed.spark_side import TRAIN, VALIDATION, feed_order

    if feed.read == "spark":
        return None, "feed: through Spark (Feed(read='spark'))"
    found = {TRAIN: scan_files(data, feed)}
    if validation_data is not None:
        found[VALIDATION] = scan_files(validation_data, feed)
    for split, (files, reason) in found.items():
        if files is None:
            what = "training" if split == TRAIN else "validation"
            if feed.read == "direct":
                raise FeedConfigError(
                    f"Feed(read='direct') needs the {what} DataFrame to be a plain scan of Parquet files "
                    f"(spark.read.parquet(...), at most a select of columns), but {reason}: "
                    "write the transformed rows to Parquet first, or use read='auto' or 'spark'"
                )
            return None, f"feed: through Spark (the {what} DataFrame: {reason})"
    try:
        for files, _ in found.values():
            for uri in files:
                storage, _ = storage_path(uri)
                if getattr(getattr(storage, "config", None), "auth", None) == "kerberos":
                    raise FeedConfigError(
                        f"{uri} is on a Kerberized HDFS, and the Spark tasks that would read it hold no "
                        "Kerberos ticket (Spark itself reads it with the application's delegation tokens)"
                    )
    except Exception as exc:  # a scheme the storage layer does not read (s3a://, abfs://...), no HDFS settings
        if feed.read == "direct":
            raise FeedConfigError(f"Feed(read='direct') cannot read the input files: {exc}") from exc
        return None, f"feed: through Spark ({str(exc).splitlines()[0]})"
    order = feed_order(roles)
    splits = {}
    for split, (files, _) in found.items():
        shares = split_rows(row_groups(files), len(order), feed.seed)
        by_executor: list[tuple[Slice, ...]] = [() for _ in roles]
        for role, share in zip(order, shares, strict=True):
            by_executor[role.executor_id] = tuple(share)
        splits[split] = tuple(by_executor)
    count = len({uri for files, _ in found.values() for uri in files})
    columns = len(feed.columns)
    line = f"feed: reading {count} Parquet file(s) directly on the nodes (plain scan, {columns} column(s))"
    webhdfs_config = os.environ.get(WEBHDFS_ENV) or None
    return DirectInput(splits=splits, files=count, reason="plain scan", webhdfs_config=webhdfs_config), line


def probe_direct(direct: DirectInput, executor_id: int, feed: Feed) -> dict:
    """For a node that streams its slices (:func:`.parquet_reads.stream_slices`): count its rows of every split
    from the slices and read its first rows only, for the fed columns' widths and types, checked by the feed's
    rules; return what :func:`~airflow_tfos.runtime.feed.spark_side.spill_partition` returns, without a spill file."""
    import psutil
    import pyarrow as pa

    from airflow_tfos.runtime.feed.columns import element_type, normalize_column

    started, started_at = time.monotonic(), time.time()
    info = {}
    for split, shares in direct.splits.items():
        slices = shares[executor_id]
        what = "training data" if split == "train" else "validation data"
        widths: dict[str, int] = {}
        dtypes, schema = {}, ""
        if slices:
            handle = open_parquet(slices[0].path, direct.webhdfs_config, buffer_size=2**20)
            first = next(slice_batches(handle, Slice(slices[0].path, slices[0].row_group, 0, 1), feed.columns, 1))
            arrays = [normalize_column(name, first.column(name), widths, what, feed) for name in feed.columns]
            checked = pa.RecordBatch.from_arrays(arrays, list(feed.columns))
            dtypes = {name: element_type(checked.schema.field(name).type).str for name in feed.columns}
            schema = base64.b64encode(checked.schema.serialize().to_pybytes()).decode()
        info[split] = {
            "rows": sum(part.rows for part in slices),
            "widths": widths,
            "sparse": [],
            "dtypes": dtypes,
            "path": "",
            "bytes": 0,
            "seconds": time.monotonic() - started,
            "started_at": started_at,
            "peak_rss_mb": psutil.Process().memory_info().rss / 2**20,
            "source": "the Parquet files",
            "streamed": True,
            "slices": len(slices),
            "schema": schema,
        }
    return info


def spill_direct(direct: DirectInput, executor_id: int, node_dir: str, feed: Feed) -> dict:
    """Read this node's slices of every split into local spill files; return what
    :func:`~airflow_tfos.runtime.feed.spark_side.spill_partition` returns."""
    import psutil

    from airflow_tfos.runtime.feed.spark_side import spill_info
    from airflow_tfos.runtime.feed.spill import SpillWriter

    me = psutil.Process()
    peak = me.memory_info().rss
    started, started_at = time.monotonic(), time.time()
    writers = {}
    try:
        for split in direct.splits:
            what = "training data" if split == "train" else "validation data"
            writer = writers[split] = SpillWriter(os.path.join(node_dir, f"{split}.arrow"), feed.columns, what, feed)
            for batch in read_slices(direct.slices(split, executor_id), feed.columns, direct.webhdfs_config):
                writer.write(batch)
                del batch
                peak = max(peak, me.memory_info().rss)
        info = spill_info(writers, feed, started, started_at, peak)
        return {split: {**stats, "source": "the Parquet files"} for split, stats in info.items()}
    finally:
        for writer in writers.values():
            writer.abort()
