"""Handwritten digits (scikit-learn's 8x8 digits, shipped inside the package) on N TF workers.

Two training functions:

- :func:`main_fun` (what ``make`` runs without Airflow): each training node loads the digits itself
  and takes its own shard of the training split; MultiWorkerMirroredStrategy keeps the replicas in
  step with a synchronous all-reduce; each replica trains ``batch_size`` rows of its own shard per
  step, as on the fed path, so an epoch is one pass over every shard; the chief evaluates on the
  held-out split.
- :func:`train_fed` (what the example DAGs run): the data is fed from Spark (``InputMode.SPARK``),
  training checkpoints to the run directory and resumes from it, starts from the model in service
  when there is one (warm start), scores that model and the new one on the same held-out data, and
  exports the new one with both accuracies.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass

log = logging.getLogger(__name__)


@dataclass
class DigitsArgs:
    """Training settings.

    :param epochs: passes over each worker's shard.
    :param batch_size: examples per worker (replica) per step.
    :param learning_rate: Adam's learning rate.
    :param hidden_units: width of the hidden layer.
    :param test_fraction: share of the data held out for the test accuracy.
    :param seed: seeds the split and the initial weights.
    :param checkpoint_every: (:func:`train_fed`) publish a checkpoint every this many steps.
    :param fine_tune_learning_rate: (:func:`train_fed`) Adam's learning rate when starting from a trained
        model (a warm start): smaller, so a day's data refines the model instead of overwriting it.
    """

    epochs: int = 30
    batch_size: int = 32
    learning_rate: float = 0.003
    hidden_units: int = 64
    test_fraction: float = 0.2
    seed: int = 42
    checkpoint_every: int = 20
    fine_tune_learning_rate: float = 0.001


def load_split(test_fraction: float, seed: int):
    """Return ``(x_train, y_train, x_test, y_test)`` as float32 / int32 arrays scaled to [0, 1]."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=test_fraction, random_state=seed, stratify=y)
    return x_train, y_train, x_test, y_test


