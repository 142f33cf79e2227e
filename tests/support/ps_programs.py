"""ParameterServerStrategy programs run on TF nodes by tests/integration/spark/test_ps_feed.py.

The layout is docs/native-api.md's: parameter servers and workers serve (``tf.distribute.Server(...).join()``),
the chief builds the strategy and a ``ClusterCoordinator`` and schedules the steps.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

#: Written by each worker into its working directory, and read there by the data pipeline.
PID_FILE = "pid.txt"


def _write(ctx, name: str, record: dict) -> None:
    target = Path(ctx.run_dir) / f"{name}-{ctx.job_name}-{ctx.task_index}.json"
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(target)


def _serve(ctx) -> None:
    """Record this node's pid (in the run directory and in its working directory), then serve."""
    import tensorflow as tf

    if ctx.job_name == "worker":  # a worker under parameter servers runs in its own node directory
        Path(PID_FILE).write_text(str(os.getpid()))
    if ctx.run_dir:
        _write(ctx, "node", {"pid": os.getpid(), "cwd": os.getcwd()})
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=ctx.job_name, task_index=ctx.task_index, protocol="grpc", start=True
    )
    server.join()


def _coordinator():
    import tensorflow as tf

    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver()
    )
    return strategy, tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)


def ps_unfed(args, ctx):
    """A few PS steps on no data; the chief returns the time it returned."""
    import tensorflow as tf

    if ctx.job_name in ("ps", "worker"):
        _serve(ctx)
        return None
    strategy, coordinator = _coordinator()
    with strategy.scope():
        total = tf.Variable(0.0)

    @tf.function
    def step():
        total.assign_add(1.0)

    for _ in range(args.get("steps", 10)):
        coordinator.schedule(step)
    coordinator.join()
    return {"total": float(total.numpy()), "returned_at": time.time()}


def ps_count_ids(args, ctx):
    """Count, in a variable on the parameter server, how often each fed id is trained on, epoch by epoch.

    The chief takes batches with ``get_next_as_optional`` from ``ctx.epoch_dataset_fn``, scheduling steps
    until it has seen ``ctx.steps_per_epoch`` batches. Each batch carries the pid of the process whose
    pipeline produced it (read from that process's working directory by ``tf.io.read_file``).
    """
    if ctx.job_name in ("ps", "worker"):
        _serve(ctx)
        return None
    strategy, coordinator = _coordinator()
    epochs = _count_ids(strategy, coordinator, args, ctx.epoch_dataset_fn, ctx.steps_per_epoch)
    return {
        "epochs": epochs,
        "steps_per_epoch": ctx.steps_per_epoch,
        "chief_pid": os.getpid(),
        "chief_rows": ctx.feed_shares["train"].rows,
        "returned_at": time.time(),
    }


def ps_count_file_ids(args, ctx):
    """InputMode.TENSORFLOW under parameter servers: as :func:`ps_count_ids`, on ids read from TFRecord files
    (one id as text per record) with ``ctx.worker_files``, each worker reading its own files."""
    import tensorflow as tf

    if ctx.job_name in ("ps", "worker"):
        _serve(ctx)
        return None
    strategy, coordinator = _coordinator()
    files = ctx.worker_files(args["pattern"])

    def read(names):
        ids = tf.data.TFRecordDataset(names).map(lambda record: tf.strings.to_number(record, tf.int64))
        return ids.batch(args["batch_size"]).map(lambda ids: (tf.cast(ids, tf.float64)[:, None], ids))

    steps = files.steps_per_epoch(read)
    epochs = _count_ids(strategy, coordinator, args, files.epoch_dataset_fn(read), steps)
    return {
        "epochs": epochs,
        "steps_per_epoch": steps,
        "steps_by_worker": files.steps_by_worker(read),
        "shares": files.shares,
        "chief_pid": os.getpid(),
        "returned_at": time.time(),
    }


