"""Training programs run on TF nodes by the integration tests (imported by module path on executors)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def _write(ctx, name: str, record: dict) -> None:
    target = Path(ctx.run_dir) / f"{name}-{ctx.job_name}-{ctx.task_index}.json"
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(target)


def report_context(args, ctx):
    """Record what the node sees; return the same from the chief."""
    record = {
        "executor_id": ctx.executor_id,
        "worker_num": ctx.worker_num,
        "job_name": ctx.job_name,
        "task_index": ctx.task_index,
        "cluster_spec": ctx.cluster_spec,
        "num_workers": ctx.num_workers,
        "is_chief": ctx.is_chief,
        "host": ctx.host,
        "port": ctx.port,
        "defaultFS": ctx.defaultFS,
        "working_dir": ctx.working_dir,
        "absolute": ctx.absolute_path("data/x"),
        "tf_config": os.environ.get("TF_CONFIG"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "legacy_keras": os.environ.get("TF_USE_LEGACY_KERAS"),
        "pid": os.getpid(),
        "args": args,
    }
    if ctx.run_dir:
        _write(ctx, "context", record)
        if ctx.is_chief:  # the run ends when the chief returns: let every node's record land first (60 s at most)
            nodes = sum(len(hosts) for hosts in ctx.cluster_spec.values())
            deadline = time.monotonic() + 60
            while len(list(Path(ctx.run_dir).glob("context-*.json"))) < nodes and time.monotonic() < deadline:
                time.sleep(0.2)
    if ctx.job_name in ("ps", "evaluator"):
        time.sleep(3600)  # a service node runs until the training nodes are done
    return record


def fail_on(args, ctx):
    """Raise on the node named by args['job']/args['index']; the others sleep until killed."""
    if ctx.job_name == args["job"] and ctx.task_index == args["index"]:
        raise ValueError(f"boom from {ctx.job_name}:{ctx.task_index}")
    time.sleep(args.get("others_sleep", 600))
    return "not reached"


def sleep_forever(args, ctx):
    """Write this node's pid to the run directory, then sleep."""
    _write(ctx, "pid", {"pid": os.getpid()})
    time.sleep(3600)