def build_model(args: DigitsArgs, metrics: tuple = ()):
    """The digits classifier, compiled with Adam and accuracy (and ``metrics``)."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(args.seed)
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(64,)),
            tf.keras.layers.Dense(args.hidden_units, activation="relu"),
            tf.keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.Adam(args.learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy", *metrics],
    )
    return model


def rows_per_replica(replicas: int):
    """A Keras metric: the rows each replica has trained on since the metric was reset (each epoch), one
    count per replica by its id in the sync group."""
    import tensorflow as tf

    class RowsPerReplica(tf.keras.metrics.Metric):
        def __init__(self, name="rows_per_replica", **kwargs):
            super().__init__(name=name, **kwargs)
            self.rows = self.add_weight(name="rows", shape=(replicas,), initializer="zeros")

        def update_state(self, y_true, y_pred, sample_weight=None):
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            rows = tf.cast(tf.shape(y_true)[0], self.dtype)
            self.rows.assign_add(tf.one_hot(replica, replicas, dtype=self.dtype) * rows)

        def result(self):
            return tf.identity(self.rows)

        def reset_state(self):
            self.rows.assign(tf.zeros_like(self.rows))

    return RowsPerReplica()


def main_fun(args: DigitsArgs | dict | None, ctx) -> dict:
    """Train on this node's shard with MultiWorkerMirroredStrategy; the chief returns the metrics.

    Each step gives every replica ``batch_size`` rows of its own node's shard (its batches laid out for
    tf.distribute by :func:`~airflow_tfos.runtime.feed.dataset.for_workers`, as the fed path does), and an
    epoch is one pass over every shard: ``rows_per_replica`` holds, epoch by epoch, the rows each
    replica trained on.
    """
    import numpy as np
    import tensorflow as tf

    from airflow_tfos.runtime.feed.dataset import for_workers

    if not isinstance(args, DigitsArgs):
        args = DigitsArgs(**(args or {}))
    started = time.monotonic()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    x_train, y_train, x_test, y_test = load_split(args.test_fraction, args.seed)
    rank = ctx.training_rank
    x_shard, y_shard = x_train[rank :: ctx.num_workers], y_train[rank :: ctx.num_workers]
    # One pass over the largest shard; a node whose shard has a batch fewer starts its next pass early.
    steps = int(np.ceil(np.ceil(len(x_train) / ctx.num_workers) / args.batch_size))
    batches = (
        tf.data.Dataset.from_tensor_slices((x_shard, y_shard))
        .shuffle(len(x_shard), seed=args.seed + rank)
        .batch(args.batch_size)
        .repeat()
    )
    dataset = for_workers(batches, ctx.num_workers)
    with strategy.scope():
        model = build_model(args, metrics=(rows_per_replica(strategy.num_replicas_in_sync),))
    history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=steps, verbose=0)
    accuracy = model.evaluate(x_test, y_test, verbose=0, return_dict=True)["accuracy"]
    log.info("node %s:%d test accuracy %.4f", ctx.job_name, ctx.task_index, accuracy)
    return {
        "test_accuracy": float(accuracy),
        "final_loss": float(history.history["loss"][-1]),
        "epochs": args.epochs,
        "steps_per_epoch": steps,
        "workers": ctx.num_workers,
        "train_examples": len(x_train),
        "rows_per_replica": [
            np.asarray(rows).round().astype(int).tolist() for rows in history.history["rows_per_replica"]
        ],
        "seconds": time.monotonic() - started,
        "args": asdict(args),
    }


def train_single_process(args: DigitsArgs | None = None) -> float:
    """Train the same model in one process on the whole training split; return its test accuracy."""
    import tensorflow as tf

    args = args or DigitsArgs()
    x_train, y_train, x_test, y_test = load_split(args.test_fraction, args.seed)
    model = build_model(args)
    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train), seed=args.seed)
    model.fit(dataset.batch(args.batch_size), epochs=args.epochs, verbose=0)
    return float(model.evaluate(x_test, y_test, verbose=0)[1])


def train_fed(args: DigitsArgs | dict | None, ctx) -> dict:
    """Train on the digits fed from Spark (``pixels``, ``label``); checkpoint, warm-start, evaluate, export.

    The spec feeds the day's training data as ``data`` and the held-out split as ``validation_data``.
    Metrics of the export: ``test_accuracy`` and ``test_loss`` of the new model on the held-out data,
    and, after a warm start, ``baseline_test_accuracy``: the starting model (the one in service) on the
    same data, measured before the first step. A retry that resumes from a checkpoint takes the
    baseline recorded by the try that measured it.
    """
    import tensorflow as tf

    from airflow_tfos.runtime import RunCheckpointer, export_model, fit_resumable
    from airflow_tfos.shared.rundir import RunDir

    if not isinstance(args, DigitsArgs):
        args = DigitsArgs(**(args or {}))
    started = time.monotonic()
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_model(args)
    checkpointer = RunCheckpointer(ctx, model=model, every_steps=args.checkpoint_every)
    start = checkpointer.restore()
    validation = ctx.validation_dataset()
    if validation is None:
        raise ValueError("train_fed evaluates on the held-out split: feed it as validation_data")
    rundir = RunDir(ctx.run_dir)
    baseline = None
    if start == 0 and checkpointer.warm_started:
        _, baseline = model.evaluate(validation, steps=ctx.validation_steps, verbose=0)
        if ctx.is_chief:
            rundir.add_event("baseline", test_accuracy=float(baseline), model=checkpointer.warm_started)
        log.info("the warm-start model scores %.4f on the held-out data", baseline)
    elif start > 0:
        recorded = rundir.events("baseline")
        baseline = recorded[-1]["test_accuracy"] if recorded else None
    if baseline is not None:  # a warm start (or a resume of one): fine-tune
        model.optimizer.learning_rate = args.fine_tune_learning_rate
    fit_resumable(
        model,
        ctx.dataset(),
        epochs=args.epochs,
        steps_per_epoch=ctx.steps_per_epoch,
        checkpointer=checkpointer,
        verbose=0,
    )
    loss, accuracy = model.evaluate(validation, steps=ctx.validation_steps, verbose=0)
    metrics = {
        "test_accuracy": float(accuracy),
        "test_loss": float(loss),
        "train_rows_per_worker": int(ctx.feed_shares["train"].rows),
        "warm_start": checkpointer.warm_started,
        "seconds": round(time.monotonic() - started, 1),
    }
    if baseline is not None:
        metrics["baseline_test_accuracy"] = float(baseline)
    export_model(ctx, model, metrics=metrics)
    log.info("node %s:%d test accuracy %.4f", ctx.job_name, ctx.task_index, accuracy)
    return metrics
