"""A program written for TensorFlowOnSpark 2.2.5 in InputMode.SPARK, unchanged.

The shape of TFoS's ``examples/mnist/keras/mnist_spark.py`` (rows of features + label from an RDD,
``DataFeed`` + ``next_batch`` in a generator, MultiWorkerMirroredStrategy), and of its inference
counterpart (``DataFeed(train_mode=False)`` + ``batch_results``), on generated rows.
"""

import argparse

from tensorflowonspark import TFCluster


def main_fun(args, ctx):
    import numpy as np
    import tensorflow as tf
    from tensorflowonspark import TFNode

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    tf_feed = TFNode.DataFeed(ctx.mgr, False)

    def rdd_generator():
        while not tf_feed.should_stop():
            batch = tf_feed.next_batch(1)
            if len(batch) > 0:
                features, label = batch[0]
                yield (np.array(features, dtype=np.float32), np.array([label], dtype=np.float32))
            else:
                return

    ds = tf.data.Dataset.from_generator(
        rdd_generator,
        output_signature=(
            tf.TensorSpec(shape=(args.width,), dtype=tf.float32),
            tf.TensorSpec(shape=(1,), dtype=tf.float32),
        ),
    ).batch(args.batch_size)

    with strategy.scope():
        model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(args.width,))])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")

    steps_per_epoch = int(args.rows / args.batch_size / ctx.num_workers * 0.9)
    model.fit(ds, epochs=args.epochs, steps_per_epoch=steps_per_epoch, verbose=0)
    if ctx.job_name == "chief":
        model.save_weights(args.model_dir + "/weights.h5")
    tf_feed.terminate()


def inference_fun(args, ctx):
    from tensorflowonspark import TFNode

    tf_feed = TFNode.DataFeed(ctx.mgr, train_mode=False)
    while not tf_feed.should_stop():
        batch = tf_feed.next_batch(args.batch_size)
        if len(batch) > 0:
            tf_feed.batch_results([(sum(features), label) for features, label in batch])


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster_size", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--width", type=int, default=4)
    parser.add_argument("--model_dir", default="tfos_model")
    return parser.parse_args(argv)


def train(sc, args, rdd):
    cluster = TFCluster.run(
        sc,
        main_fun,
        args,
        args.cluster_size,
        num_ps=0,
        tensorboard=False,
        input_mode=TFCluster.InputMode.SPARK,
        master_node="chief",
    )
    cluster.train(rdd, args.epochs)
    cluster.shutdown()


def infer(sc, args, rdd):
    cluster = TFCluster.run(sc, inference_fun, args, args.cluster_size, 0, False, TFCluster.InputMode.SPARK)
    return cluster.inference(rdd)
