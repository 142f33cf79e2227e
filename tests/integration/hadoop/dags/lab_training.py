"""A user's training module, beside their DAG (``lab_dags.py``): TFoSTrainOperator ships it as a zip, and the TF
nodes on YARN import it from there (the containers' Python has no copy of it).

InputMode.TENSORFLOW: each node reads its share of the Parquet files straight from HDFS (WebHDFS, served by the
DataNodes), fits y = x . [2, -3] + 1 with two workers, checkpoints, and exports.
"""

from __future__ import annotations


def train(args, ctx):
    import tensorflow as tf

    from airflow_tfos.runtime import RunCheckpointer, export_model, fit_resumable, parquet_dataset
    from airflow_tfos.shared.feed import Feed

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    feed = Feed(features="x", label="y", batch_size=args["batch_size"])
    files = ctx.shard_files(args["data"])
    with strategy.scope():
        tf.keras.utils.set_random_seed(7)
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    checkpointer = RunCheckpointer(ctx, model=model, every_steps=args["checkpoint_every"])
    histories = fit_resumable(
        model,
        parquet_dataset(files, feed, workers=ctx.num_workers),
        epochs=args["epochs"],
        steps_per_epoch=args["steps_per_epoch"],
        checkpointer=checkpointer,
    )
    weights = [float(w) for w in model.get_weights()[0].ravel()]
    export_model(ctx, model, metrics={"loss": float(histories[-1].history["loss"][-1])})
    return {"weights": weights, "files": len(files)}
