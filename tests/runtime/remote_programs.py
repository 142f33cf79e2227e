"""Training programs for run directories on HDFS: they write nothing to local paths derived from ``ctx.run_dir``."""

from __future__ import annotations


def checkpointed_training(args, ctx):
    """MWMS Keras training with checkpoints every ``args['every']`` steps and an export, resumable."""
    import numpy as np
    import tensorflow as tf

    from airflow_tfos.runtime.checkpoint import RunCheckpointer, export_model, fit_resumable

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
    histories = fit_resumable(
        model, dataset, epochs=args["epochs"], steps_per_epoch=steps, checkpointer=checkpointer, verbose=0
    )
    loss = histories[-1].history["loss"][-1] if histories else None
    export_model(ctx, model, metrics={"loss": loss})
    return {"step": checkpointer.step, "attempt": ctx.attempt, "kernel": model.get_weights()[0].ravel().tolist()}