def mwms_keras(args, ctx):
    """Train a small Keras model with MultiWorkerMirroredStrategy; record each worker's final weights."""
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(ctx.task_index + (100 if ctx.job_name == "worker" else 0))
    x = rng.normal(size=(256, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
    per_worker_batch = 16
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(per_worker_batch).repeat()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = dataset.with_options(options)
    with strategy.scope():
        tf.keras.utils.set_random_seed(7)
        model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(8), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    history = model.fit(dataset, epochs=args.get("epochs", 2), steps_per_epoch=args.get("steps", 10), verbose=0)
    weights = [w.tolist() for w in model.get_weights()]
    record = {"loss": history.history["loss"], "weights": weights, "keras": tf.keras.__name__}
    _write(ctx, "weights", record)
    return record


def ps_strategy(args, ctx):
    """ParameterServerStrategy: ps and workers serve; the chief coordinates training."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if ctx.job_name in ("ps", "worker"):
        server = tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=ctx.job_name,
            task_index=ctx.task_index,
            protocol="grpc",
            start=True,
        )
        server.join()
        return None
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        weight = tf.Variable(0.0)
        optimizer = tf.keras.optimizers.SGD(0.1)

    def dataset_fn():
        return tf.data.Dataset.from_tensors((tf.constant(2.0), tf.constant(6.0))).repeat()

    per_worker_dataset = coordinator.create_per_worker_dataset(dataset_fn)
    per_worker_iterator = iter(per_worker_dataset)

    @tf.function
    def step(iterator):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                loss = (weight * x - y) ** 2
            grads = tape.gradient(loss, [weight])
            optimizer.apply_gradients(zip(grads, [weight], strict=True))
            return loss

        x, y = next(iterator)
        return strategy.run(replica_step, args=(x, y))

    steps = args.get("steps", 20)
    for _ in range(steps):
        coordinator.schedule(step, args=(per_worker_iterator,))
    coordinator.join()
    return {"weight": float(weight.numpy()), "steps": steps, "ps_devices": len(ctx.cluster_spec["ps"])}


def mwms_keras3_custom_loop(args, ctx):
    """Keras 3 layers and optimizer under MultiWorkerMirroredStrategy with a custom training loop."""
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import keras

    rng = np.random.default_rng(ctx.training_rank)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
    with strategy.scope():
        keras.utils.set_random_seed(7)
        model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
        optimizer = keras.optimizers.SGD(0.05)

    @tf.function
    def train_step(xb, yb):
        def replica_step(xr, yr):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(xr, training=True) - yr) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        per_replica = strategy.run(replica_step, args=(xb, yb))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)

    losses = [float(train_step(tf.constant(x), tf.constant(y))) for _ in range(args.get("steps", 20))]
    record = {
        "loss": losses,
        "weights": [w.tolist() for w in model.get_weights()],
        "keras": keras.__version__,
    }
    _write(ctx, "weights", record)
    return record


def die_by_signal(args, ctx):
    """The chief prints a line and is killed by SIGKILL (as the OOM killer would); others sleep."""
    import signal
    import sys

    if ctx.job_name == "chief":
        sys.stderr.write("chief about to be killed\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)


def _replica_rows_and_fit_steps(make_dataset) -> tuple[list, list[int], list[int]]:
    """Under MultiWorkerMirroredStrategy: the labels this node's replica gets from ``make_dataset()`` through
    tf.distribute in one pass, the size of each of its batches, and the steps Keras ``fit`` runs in each of
    two epochs on it."""
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    seen, sizes = [], []
    for batch in strategy.experimental_distribute_dataset(make_dataset()):  # what fit's steps are given
        for part in strategy.experimental_local_results(batch[1]):
            seen.extend(part.numpy().tolist())
            sizes.append(int(part.shape[0]))
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(1e-6), loss="mse")
    steps = []

    class Count(tf.keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            steps.append(0)

        def on_train_batch_end(self, batch, logs=None):
            steps[-1] += 1

    model.fit(make_dataset(), epochs=2, callbacks=[Count()], verbose=0)
    return seen, sizes, steps


def mwms_rows_seen(args, ctx):
    """Under MultiWorkerMirroredStrategy: the labels (row ids) this node's replica gets from ``ctx.dataset()``
    through tf.distribute in one epoch, and the steps Keras ``fit`` runs per epoch; recorded per node."""
    seen, sizes, steps = _replica_rows_and_fit_steps(ctx.dataset)
    record = {"seen": seen, "sizes": sizes, "fit_steps": steps, "steps_per_epoch": ctx.steps_per_epoch}
    _write(ctx, "seen", record)
    return record


def feed_keras(args, ctx):
    """Train a Keras model on the DataFrame fed from Spark; record what this node saw."""
    import tensorflow as tf

    if ctx.job_name in ("ps", "evaluator"):
        time.sleep(3600)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    dataset = ctx.dataset()
    validation = ctx.validation_dataset()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(args.get("width", 2),)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(args.get("lr", 0.05)), loss="mse")
    callbacks = []
    if args.get("stop_after_batches"):
        limit = args["stop_after_batches"]

        class StopAfter(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if batch + 1 >= limit:
                    self.model.stop_training = True

        callbacks.append(StopAfter())
    history = model.fit(
        dataset,
        epochs=args.get("epochs", 2),
        validation_data=validation,
        callbacks=callbacks,
        verbose=0,
    )
    share = ctx.feed_shares["train"]
    record = {
        "steps_per_epoch": ctx.steps_per_epoch,
        "validation_steps": ctx.validation_steps,
        "rows": share.rows,
        "loss": history.history["loss"],
        "val_loss": history.history.get("val_loss"),
        "weights": [w.tolist() for w in model.get_weights()],
    }
    _write(ctx, "feed", record)
    return record


def feed_shapes(args, ctx):
    """Walk this node's fed data for two epochs with ctx.batches(); record shapes, dtypes and counts."""
    if ctx.job_name in ("ps", "evaluator"):
        record = {"has_feed": bool(ctx.feed_shares)}
        _write(ctx, "shapes", record)
        time.sleep(3600)
    epochs = []
    for epoch in range(2):
        rows, first = 0, None
        for x, y in ctx.batches(epoch=epoch):
            if first is None:
                first = x
            rows += len(y)
        epochs.append(rows)
    if isinstance(first, dict):
        shapes = {k: [list(v.shape), str(v.dtype)] for k, v in first.items()}
    else:
        shapes = [list(first.shape), str(first.dtype)]
    record = {"has_feed": True, "epoch_rows": epochs, "steps": ctx.steps_per_epoch, "shapes": shapes}
    _write(ctx, "shapes", record)
    return record


def export_linear_model(args, ctx):
    """Export a Keras model computing x . [3, -2] + 1 (weights set, not trained) as a SavedModel."""
    import numpy as np
    import tensorflow as tf

    from airflow_tfos.runtime.compat import compat

    model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(args.get("units", 1))])
    units = args.get("units", 1)
    model.set_weights([np.tile(np.array([[3.0], [-2.0]], dtype="float32"), (1, units)), np.ones(units, "float32")])
    compat.export_saved_model(model, args["export_dir"], ctx.is_chief)
    return args["export_dir"]