def _count_ids(strategy, coordinator, args, epoch_dataset_fn, steps_per_epoch: int) -> list[dict]:
    """Schedule steps over batches of ``(x, ids)`` until ``steps_per_epoch`` batches were trained on, epoch
    by epoch; count the ids in a variable on the parameter server."""
    import tensorflow as tf

    with strategy.scope():
        counts = tf.Variable(tf.zeros([args["max_id"] + 1], tf.int32))

    def dataset_fn(input_context=None):
        batches = epoch_dataset_fn(input_context)
        return batches.map(lambda x, ids: (x, ids, tf.io.read_file(PID_FILE)))

    per_worker = coordinator.create_per_worker_dataset(dataset_fn)

    @tf.function
    def step(iterator):
        batch = iterator.get_next_as_optional()

        def train():
            x, ids, pid = batch.get_value()
            counts.scatter_nd_add(tf.expand_dims(ids, 1), tf.ones_like(ids, tf.int32))
            return tf.constant(1), pid, tf.reduce_sum(tf.cast(x[:, 0], tf.int64) - ids)

        def nothing():
            return tf.constant(0), tf.constant(""), tf.constant(0, tf.int64)

        return tf.cond(batch.has_value(), train, nothing)

    epochs = []
    for _ in range(args.get("epochs", 2)):
        iterator = iter(per_worker)
        batches, pids, mismatch, scheduled = 0, {}, 0, 0
        while batches < steps_per_epoch:
            results = [coordinator.schedule(step, args=(iterator,)) for _ in range(steps_per_epoch - batches)]
            scheduled += len(results)
            coordinator.join()
            for result in results:
                got, pid, diff = result.fetch()
                batches += int(got)
                mismatch += int(diff)
                if got:
                    pids[pid.decode()] = pids.get(pid.decode(), 0) + 1
        values = counts.numpy()
        epochs.append(
            {
                "batches": batches,
                "scheduled": scheduled,
                "batches_by_pid": pids,
                "x_id_mismatch": mismatch,
                "trained": {str(i): int(c) for i, c in enumerate(values) if c},
            }
        )
    return epochs


def ps_keras_fit(args, ctx):
    """Keras ``fit`` under ParameterServerStrategy on the fed data, with validation data."""
    import tensorflow as tf

    if ctx.job_name in ("ps", "worker"):
        _serve(ctx)
        return None
    strategy, _ = _coordinator()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(args.get("lr", 0.1)), loss="mse")
    creator = tf.keras.utils.experimental.DatasetCreator
    history = model.fit(
        creator(ctx.dataset_fn),
        epochs=args.get("epochs", 5),
        steps_per_epoch=ctx.steps_per_epoch,
        validation_data=creator(ctx.validation_dataset_fn),
        validation_steps=ctx.validation_steps,
        verbose=0,
    )
    kernel, bias = model.get_weights()
    return {
        "loss": history.history["loss"],
        "val_loss": history.history.get("val_loss"),
        "kernel": kernel.ravel().tolist(),
        "bias": bias.tolist(),
        "steps_per_epoch": ctx.steps_per_epoch,
        "validation_steps": ctx.validation_steps,
        "returned_at": time.time(),
    }


def ps_keras_fit_files(args, ctx):
    """Keras ``fit`` under ParameterServerStrategy on ``tf.train.Example`` TFRecord files read by the workers
    (``ctx.worker_files``)."""
    import tensorflow as tf

    if ctx.job_name in ("ps", "worker"):
        _serve(ctx)
        return None
    strategy, _ = _coordinator()
    files = ctx.worker_files(args["pattern"])
    spec = {"x": tf.io.FixedLenFeature([2], tf.float32), "y": tf.io.FixedLenFeature([1], tf.float32)}

    def read(names):
        def parse(records):
            example = tf.io.parse_example(records, spec)
            return example["x"], example["y"]

        return tf.data.TFRecordDataset(names).batch(32).map(parse)

    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    steps = files.steps_per_epoch(read)
    history = model.fit(
        tf.keras.utils.experimental.DatasetCreator(files.dataset_fn(read)),
        epochs=args.get("epochs", 5),
        steps_per_epoch=steps,
        verbose=0,
    )
    kernel, bias = model.get_weights()
    return {
        "loss": history.history["loss"],
        "kernel": kernel.ravel().tolist(),
        "bias": bias.tolist(),
        "steps_per_epoch": steps,
        "returned_at": time.time(),
    }


