"""Training functions of the Spark ML stage tests, importable by ``module:function`` as users' are."""

from __future__ import annotations


def train_classifier(args, ctx):
    """Fit a softmax classifier on the fed ``(features, label[, weight])`` batches and export it."""
    import tensorflow as tf

    from airflow_tfos.runtime.compat import compat

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential(
            [tf.keras.Input(shape=(args["width"],)), tf.keras.layers.Dense(args["classes"], activation="softmax")]
        )
        model.compile(
            optimizer=tf.keras.optimizers.Adam(args.get("lr", 0.1)),
            loss="sparse_categorical_crossentropy",
            weighted_metrics=[],
        )
    history = model.fit(ctx.dataset(), epochs=args["epochs"], verbose=0)
    if args.get("export", True):
        compat.export_saved_model(model, args["export_dir"], ctx.is_chief)
    return {"loss": history.history["loss"], "args": sorted(args)}


def export_nothing(args, ctx):
    """Take the fed rows and return without exporting a model."""
    return sum(1 for _ in ctx.batches(epoch=0))