def tf_mode_files(args, ctx):
    """InputMode.TENSORFLOW: read this node's share of Parquet/CSV files; record what it read."""
    from airflow_tfos.runtime.feed.files import csv_dataset, parquet_dataset
    from airflow_tfos.shared.feed import Feed

    files = ctx.shard_files(args["pattern"])
    feed = Feed(features=["a", "b"], label="y", batch_size=10)
    reader = parquet_dataset if args["format"] == "parquet" else csv_dataset
    rows, ids = 0, []
    for x, y in reader(files, feed):
        rows += len(y)
        ids.extend(int(v) for v in x["a"].numpy())
    record = {"files": files, "rows": rows, "ids": ids}
    _write(ctx, "files", record)
    return record


def recoverable_training(args, ctx):
    """MWMS Keras training with checkpoints every args['every'] steps, resumable after a lost node.

    Each node records its progress (global step, attempt, pid) after every step, and sleeps a little so
    that a test can kill something mid-training.
    """
    import numpy as np
    import tensorflow as tf

    from airflow_tfos.runtime import RunCheckpointer, export_model, fit_resumable

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    steps, batch = args["steps_per_epoch"], 8
    rng = np.random.default_rng(ctx.training_rank)
    x = rng.normal(size=(steps * batch, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True).with_options(options)
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    checkpointer = RunCheckpointer(ctx, model=model, every_steps=args["every"])
    progress = Path(ctx.run_dir) / f"progress-{ctx.job_name}-{ctx.task_index}.json"
    record_progress = args.get("progress", True)  # False for remote run directories (not a local path)

    class Progress(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch_index, logs=None):
            record = {"step": checkpointer.step, "attempt": ctx.attempt, "pid": os.getpid(), "time": time.time()}
            tmp = progress.with_suffix(".tmp")
            tmp.write_text(json.dumps(record))
            tmp.replace(progress)
            time.sleep(args.get("sleep", 0.2))

    callbacks = [Progress()] if record_progress else []  # fit_resumable adds progress_callback itself
    if args.get("freeze"):  # one node stops its executor's JVM and trains on (the end watch's drill)
        from tests.integration.hadoop.dags.lab_training import drill_callbacks

        callbacks += drill_callbacks(args, ctx, checkpointer)
    slow_at, slow_secs = args.get("slow_save_at"), args.get("slow_save_secs", 0)
    if slow_at and ctx.is_chief and ctx.attempt == 0:  # one save made slower than stall_timeout
        save = checkpointer._save

        def slow_save(step, epoch, in_epoch=None):
            if step == slow_at:
                time.sleep(slow_secs)
            save(step, epoch, in_epoch)

        checkpointer._save = slow_save
    histories = fit_resumable(
        model,
        dataset,
        epochs=args["epochs"],
        steps_per_epoch=steps,
        checkpointer=checkpointer,
        callbacks=callbacks,
        verbose=0,
    )
    loss = histories[-1].history["loss"][-1] if histories else None
    export_model(ctx, model, metrics={"loss": loss})
    return {"step": checkpointer.step, "attempt": ctx.attempt}


def spec_training(args, ctx):
    """What a spec's train_fn looks like: fed data, checkpoints, resume, export."""
    import tensorflow as tf

    from airflow_tfos.runtime import RunCheckpointer, export_model, fit_resumable

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
    checkpointer = RunCheckpointer(ctx, model=model, every_steps=args.get("every", 5))
    progress = Path(ctx.run_dir) / f"progress-{ctx.job_name}-{ctx.task_index}.json"

    class Slow(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch_index, logs=None):
            progress.write_text(json.dumps({"step": checkpointer.step}))
            time.sleep(args.get("sleep", 0))

    histories = fit_resumable(
        model,
        ctx.dataset(),
        epochs=args.get("epochs", 2),
        steps_per_epoch=ctx.steps_per_epoch,
        checkpointer=checkpointer,
        callbacks=[Slow()],
        verbose=0,
    )
    loss = histories[-1].history["loss"][-1] if histories else None
    export_model(ctx, model, metrics={"loss": loss})
    return {"step": checkpointer.step, "loss": loss}


def timed_checkpoints(args, ctx):
    """Checkpoint by time only: workers must agree on when, or MWMS would hang."""
    import numpy as np
    import tensorflow as tf

    from airflow_tfos.runtime.program.checkpoint import RunCheckpointer

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
    checkpointer = RunCheckpointer(ctx, model=model, every_steps=None, every_secs=1.0, check_every=2)
    # The workers' step times differ on purpose, so their clocks disagree about when 1 s has passed.
    delay = 0.1 if ctx.is_chief else 0.15

    class Slow(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch_index, logs=None):
            time.sleep(delay)

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    x = np.ones((32 * 8, 2), "float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(8).repeat().with_options(options)
    model.fit(dataset, epochs=1, steps_per_epoch=32, callbacks=[Slow(), checkpointer.keras_callback(32)], verbose=0)
    return checkpointer.step


def tracked_training(args, ctx):
    """fit_resumable with its progress reporting, warm start, checkpoints and export.

    Trains on the data fed from Spark when there is some, else on synthetic linear data
    (``steps_per_epoch`` batches of 8 rows of 4 columns). Records, per attempt, how training started
    (``start<attempt>-<job>-<index>.json``: restored step, warm start, weights before the first update)
    and at the end the final weights (``final-...``). ``fail_at``: on attempt 0 the worker raises a
    retryable ConnectionError once the global step reaches it.
    """
    import numpy as np
    import tensorflow as tf

    from airflow_tfos.runtime import RunCheckpointer, export_model, fit_resumable

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if ctx.feed_shares:
        dataset, steps, width = ctx.dataset(), ctx.steps_per_epoch, args.get("width", 2)
    else:
        steps, batch, width = args["steps_per_epoch"], 8, 4
        rng = np.random.default_rng(ctx.training_rank)
        x = rng.normal(size=(steps * batch, 4)).astype("float32")
        y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True).with_options(options)
    with strategy.scope():
        tf.keras.utils.set_random_seed(args.get("seed", 1))
        model = tf.keras.Sequential([tf.keras.Input(shape=(width,)), tf.keras.layers.Dense(args.get("units", 1))])
        model.compile(optimizer=tf.keras.optimizers.SGD(args.get("lr", 0.05)), loss="mse", metrics=["mae"])
    checkpointer = RunCheckpointer(ctx, model=model, every_steps=args.get("every", 5))
    start = checkpointer.restore()
    _write(
        ctx,
        f"start{ctx.attempt}",
        {
            "start": start,
            "restored_step": checkpointer.restored_step,
            "warm_started": checkpointer.warm_started,
            "weights": [w.tolist() for w in model.get_weights()],
        },
    )
    fail_at, pause = args.get("fail_at"), args.get("sleep", 0)

    class Pace(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch_index, logs=None):
            if fail_at and ctx.attempt == 0 and ctx.job_name == "worker" and checkpointer.step >= fail_at:
                raise ConnectionError(f"worker lost its peer at step {checkpointer.step} (planned)")
            time.sleep(pause)

    histories = fit_resumable(
        model,
        dataset,
        epochs=args.get("epochs", 2),
        steps_per_epoch=steps,
        checkpointer=checkpointer,
        callbacks=[Pace()],
        validation_data=ctx.validation_dataset() if ctx.feed_shares else None,
        verbose=0,
    )
    loss = histories[-1].history["loss"][-1] if histories else None
    export_model(ctx, model, metrics={"loss": loss, "warm_started": checkpointer.warm_started})
    weights = [w.tolist() for w in model.get_weights()]
    _write(ctx, "final", {"step": checkpointer.step, "loss": loss, "weights": weights})
    return {"step": checkpointer.step, "attempt": ctx.attempt, "warm_started": checkpointer.warm_started, "loss": loss}


def exact_validation(args, ctx):
    """A logistic model under MultiWorkerMirroredStrategy with fed validation data; exports with the last
    epoch's ``val_*`` metrics. ``fit`` is given no validation steps (Keras runs until every node's validation
    rows are used up); ``evaluate`` is given ``ctx.validation_steps``."""
    import tensorflow as tf

    from airflow_tfos.runtime import export_model

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        tf.keras.utils.set_random_seed(3)
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1, activation="sigmoid")])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.5), loss="binary_crossentropy", metrics=["accuracy"])
    history = model.fit(ctx.dataset(), epochs=2, validation_data=ctx.validation_dataset(), verbose=0)
    logs = {k: v[-1] for k, v in history.history.items()}
    loss, accuracy = model.evaluate(ctx.validation_dataset(), steps=ctx.validation_steps, verbose=0)
    export_model(ctx, model, metrics=logs)
    record = {"logs": logs, "evaluate": [loss, accuracy], "validation_rows": ctx.feed_shares["validation"].rows}
    _write(ctx, "exact", record)
    return record


