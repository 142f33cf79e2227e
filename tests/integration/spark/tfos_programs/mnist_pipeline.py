"""A program written for TensorFlowOnSpark 2.2.5's Spark ML pipeline, unchanged but for its import.

The shape of TFoS's ``examples/mnist/keras/mnist_pipeline.py``: ``TFEstimator(main_fun, args)`` with an
input mapping of ``image`` and ``label``, ``main_fun`` reading rows with ``TFNode.DataFeed`` in a
generator under MultiWorkerMirroredStrategy and exporting a SavedModel, then ``TFModel(args)`` mapping
``image`` to the model's input and its last layer to ``prediction``. Smaller than the original (a small
CNN, a few steps) so that it trains in seconds on MNIST-shaped rows of 784 pixels.
"""

import argparse


def main_fun(args, ctx):
    import numpy as np
    import tensorflow as tf
    from tensorflowonspark import TFNode, compat

    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def build_model():
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Conv2D(4, 3, strides=2, activation="relu", input_shape=(28, 28, 1)),
                tf.keras.layers.Flatten(),
                tf.keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile(
            loss=tf.keras.losses.sparse_categorical_crossentropy,
            optimizer=tf.keras.optimizers.Adam(learning_rate=0.01),
            metrics=["accuracy"],
        )
        return model

    tf_feed = TFNode.DataFeed(ctx.mgr, False)

    def rdd_generator():
        while not tf_feed.should_stop():
            batch = tf_feed.next_batch(1)
            if len(batch) == 0:
                return
            image, label = batch[0]
            yield np.array(image, dtype=np.float32).reshape(28, 28, 1) / 255.0, np.array([label], dtype=np.float32)

    ds = tf.data.Dataset.from_generator(
        rdd_generator,
        output_signature=(
            tf.TensorSpec(shape=(28, 28, 1), dtype=tf.float32),
            tf.TensorSpec(shape=(1,), dtype=tf.float32),
        ),
    ).batch(args.batch_size)

    with strategy.scope():
        model = build_model()

    # Synchronous training: stop before any worker runs out of rows.
    steps_per_epoch = int(args.rows / args.batch_size / ctx.num_workers * 0.9)
    model.fit(ds, epochs=args.epochs, steps_per_epoch=steps_per_epoch, verbose=0)
    compat.export_saved_model(model, args.export_dir, ctx.job_name == "chief")
    tf_feed.terminate()


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--cluster_size", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--rows", type=int, default=60000)
    parser.add_argument("--model_dir", default="mnist_model")
    parser.add_argument("--export_dir", default="mnist_export")
    parser.add_argument("--tensorboard", action="store_true")
    return parser.parse_args(argv)


def build_estimator(args):
    from tensorflowonspark import pipeline

    return (
        pipeline.TFEstimator(main_fun, args)
        .setInputMapping({"image": "image", "label": "label"})
        .setModelDir(args.model_dir)
        .setExportDir(args.export_dir)
        .setClusterSize(args.cluster_size)
        .setTensorboard(args.tensorboard)
        .setEpochs(args.epochs)
        .setBatchSize(args.batch_size)
        .setGraceSecs(60)
    )


def train(df, args):
    return build_estimator(args).fit(df)


def inference(df, args):
    from tensorflowonspark import pipeline

    model = (
        pipeline.TFModel(args)
        .setInputMapping({"image": "conv2d_input"})
        .setOutputMapping({"dense": "prediction"})
        .setSignatureDefKey("serving_default")
        .setExportDir(args.export_dir)
        .setBatchSize(args.batch_size)
    )
    return model.transform(df)
