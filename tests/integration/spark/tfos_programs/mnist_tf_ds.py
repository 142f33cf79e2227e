"""A TensorFlowOnSpark 2.2.5 program in the shape of TFoS's ``examples/mnist/keras/mnist_tf_ds.py``, unchanged.

InputMode.TENSORFLOW without ``tensorflow_datasets``: every node lists the TFRecord files of
``mnist_data_setup.py``'s layout (``tfr/train/part-r-*``) at ``ctx.absolute_path(images_labels)``, reads
them with ``tf.data`` (repeat, shuffle, interleave) and trains a small CNN with
MultiWorkerMirroredStrategy, whose default auto-sharding gives each worker its own files. One
difference from TFoS's example: its ``tfos`` parser read ``label`` as 10 values, while
``mnist_data_setup.py`` writes one; this one reads the one value that is there.
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

    def parse_tfos(example_proto):
        feature_def = {
            "label": tf.io.FixedLenFeature(1, tf.int64),
            "image": tf.io.FixedLenFeature(28 * 28 * 1, tf.int64),
        }
        features = tf.io.parse_single_example(example_proto, feature_def)
        image = tf.reshape(tf.cast(features["image"], tf.float32) / 255, (28, 28, 1))
        return (image, features["label"][0])

    image_pattern = ctx.absolute_path(args.images_labels)
    ds = tf.data.Dataset.list_files(image_pattern)
    ds = ds.repeat(args.epochs).shuffle(BUFFER_SIZE)
    ds = ds.interleave(tf.data.TFRecordDataset)
    train_datasets_unbatched = ds.map(parse_tfos)

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
    callbacks = [tf.keras.callbacks.ModelCheckpoint(filepath=filepath, verbose=0, save_weights_only=True)]

    # Each worker reads its own files: an epoch is the training set once over all workers.
    steps_per_epoch = args.num_examples // GLOBAL_BATCH_SIZE

    with strategy.scope():
        multi_worker_model = build_and_compile_cnn_model()
    multi_worker_model.fit(
        x=train_datasets, epochs=args.epochs, steps_per_epoch=steps_per_epoch, callbacks=callbacks, verbose=0
    )
    compat.export_saved_model(multi_worker_model, args.export_dir, ctx.job_name == "chief")


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", help="number of records per batch", type=int, default=64)
    parser.add_argument("--buffer_size", help="size of shuffle buffer", type=int, default=10000)
    parser.add_argument("--cluster_size", help="number of nodes in the cluster", type=int, default=1)
    parser.add_argument("--data_format", help="data format", type=str, choices=["tfos"], default="tfos")
    parser.add_argument("--epochs", help="number of epochs", type=int, default=3)
    parser.add_argument("--images_labels", help="HDFS path to MNIST image_label files in parallelized format")
    parser.add_argument("--model_dir", help="path to save model/checkpoint", default="mnist_model")
    parser.add_argument("--export_dir", help="path to export saved_model", default="mnist_export")
    parser.add_argument("--tensorboard", help="launch tensorboard process", action="store_true")
    parser.add_argument("--num_examples", help="rows in the training set (MNIST: 60000)", type=int, default=60000)
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
    )
    cluster.shutdown()
    return cluster