def mwms_file_rows_seen(args, ctx):
    """InputMode.TENSORFLOW under MultiWorkerMirroredStrategy: the labels (row ids) this node's replica gets
    through tf.distribute in one pass over ``parquet_dataset`` of its share of the files, and the steps Keras
    ``fit`` runs per epoch on it; recorded per node. ``args['workers']``: passed to the reader when set."""
    from airflow_tfos.runtime.feed.files import parquet_dataset
    from airflow_tfos.shared.feed import Feed

    files = ctx.shard_files(args["pattern"])
    feed = Feed(features="x", label="y", batch_size=args["batch_size"], shuffle=False)
    kwargs = {"workers": ctx.num_workers} if args.get("workers") else {}
    seen, sizes, steps = _replica_rows_and_fit_steps(lambda: parquet_dataset(files, feed, **kwargs))
    record = {"files": files, "seen": seen, "sizes": sizes, "fit_steps": steps}
    _write(ctx, "fileseen", record)
    return record


def _local_rows(strategy, dataset) -> list[dict]:
    """The rows this node's replica gets from ``dataset`` through tf.distribute, one dict of plain values
    each (sparse vectors densified, ragged rows as lists, strings decoded)."""
    import tensorflow as tf

    def plain(value):
        if isinstance(value, tf.SparseTensor):
            value = tf.sparse.to_dense(value)
        if isinstance(value, tf.RaggedTensor):
            return value.to_list()
        values = value.numpy().tolist()
        return [v.decode() if isinstance(v, bytes) else v for v in values]

    rows = []
    for batch in strategy.experimental_distribute_dataset(dataset):
        x, y, w = tf.nest.map_structure(lambda v: strategy.experimental_local_results(v)[0], batch)
        columns = {k: plain(v) for k, v in {**x, **y, "w": w}.items()}
        rows.extend(dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=True))
    return rows


