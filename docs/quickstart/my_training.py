"""My model's training, run on every TF node of the Spark application that the DAG's training task starts.

The task ships this file with the application (it sits beside the DAG): the nodes import it from there.
TensorFlow is imported inside the function, so that Airflow's DAG processor, which may import this file while it
looks for DAGs, never loads TensorFlow.
"""


def train(args, ctx):
    """Fit on this node's share of the rows Spark feeds; export with the loss on the held-out rows."""
    import tensorflow as tf

    from airflow_tfos.runtime import RunCheckpointer, export_model, fit_resumable

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential(
            [tf.keras.Input(shape=(3,)), tf.keras.layers.Dense(16, activation="relu"), tf.keras.layers.Dense(1)]
        )
        model.compile(optimizer=tf.keras.optimizers.Adam(args["learning_rate"]), loss="mse")
    checkpointer = RunCheckpointer(ctx, model=model, every_steps=50)
    start = checkpointer.restore()  # this run's latest checkpoint, else the warm start, else nothing
    holdout = ctx.validation_dataset()
    metrics = {}
    if start == 0 and checkpointer.warm_started:  # the model in service, on tonight's held-out rows
        metrics["baseline_val_loss"] = model.evaluate(holdout, steps=ctx.validation_steps, verbose=0)
    fit_resumable(
        model,
        ctx.dataset(),
        epochs=args["epochs"],
        steps_per_epoch=ctx.steps_per_epoch,
        checkpointer=checkpointer,
        verbose=0,
    )
    metrics["val_loss"] = model.evaluate(holdout, steps=ctx.validation_steps, verbose=0)
    export_model(ctx, model, metrics=metrics)  # every node calls it; the chief writes the export
    return metrics
