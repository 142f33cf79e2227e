"""A program written for TensorFlowOnSpark 2.2.5 in InputMode.TENSORFLOW, unchanged.

It is the shape of TFoS's ``examples/mnist/keras/mnist_tf.py`` (on generated data, since nothing may be
downloaded): MultiWorkerMirroredStrategy, a Keras model, checkpoints and an export from the chief.
Tests run it with its import rewritten to ``airflow_tfos.runtime.compat``, and the launch benchmark
runs it as is against TFoS itself.
"""

import argparse
import time

from tensorflowonspark import TFCluster


def main_fun(args, ctx):
    import numpy as np
    import tensorflow as tf
    from tensorflowonspark import TFNode, compat

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    if args.mark_dir:
        # The moment this node has its strategy built: what the launch benchmark measures.
        with open(f"{args.mark_dir}/ready-{ctx.job_name}-{ctx.task_index}", "w") as f:
            f.write(repr(time.time()))
    if args.steps == 0:
        return

    rng = np.random.default_rng(ctx.worker_num)
    x = rng.normal(size=(512, 8)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    options = tf.data.Options()
    compat.disable_auto_shard(options)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size).repeat().with_options(options)

    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                tf.keras.layers.Dense(1, activation="sigmoid"),
            ]
        )
        model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])

    model_dir = TFNode.hdfs_path(ctx, args.model_dir)
    callbacks = [tf.keras.callbacks.ModelCheckpoint(filepath=model_dir.replace("file://", "") + "/weights-{epoch}")]
    model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps, callbacks=callbacks, verbose=0)
    compat.export_saved_model(model, args.export_dir, ctx.job_name == "chief")


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster_size", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--model_dir", default="tfos_model")
    parser.add_argument("--export_dir", default="tfos_export")
    parser.add_argument("--mark_dir", default="")
    parser.add_argument("--tensorboard", action="store_true")
    return parser.parse_args(argv)


def launch(sc, args):
    cluster = TFCluster.run(
        sc,
        main_fun,
        args,
        args.cluster_size,
        num_ps=0,
        tensorboard=args.tensorboard,
        input_mode=TFCluster.InputMode.TENSORFLOW,
        master_node="chief",
        log_dir=args.model_dir,
    )
    cluster.shutdown()
    return cluster