def ps_mixed_types(args, ctx):
    """Strings, ragged arrays and sparse vectors under parameter servers: each step, on a worker, reduces its
    batch's rows (a string's length, a ragged row's sum, a sparse row's dot product with 1..size) into
    variables on the parameter server, indexed by the row's id; the chief returns them for one epoch."""
    import tensorflow as tf

    if ctx.job_name in ("ps", "worker"):
        _serve(ctx)
        return None
    strategy, coordinator = _coordinator()
    size, rows = args["size"], args["rows"]
    with strategy.scope():
        seen = tf.Variable(tf.zeros([rows], tf.int32))
        lengths = tf.Variable(tf.zeros([rows], tf.int32))
        sums = tf.Variable(tf.zeros([rows], tf.float32))
        dots = tf.Variable(tf.zeros([rows], tf.float32))
    weights = tf.range(1, size + 1, dtype=tf.float32)[:, None]
    per_worker = coordinator.create_per_worker_dataset(ctx.epoch_dataset_fn)

    @tf.function
    def step(iterator):
        batch = iterator.get_next_as_optional()  # a worker whose share is done yields nothing

        def reduce():
            x, ids = batch.get_value()
            where = tf.expand_dims(tf.cast(ids, tf.int32), 1)
            seen.scatter_nd_update(where, tf.ones_like(where[:, 0]))
            lengths.scatter_nd_update(where, tf.strings.length(x["s"]))
            sums.scatter_nd_update(where, tf.reduce_sum(x["r"], axis=1))
            dots.scatter_nd_update(where, tf.sparse.sparse_dense_matmul(x["v"], weights)[:, 0])
            return tf.constant(1)

        return tf.cond(batch.has_value(), reduce, lambda: tf.constant(0))

    iterator = iter(per_worker)
    batches = 0
    while batches < ctx.steps_per_epoch:
        results = [coordinator.schedule(step, args=(iterator,)) for _ in range(ctx.steps_per_epoch - batches)]
        coordinator.join()
        batches += sum(int(result.fetch()) for result in results)
    found = seen.numpy().astype(bool)
    return {
        "ids": [int(i) for i in found.nonzero()[0]],
        "lengths": lengths.numpy()[found].tolist(),
        "sums": sums.numpy()[found].tolist(),
        "dots": dots.numpy()[found].tolist(),
        "returned_at": time.time(),
    }


def ps_checkpointed(args, ctx):
    """Keras ``fit`` under parameter servers through :func:`fit_resumable`, with a :class:`RunCheckpointer`
    saving every args['every'] steps.

    The chief records the model's weights (variables on the parameter server) as each checkpoint is
    saved (``saved-a<attempt>-s<step>-chief-0.json``) and as each attempt restored them
    (``restored<attempt>-chief-0.json``), and sleeps args['sleep'] seconds after scheduling each step,
    so that a test can kill a node mid-run.
    """
    import tensorflow as tf

    from airflow_tfos.runtime.program.checkpoint import RunCheckpointer, fit_resumable

    if ctx.job_name in ("ps", "worker"):
        _serve(ctx)
        return None
    strategy, _ = _coordinator()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")

    def weights() -> list:
        return [w.ravel().tolist() for w in model.get_weights()]

    class RecordingCheckpointer(RunCheckpointer):
        def _save(self, step, epoch, in_epoch=None):
            # Read before the checkpoint is published: the test kills the parameter server as soon as it sees the
            # checkpoint, and reading the variables after that would find no parameter server. save() has joined
            # the steps in flight, so no step runs between this read and the save.
            record = {"attempt": ctx.attempt, "step": step, "weights": weights()}
            super()._save(step, epoch, in_epoch)
            _write(ctx, f"saved-a{ctx.attempt}-s{step}", record)

    class Throttle(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self._supports_tf_logs = True

        def on_train_batch_end(self, batch, logs=None):
            time.sleep(args["sleep"])

    checkpointer = RecordingCheckpointer(ctx, model=model, every_steps=args["every"])
    start = checkpointer.restore()
    iterations = int(model.optimizer.iterations.numpy())
    _write(ctx, f"restored{ctx.attempt}", {"step": start, "iterations": iterations, "weights": weights()})
    fit_resumable(
        model,
        tf.keras.utils.experimental.DatasetCreator(ctx.dataset_fn),
        epochs=args["epochs"],
        steps_per_epoch=ctx.steps_per_epoch,
        checkpointer=checkpointer,
        callbacks=[Throttle()],
        verbose=0,
    )
    kernel, bias = model.get_weights()
    return {
        "step": int(model.optimizer.iterations.numpy()),
        "attempt": ctx.attempt,
        "steps_per_epoch": ctx.steps_per_epoch,
        "kernel": kernel.ravel().tolist(),
        "bias": bias.tolist(),
        "returned_at": time.time(),
    }
