"""Programs of the visitation matrix (tests/runtime/test_visitation_matrix.py) for one node and for
MultiWorkerMirroredStrategy: each records the row ids its replica trains on, epoch by epoch.

The ids are the rows' labels. A record is written per node as ``<args['out']>/visits-<job>-<index>.json``
(``epochs``: a list of id lists, ``run_dir``: the run directory whose events the test reads).
"""

from __future__ import annotations

import json
from pathlib import Path

#: Epochs each program records (two: a shuffle must give a new order each epoch, and every epoch every row).
EPOCHS = 2


def _record(args, ctx, epochs: list[list[int]]) -> dict:
    record = {"epochs": epochs, "run_dir": ctx.run_dir, "node": f"{ctx.job_name}:{ctx.task_index}"}
    target = Path(args["out"]) / f"visits-{ctx.job_name}-{ctx.task_index}.json"
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(target)
    return record


def replica_ids(args, ctx):
    """The labels this node's replica gets through tf.distribute (MultiWorkerMirroredStrategy over the
    training nodes, one or more) in each of ``EPOCHS`` iterations of its dataset: the DataFrame feed or
    direct reads (``ctx.dataset()``), or with ``args['pattern']`` its share of Parquet files
    (``ctx.shard_files`` and ``parquet_dataset``, InputMode.TENSORFLOW)."""
    import tensorflow as tf

    from airflow_tfos.runtime.feed import Feed
    from airflow_tfos.runtime.feed.files import parquet_dataset

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if args.get("pattern"):
        feed = Feed(features="x", label="id", batch_size=args["batch_size"], shuffle=args["shuffle"])
        dataset = parquet_dataset(ctx.shard_files(args["pattern"]), feed, workers=ctx.num_workers)
    else:
        dataset = ctx.dataset()
    distributed = strategy.experimental_distribute_dataset(dataset)
    epochs = []
    for _ in range(EPOCHS):
        seen = []
        for batch in distributed:  # a new pass of the dataset each time: what fit's epochs iterate
            for part in strategy.experimental_local_results(batch[1]):
                seen.extend(int(i) for i in part.numpy().reshape(-1))
        epochs.append(seen)
    return _record(args, ctx, epochs)


def datafeed_ids(args, ctx):
    """TFoS: the labels ``TFNode.DataFeed`` hands this node, batch after batch until ``should_stop()``, as one
    stream (``TFCluster.train`` feeds ``num_epochs`` passes through it)."""
    from airflow_tfos.runtime.compat import TFNode

    feed = TFNode.DataFeed(ctx.mgr, True)
    seen = []
    while not feed.should_stop():
        batch = feed.next_batch(args["batch_size"])
        seen.extend(int(row[1]) for row in batch)
    return _record(args, ctx, [seen])