def mixed_types(args, ctx):
    """Under MultiWorkerMirroredStrategy: record the training and validation rows this node's replica gets
    (vectors, strings, dates, ragged arrays, a weight and two labels), then fit a model on them."""
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    record = {
        "train": _local_rows(strategy, ctx.dataset()),
        "validation": _local_rows(strategy, ctx.validation_dataset()),
    }
    with strategy.scope():
        inputs = {
            "dv": tf.keras.Input(shape=(2,), name="dv"),
            "sv": tf.keras.Input(shape=(4,), sparse=True, name="sv"),
            "t": tf.keras.Input(shape=(), dtype=tf.string, name="t"),
            "tok": tf.keras.Input(shape=(None,), ragged=True, name="tok"),
            "p": tf.keras.Input(shape=(3,), name="p"),
        }
        words = tf.keras.layers.StringLookup(vocabulary=["a", "b", "c"], output_mode="one_hot")(inputs["t"])
        tokens = tf.keras.layers.Lambda(lambda r: tf.reduce_sum(tf.cast(r, tf.float32), axis=1, keepdims=True))(
            inputs["tok"]
        )
        hidden = tf.keras.layers.Concatenate()(
            [inputs["dv"], tf.keras.layers.Dense(2)(inputs["sv"]), words, tokens, inputs["p"]]
        )
        outputs = {"id": tf.keras.layers.Dense(1, name="id")(hidden), "y2": tf.keras.layers.Dense(1, name="y2")(hidden)}
        model = tf.keras.Model(inputs, outputs)
        model.compile(optimizer=tf.keras.optimizers.SGD(1e-4), loss={"id": "mse", "y2": "mse"})
    history = model.fit(ctx.dataset(), epochs=2, validation_data=ctx.validation_dataset(), verbose=0)
    record["loss"] = history.history["loss"]
    record["val_loss"] = history.history["val_loss"]
    record["weights"] = [w.tolist() for w in model.get_weights()]
    _write(ctx, "mixed", record)
    return record["loss"]


