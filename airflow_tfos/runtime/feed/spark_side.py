"""InputMode.SPARK plumbing: the driver lays the data out on the nodes; each task spills its share.

On the driver, :func:`prepare_dataframe` keeps the fed columns, tags validation rows, and repartitions so
that partition ``i`` is TF node ``i``'s data: rows go round-robin to the training nodes (chief or master,
then workers; under parameter servers with a chief, the workers alone) and parameter servers and evaluators
get none. A DataFrame already dealt out round-robin into one partition per node (e.g. a cached
``df.repartition(num_nodes)``), with every node fed and no validation data, is used as it is: a second
shuffle would only move balanced rows around. In each barrier task, :func:`spill_partition` writes the
partition to local disk and :func:`plan_shares` turns every node's row count (exchanged with ``allGather``)
into the same number of steps per epoch everywhere; under parameter servers :func:`write_native_shares` then
rewrites each worker's share as the record file its TF process reads (:mod:`.native`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from collections.abc import Iterable, Sequence

from airflow_tfos.runtime.feed.dataset import FeedShare
from airflow_tfos.runtime.feed.native import NativeShares, record_columns
from airflow_tfos.runtime.feed.plan import balance, balance_once, check_schema
from airflow_tfos.runtime.feed.spill import SpillWriter
from airflow_tfos.runtime.node.cluster import NodeRole, ps_coordinated
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed

log = logging.getLogger(__name__)

NODE_COLUMN = "__airflow_tfos_node"
ROW_COLUMN = "__airflow_tfos_row"
SPLIT_COLUMN = "__airflow_tfos_split"
TRAIN, VALIDATION = "train", "validation"


def training_order(roles: Sequence[NodeRole]) -> list[NodeRole]:
    """Training nodes in rank order: chief/master first, then workers by index."""
    coordinators = [r for r in roles if r.job_name in ("chief", "master")]
    workers = sorted((r for r in roles if r.job_name == "worker"), key=lambda r: r.task_index)
    return coordinators + workers


def feed_order(roles: Sequence[NodeRole]) -> list[NodeRole]:
    """The nodes that get rows, in rank order: the training nodes, except under parameter servers with a
    chief, where the chief only coordinates and the workers alone run steps (and so read data)."""
    if ps_coordinated(roles):
        workers = [r for r in training_order(roles) if r.job_name == "worker"]
        if not workers:
            raise FeedConfigError(
                "a cluster with parameter servers and a chief but no workers cannot be fed: under "
                "ParameterServerStrategy the workers read the data; raise num_nodes"
            )
        return workers
    return training_order(roles)


def schema_fields(df) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in df.schema.fields]


_MASK = 0xFFFFFFFF


def _rotl32(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def spark_int_hash(value: int, seed: int = 42) -> int:
    """Spark SQL's ``hash()`` of an int column: Murmur3 x86_32 of one 4-byte value, seed 42, as a
    signed 32-bit int (``Murmur3_x86_32.hashInt``)."""
    k1 = _rotl32((value & _MASK) * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK
    h1 = (_rotl32(seed ^ k1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 = (h1 ^ (h1 >> 16)) * 0x85EBCA6B & _MASK
    h1 = (h1 ^ (h1 >> 13)) * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_keys(num_partitions: int) -> dict[int, int]:
    """For each partition id, the smallest int that ``repartition(num_partitions, col)`` sends there
    (Spark's hash partitioning is ``pmod(hash(col), num_partitions)``); worked out here, no Spark job."""
    keys: dict[int, int] = {}
    value = 0
    while len(keys) < num_partitions:
        keys.setdefault(spark_int_hash(value) % num_partitions, value)
        value += 1
    return keys


def prepare_dataframe(df, feed: Feed, roles: Sequence[NodeRole], validation_df=None):
    """Check the schema, then lay ``df`` (and ``validation_df``) out as one partition per TF node."""
    from pyspark.sql import functions as F

    check_schema(schema_fields(df), feed, "training DataFrame")
    data = df.select(*feed.columns)
    if validation_df is not None:
        check_schema(schema_fields(validation_df), feed, "validation DataFrame")
        data = data.withColumn(SPLIT_COLUMN, F.lit(0)).unionByName(
            validation_df.select(*feed.columns).withColumn(SPLIT_COLUMN, F.lit(1))
        )
    n = len(roles)
    if validation_df is None and len(feed_order(roles)) == n and round_robin_partitions(data) == n:
        log.info(
            "feed: the DataFrame is already dealt out round-robin into %d partitions, one per node: no layout shuffle",
            n,
        )
        return data
    keys = partition_keys(n)
    targets = [keys[r.executor_id] for r in feed_order(roles)]
    data = data.withColumn(ROW_COLUMN, F.monotonically_increasing_id())
    pick = (F.pmod(F.col(ROW_COLUMN), F.lit(len(targets))) + 1).cast("int")
    node = F.element_at(F.array(*[F.lit(k) for k in targets]), pick)
    # The node and row columns stay: dropping them would make Spark copy every (possibly wide) row once more
    # after the shuffle; the spill keeps only the fed columns anyway. Sorted by the row's number within each
    # node's partition: the shuffle hands blocks over in no set order, and a node's rows must come in the same
    # order on every attempt for a resumed epoch to skip exactly the batches trained (fit_resumable).
    return data.withColumn(NODE_COLUMN, node).repartition(n, NODE_COLUMN).sortWithinPartitions(ROW_COLUMN)


def round_robin_partitions(df) -> int | None:
    """How many partitions ``df``'s rows were dealt out into round-robin (``df.repartition(n)``, cached or not,
    followed by per-row operators only); None for any other layout."""
    try:
        plan = df._jdf.queryExecution().executedPlan()
        if plan.getClass().getSimpleName() == "AdaptiveSparkPlanExec":  # not run yet: its plan as planned
            plan = plan.inputPlan()
        partitioning = plan.outputPartitioning()
        if partitioning.getClass().getSimpleName() != "RoundRobinPartitioning":
            return None
        return int(partitioning.numPartitions())
    except Exception as exc:  # a plan Spark cannot show here: lay the rows out as usual
        log.debug("cannot read the DataFrame's partitioning: %s", exc)
        return None


def prepare_rdd(rdd, roles: Sequence[NodeRole]):
    """Lay an RDD's rows out as one partition per TF node, round-robin over the training nodes."""
    targets = [r.executor_id for r in training_order(roles)]
    count = len(targets)

    def assign(index: int, rows: Iterable):
        for position, row in enumerate(rows):
            yield targets[(index + position) % count], row

    return rdd.mapPartitionsWithIndex(assign).partitionBy(len(roles), lambda key: key).values()


def spill_partition(batches: Iterable, node_dir: str, feed: Feed, with_validation: bool) -> dict:
    """Write this task's Arrow batches to local spill files; return each split's rows and widths."""
    import time

    import psutil
    import pyarrow.compute as pc

    me = psutil.Process()
    peak = me.memory_info().rss
    started, started_at = time.monotonic(), time.time()
    writers = {TRAIN: SpillWriter(os.path.join(node_dir, "train.arrow"), feed.columns, "training data", feed)}
    if with_validation:
        path = os.path.join(node_dir, "validation.arrow")
        writers[VALIDATION] = SpillWriter(path, feed.columns, "validation data", feed)
    try:
        for batch in batches:
            if with_validation:
                split = batch.column(SPLIT_COLUMN)
                writers[TRAIN].write(batch.filter(pc.equal(split, 0)))
                writers[VALIDATION].write(batch.filter(pc.equal(split, 1)))
            else:
                writers[TRAIN].write(batch)
            del batch
            peak = max(peak, me.memory_info().rss)
        return spill_info(writers, feed, started, started_at, peak)
    finally:
        for writer in writers.values():
            writer.abort()  # no thread or open file is left behind; the error on its way out is the one reported


def spill_info(writers: dict[str, SpillWriter], feed: Feed, started: float, started_at: float, peak: int) -> dict:
    """Close the spill writers; return each split's rows, widths, types, path, size and timing."""
    import time

    stats = {name: writer.close() for name, writer in writers.items()}
    dtypes = {name: _spilled_types(w.path, feed) if stats[name].rows else {} for name, w in writers.items()}
    seconds = time.monotonic() - started
    return {
        name: {
            "rows": s.rows,
            "order": s.order,
            "widths": s.widths,
            "sparse": sorted(s.sparse),
            "dtypes": dtypes[name],
            "path": writers[name].path,
            "bytes": s.bytes,
            "seconds": seconds,
            "started_at": started_at,
            "peak_rss_mb": peak / 2**20,
        }
        for name, s in stats.items()
    }


def plan_shares(
    infos: Sequence[dict], roles: Sequence[NodeRole], me: NodeRole, feed: Feed, direct=None
) -> tuple[dict[str, FeedShare], list[str]]:
    """Balance the nodes from everyone's spill info (indexed by executor id); return this node's shares
    and lines for the log. With ``direct`` (a :class:`~airflow_tfos.runtime.feed.direct.DirectInput`) and
    infos that say ``streamed``, each share names the node's Parquet slices instead of a spill file.

    Under parameter servers with a chief, every node's shares also describe the workers' record files
    (``FeedShare.native``), and the chief, which holds no rows, gets shares of none that say so.
    """
    order = feed_order(roles)
    native = ps_coordinated(roles)
    labels = [r.label for r in order]
    # A vector column is sparse everywhere (training and validation data, every node) if it is anywhere.
    spilled_sparse = {c for r in order for s in infos[r.executor_id]["spill"].values() for c in s.get("sparse", ())}
    sparse = frozenset(spilled_sparse - set(feed.densify))
    shares: dict[str, FeedShare] = {}
    notes: list[str] = []
    for split in (TRAIN, VALIDATION):
        if split not in infos[order[0].executor_id]["spill"]:
            continue
        what = "training data" if split == TRAIN else "validation data"
        spilled = [infos[r.executor_id]["spill"][split] for r in order]
        widths = _common_widths([s["widths"] for s in spilled], what)
        counts = [s["rows"] for s in spilled]
        # Validation rows count once each (padded rows would skew the metrics the publish gate reads), except
        # under parameter servers, where the chief schedules validation steps on whichever worker is free.
        once = split == VALIDATION and not native
        if once:
            plan = balance_once(counts, feed.batch_size, what)
        else:
            plan = balance(counts, feed.batch_size, feed.balance, what)
        notes.append(f"{what}: " + plan.describe(labels, feed.batch_size))
        if spilled[0].get("streamed"):
            notes.append(
                f"{what}: read by each node from {spilled[0]['source']} on every pass, nothing spilled: "
                + ", ".join(
                    f"{label} {s['rows']} rows in {s['slices']} row group slice(s)"
                    for label, s in zip(labels, spilled, strict=True)
                )
            )
        else:
            notes.append(
                f"{what}: read from {spilled[0].get('source', 'Spark')} once and spilled to local disk: "
                + ", ".join(
                    f"{label} {s['rows']} rows / {s['bytes'] / 2**20:.1f} MiB in {s['seconds']:.1f} s"
                    for label, s in zip(labels, spilled, strict=True)
                )
            )
        records = None
        if native:
            dtypes = next(s["dtypes"] for s in spilled if s["dtypes"])
            records = NativeShares(
                split=split,
                columns=record_columns(feed, dtypes, widths, sparse),
                rows_per_epoch=plan.steps_per_epoch * feed.batch_size,
                steps_per_worker=plan.steps_per_epoch,
                num_workers=len(order),
                feed=feed,
            )
            notes.append(
                f"{what}: parameter servers: the chief schedules {records.steps_per_epoch} steps per epoch; each "
                f"worker reads its own share as {records.record_bytes}-byte records in TensorFlow"
            )
        if me in order:
            mine = infos[me.executor_id]["spill"][split]
            streamed = {}
            if mine.get("streamed"):
                schema = mine["schema"] or next((s["schema"] for s in spilled if s["schema"]), "")
                slices = direct.slices(split, me.executor_id)
                streamed = {
                    "streamed": True,
                    "slices": slices,
                    "schema": schema,
                    "webhdfs_config": direct.webhdfs_config,
                    "order": hashlib.blake2b(repr(slices).encode(), digest_size=16).hexdigest(),
                }
            shares[split] = FeedShare(
                split=split,
                path=mine["path"],
                rows=mine["rows"],
                steps_per_epoch=plan.steps_per_epoch,
                widths=widths,
                feed=feed,
                rank=order.index(me),
                spill_seconds=mine["seconds"],
                spill_started_at=mine["started_at"],
                spill_peak_rss_mb=mine["peak_rss_mb"],
                **({"order": mine["order"]} if "order" in mine and not streamed else {}),
                native=records,
                workers=1 if native else len(order),
                once=once,
                sparse=sparse,
                **streamed,
            )
        elif records is not None and me.job_name in ("chief", "master"):
            shares[split] = FeedShare(split, "", 0, plan.steps_per_epoch, widths, feed, native=records)
    return shares, notes


def _spilled_types(path: str, feed: Feed) -> dict[str, str]:
    """Each fed column's NumPy element type in a spill file."""
    from airflow_tfos.runtime.feed.columns import element_type
    from airflow_tfos.runtime.feed.spill import spill_schema

    schema = spill_schema(path)
    return {name: element_type(schema.field(name).type).str for name in feed.columns}


def _common_widths(per_node: Sequence[dict[str, int]], what: str) -> dict[str, int]:
    merged: dict[str, int] = {}
    for widths in per_node:
        for name, width in widths.items():
            if merged.setdefault(name, width) != width:
                raise FeedConfigError(
                    f"column {name!r} of the {what} has rows of different lengths or sizes ({merged[name]} and "
                    f"{width}) on different nodes: every row must have the same number of elements"
                )
    return merged


def write_native_shares(shares: dict[str, FeedShare], node_dir: str) -> dict[str, FeedShare]:
    """On a worker of a parameter-server cluster: rewrite each spilled share as the record file its TF
    process reads (in ``node_dir``, that process's working directory), then drop the Arrow spill."""
    import time

    from airflow_tfos.runtime.feed.native import write_records
    from airflow_tfos.runtime.feed.spill import read_batches

    written = {}
    for split, share in shares.items():
        if share.native is None or not share.rows:
            written[split] = share
            continue
        started = time.monotonic()
        target = os.path.join(node_dir, share.native.file_name)
        write_records(read_batches(share.path), share.native.columns, target)
        os.remove(share.path)
        seconds = share.spill_seconds + time.monotonic() - started
        written[split] = dataclasses.replace(share, path=target, spill_seconds=seconds)
    return written
