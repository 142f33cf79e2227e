"""Programs of the visitation matrix (tests/integration/spark/test_visitation_matrix.py) for one node and for
MultiWorkerMirroredStrategy: each records the row ids its replica trains on, epoch by epoch.

The ids are the rows' labels. A record is written per node as ``<args['out']>/visits-<job>-<index>.json``
(``epochs``: a list of id lists, ``run_dir``: the run directory whose events the test reads).
"""

from __future__ import annotations

import json
import os
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

    from airflow_tfos.runtime.feed.files import parquet_dataset
    from airflow_tfos.shared.feed import Feed

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


def resumed_counts(args, ctx):
    """``fit_resumable`` on one node over ``ctx.dataset()``, a model that counts, in a variable saved with its
    checkpoints, how often each id was trained on. With ``args['crash_at']`` attempt 0 dies once its step
    reaches it (after a checkpoint, mid-epoch); the next attempt resumes from the checkpoint. Returns the counts."""
    import tensorflow as tf

    from airflow_tfos.runtime.program.checkpoint import RunCheckpointer, fit_resumable

    max_id = args["max_id"]

    class Counting(tf.keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = tf.keras.layers.Dense(1)
            self.counts = self.add_weight(
                name="counts", shape=(max_id,), initializer="zeros", dtype="int32", trainable=False
            )

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            x, ids = data
            ids = tf.cast(tf.reshape(ids, [-1]), tf.int32)
            self.counts.assign_add(tf.math.bincount(ids, minlength=max_id, maxlength=max_id, dtype=tf.int32))
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self(x, training=True)))
            variables = self.dense.trainable_variables
            self.optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
            return {"loss": loss}

    model = Counting()
    model(tf.zeros([1, 1], tf.float64))
    model.compile(optimizer=tf.keras.optimizers.SGD(0.001))
    checkpointer = RunCheckpointer(ctx, model=model, every_steps=args["every"])

    class Crash(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if ctx.attempt == 0 and args.get("crash_at") and checkpointer.step >= args["crash_at"]:
                os._exit(3)  # as a lost node: no save, no clean end

    fit_resumable(
        model,
        ctx.dataset(),
        epochs=args["epochs"],
        steps_per_epoch=ctx.steps_per_epoch,
        checkpointer=checkpointer,
        callbacks=[Crash()],
        verbose=0,
    )
    return {"counts": model.counts.numpy().tolist(), "attempt": ctx.attempt, "step": checkpointer.step}