def export_two_output_model(args, ctx):
    """Export a SavedModel taking a vector ``sv`` (4 floats) and a string ``t``, with two outputs: ``score``
    (the vector's sum plus the string's length) and ``shout`` (the string upper-cased)."""
    import tensorflow as tf

    class TwoOutputs(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None], tf.string)])
        def serve(self, sv, t):
            score = tf.reduce_sum(sv, axis=1) + tf.cast(tf.strings.length(t), tf.float32)
            return {"score": score, "shout": tf.strings.upper(t)}

    module = TwoOutputs()
    if ctx.is_chief:
        tf.saved_model.save(module, args["export_dir"], signatures={"serving_default": module.serve})
    return args["export_dir"]


def tf_cluster_view(args, ctx):
    """Say whether TensorFlow was imported before main_fun, and the cluster TF's own resolver reads."""
    import sys

    preloaded = "tensorflow" in sys.modules
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return {
        "tf_preloaded": preloaded,
        "resolver_cluster": resolver.cluster_spec().as_dict(),
        "resolver_task": [resolver.task_type, resolver.task_id],
        "ctx_cluster": ctx.cluster_spec,
        "ctx_task": [ctx.job_name, ctx.task_index],
    }


def epoch_ids(args, ctx):
    """The labels (row ids) this node gets in each of ``args["epochs"]`` epochs of ``ctx.batches``, in order, and
    those of its validation data; then one epoch of Keras ``fit`` on ``ctx.dataset()`` (a real TF step on the
    same share). Recorded per node."""
    import tensorflow as tf

    record = {"steps_per_epoch": ctx.steps_per_epoch, "epochs": [], "validation": []}
    record["spill"] = ctx.feed_shares["train"].path  # "" when the node reads its Parquet slices itself
    for epoch in range(args.get("epochs", 2)):
        record["epochs"].append([int(i) for _, y in ctx.batches("train", epoch) for i in y])
    if "validation" in ctx.feed_shares:
        record["validation"] = [int(i) for _, y in ctx.batches("validation") for i in y]
    width = ctx.feed_shares["train"].widths.get("x", 1)
    model = tf.keras.Sequential([tf.keras.Input(shape=(width,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")
    history = model.fit(ctx.dataset(), epochs=1, verbose=0)
    record["fit_loss"] = history.history["loss"]
    _write(ctx, "ids", record)
    return record


def stale_chief_save(args, ctx):
    """A chief that trains one step, says so in ``<run_dir>/before-save``, waits for ``<run_dir>/go`` (a test
    records a newer attempt meanwhile), then saves a checkpoint and exports: as a stale attempt would."""
    import numpy as np
    import tensorflow as tf

    from airflow_tfos.runtime import RunCheckpointer, export_model

    model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    checkpointer = RunCheckpointer(ctx, model=model, every_steps=1)
    checkpointer.restore()
    model.fit(np.ones((8, 2), "float32"), np.ones((8, 1), "float32"), batch_size=8, epochs=1, verbose=0)
    Path(ctx.run_dir, "before-save").write_text(str(checkpointer.step))
    deadline = time.monotonic() + args.get("wait", 60)
    while not Path(ctx.run_dir, "go").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    try:
        checkpointer.save()
    finally:  # the export is fenced too, whatever the checkpoint did
        export_model(ctx, model, metrics={"step": checkpointer.step})
    return {"step": checkpointer.step}
