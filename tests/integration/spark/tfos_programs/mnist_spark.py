"""A TensorFlowOnSpark 2.2.5 program in the shape of TFoS's ``examples/mnist/keras/mnist_spark.py``, unchanged.

InputMode.SPARK: Spark reads the CSV files of ``mnist_data_setup.py`` (``label,pixels...``) and feeds the
rows to a chief and workers, whose ``DataFeed`` + ``next_batch(1)`` generator trains a small CNN with
MultiWorkerMirroredStrategy for 90% of the expected steps, saving weights per epoch and exporting a
SavedModel from the chief. ``inference`` is the InputMode.SPARK scoring TFoS's older MNIST examples had:
each node loads the export and answers ``batch_results`` with ``(label, prediction)`` per fed row.
The program reads MNIST-shaped local files (``mnist_data.py``) since nothing can be downloaded here.
"""

import argparse

from tensorflowonspark import TFCluster


def main_fun(args, ctx):
    import numpy as np
    import tensorflow as tf
    from tensorflowonspark import TFNode, compat

    strategy = tf.distribute.MultiWorkerMirroredStrategy()

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

    tf_feed = TFNode.DataFeed(ctx.mgr, False)

    def rdd_generator():
        while not tf_feed.should_stop():
            batch = tf_feed.next_batch(1)
            if len(batch) > 0:
                example = batch[0]
                image = np.reshape(np.array(example[0]).astype(np.float32) / 255.0, (28, 28, 1))
                label = np.reshape(np.array(example[1]).astype(np.float32), (1,))
                yield (image, label)
            else:
                return

    ds = tf.data.Dataset.from_generator(
        rdd_generator, (tf.float32, tf.float32), (tf.TensorShape([28, 28, 1]), tf.TensorShape([1]))
    )
    ds = ds.batch(args.batch_size)

    tf.io.gfile.makedirs(args.model_dir)
    filepath = args.model_dir + "/weights-{epoch:04d}"
    callbacks = [tf.keras.callbacks.ModelCheckpoint(filepath=filepath, verbose=0, save_weights_only=True)]

    with strategy.scope():
        multi_worker_model = build_and_compile_cnn_model()

    # Synchronous training: stop at 90% of the expected steps, so that no worker runs out of rows first.
    steps_per_epoch = args.num_examples / args.batch_size
    max_steps_per_worker = int(steps_per_epoch / ctx.num_workers * 0.9)
    multi_worker_model.fit(
        x=ds, epochs=args.epochs, steps_per_epoch=max_steps_per_worker, callbacks=callbacks, verbose=0
    )
    compat.export_saved_model(multi_worker_model, args.export_dir, ctx.job_name == "chief")
    tf_feed.terminate()


def inference_fun(args, ctx):
    import numpy as np
    import tensorflow as tf
    from tensorflowonspark import TFNode

    model = tf.saved_model.load(args.export_dir, tags="serve")
    predict = model.signatures["serving_default"]
    (input_name,) = predict.structured_input_signature[1]
    tf_feed = TFNode.DataFeed(ctx.mgr, train_mode=False)
    while not tf_feed.should_stop():
        batch = tf_feed.next_batch(args.batch_size)
        if len(batch) > 0:
            images = np.array([row[0] for row in batch], dtype=np.float32).reshape(-1, 28, 28, 1) / 255.0
            (scores,) = predict(**{input_name: tf.constant(images)}).values()
            preds = np.argmax(scores.numpy(), axis=1)
            tf_feed.batch_results([(int(row[1]), int(p)) for row, p in zip(batch, preds, strict=True)])


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", help="number of records per batch", type=int, default=64)
    parser.add_argument("--cluster_size", help="number of nodes in the cluster", type=int, default=1)
    parser.add_argument("--epochs", help="number of epochs", type=int, default=3)
    parser.add_argument("--images_labels", help="path to MNIST images and labels in parallelized format")
    parser.add_argument("--model_dir", help="path to save checkpoint", default="mnist_model")
    parser.add_argument("--export_dir", help="path to export saved_model", default="mnist_export")
    parser.add_argument("--tensorboard", help="launch tensorboard process", action="store_true")
    parser.add_argument("--num_examples", help="rows in the training set (MNIST: 60000)", type=int, default=60000)
    parser.add_argument("--learning_rate", type=float, default=0.001)
    return parser.parse_args(argv)


def parse(ln):
    vec = [int(x) for x in ln.split(",")]
    return (vec[1:], vec[0])


def main(sc, args):
    """What the example does under ``if __name__ == "__main__"``, given the SparkContext."""
    images_labels = sc.textFile(args.images_labels).map(parse)
    cluster = TFCluster.run(
        sc,
        main_fun,
        args,
        args.cluster_size,
        num_ps=0,
        tensorboard=args.tensorboard,
        input_mode=TFCluster.InputMode.SPARK,
        master_node="chief",
    )
    cluster.train(images_labels, args.epochs)
    cluster.shutdown()
    return cluster


def infer(sc, args, images_labels_dir):
    """Score the CSV rows in ``images_labels_dir`` with the export: an RDD of ``(label, prediction)``, row for row."""
    images_labels = sc.textFile(images_labels_dir).map(parse)
    cluster = TFCluster.run(sc, inference_fun, args, args.cluster_size, 0, False, TFCluster.InputMode.SPARK)
    return cluster.inference(images_labels)
