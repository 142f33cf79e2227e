"""A TensorFlowOnSpark 2.2.5 program in the shape of TFoS's ``examples/mnist/keras/mnist_tf.py``, unchanged.

InputMode.TENSORFLOW: every node loads the whole training split, auto-sharded by data across the workers,
and trains a small CNN with MultiWorkerMirroredStrategy (global batch = batch size x workers), with
per-epoch weights and TensorBoard logs in ``model_dir`` and a SavedModel exported by the chief. TFoS's
example loads MNIST with ``tensorflow_datasets``; nothing can be downloaded here, so ``load_mnist`` reads
the TFRecords of ``mnist_data_setup.py``'s layout under ``--data_dir`` into the same structure
(``(image uint8 [28, 28, 1], label int64)`` pairs, as ``tfds.load(..., as_supervised=True)`` gives).
"""

import argparse

from tensorflowonspark import TFCluster


def main_fun(args, ctx):
    import tensorflow as tf
    from tensorflowonspark import compat

    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    BUFFER_SIZE = args.buffer_size
    BATCH_SIZE = args.batch_size
    NUM_WORKERS = args.cluster_size

    def load_mnist(split):
        """What ``tfds.load(name="mnist", split=split, as_supervised=True)`` returns, from local files."""
        feature_def = {"label": tf.io.FixedLenFeature(1, tf.int64), "image": tf.io.FixedLenFeature(784, tf.int64)}

        def to_pair(record):
            features = tf.io.parse_single_example(record, feature_def)
            return tf.reshape(tf.cast(features["image"], tf.uint8), (28, 28, 1)), features["label"][0]

        files = sorted(tf.io.gfile.glob(f"{args.data_dir}/tfr/{split}/part-r-*"))
        return tf.data.TFRecordDataset(files).map(to_pair)

    def scale(image, label):
        return tf.cast(image, tf.float32) / 255, label

    datasets = load_mnist("train")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train_datasets_unbatched = datasets.with_options(options).repeat().map(scale).shuffle(BUFFER_SIZE)

    def build_and_compile_cnn_model():
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Conv2D(8, 3, activation="relu", input_shape=(28, 28, 1)),
                tf.keras.layers.MaxPooling2D(),
                tf.keras.layers.Flatten(),
                tf.keras.layers.Dense(32, activation="relu"),
                tf.keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile(
            loss=tf.keras.losses.sparse_categorical_crossentropy,
            optimizer=tf.keras.optimizers.SGD(learning_rate=args.learning_rate),
            metrics=["accuracy"],
        )
        return model

    GLOBAL_BATCH_SIZE = BATCH_SIZE * NUM_WORKERS
    train_datasets = train_datasets_unbatched.batch(GLOBAL_BATCH_SIZE)

    tf.io.gfile.makedirs(args.model_dir)
    filepath = args.model_dir + "/weights-{epoch:04d}"
    callbacks = [
        tf.keras.callbacks.ModelCheckpoint(filepath=filepath, verbose=0, save_weights_only=True),
        tf.keras.callbacks.TensorBoard(log_dir=args.model_dir),
    ]

    with strategy.scope():
        multi_worker_model = build_and_compile_cnn_model()
    multi_worker_model.fit(
        x=train_datasets, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks, verbose=0
    )
    compat.export_saved_model(multi_worker_model, args.export_dir, ctx.job_name == "chief")


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", help="number of records per batch", type=int, default=64)
    parser.add_argument("--buffer_size", help="size of shuffle buffer", type=int, default=10000)
    parser.add_argument("--cluster_size", help="number of nodes in the cluster", type=int, default=1)
    parser.add_argument("--epochs", help="number of epochs", type=int, default=3)
    parser.add_argument("--model_dir", help="path to save model/checkpoint", default="mnist_model")
    parser.add_argument("--export_dir", help="path to export saved_model", default="mnist_export")
    parser.add_argument("--steps_per_epoch", help="number of steps per epoch", type=int, default=469)
    parser.add_argument("--tensorboard", help="launch tensorboard process", action="store_true")
    parser.add_argument("--data_dir", help="mnist_data_setup.py's output", default="data/mnist")
    parser.add_argument("--learning_rate", type=float, default=0.001)
    return parser.parse_args(argv)


def main(sc, args):
    """What the example does under ``if __name__ == "__main__"``, given the SparkContext."""
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
