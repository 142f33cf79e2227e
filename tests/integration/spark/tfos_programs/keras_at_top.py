"""A program in the shape of TensorFlowOnSpark's own tests/test_pipeline.py, unchanged but for its import: its module
imports Keras at the top (``from tensorflow.keras import Sequential``), so the function the driver pickles carries the
driver's Keras (Keras 3, TensorFlow's default), while ``tf.keras`` inside ``main_fun`` is the node's; it compiles with
``Adam(lr=...)``, fits a linear regression with ``TFEstimator`` from rows fed by ``TFNode.DataFeed`` and scores with
``TFModel``.
"""

import argparse  # noqa: I001 (the imports in the order of the program it imitates)

from tensorflowonspark import compat, pipeline
from tensorflow.keras import Sequential
from tensorflow.keras.layers import Dense


def main_fun(args, ctx):
    import tensorflow as tf
    from tensorflowonspark import TFNode

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = Sequential()
        model.add(Dense(1, activation="linear", input_shape=[2]))
        model.compile(optimizer=tf.keras.optimizers.Adam(lr=0.2), loss="mse", metrics=["mse"])

    tf_feed = TFNode.DataFeed(ctx.mgr, input_mapping=args.input_mapping)

    def rows():
        while not tf_feed.should_stop():
            batch = tf_feed.next_batch(1)
            if len(batch["x"]) == 0:
                return
            yield batch["x"][0], batch["y_"][0]

    ds = tf.data.Dataset.from_generator(
        rows, output_signature=(tf.TensorSpec([2], tf.float32), tf.TensorSpec([1], tf.float32))
    )
    options = tf.data.Options()
    compat.disable_auto_shard(options)
    ds = ds.with_options(options).batch(args.batch_size)
    steps_per_epoch = int(args.rows * 0.9 // (args.batch_size * ctx.num_workers))
    model.fit(ds, epochs=args.epochs, steps_per_epoch=steps_per_epoch, verbose=0)
    compat.export_saved_model(model, args.export_dir, ctx.job_name == "chief")
    tf_feed.terminate()


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch_size", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--model_dir", default="linear_model")
    parser.add_argument("--export_dir", default="linear_export")
    return parser.parse_args(argv)


def fit(df, args):
    estimator = (
        pipeline.TFEstimator(main_fun, args)
        .setInputMapping({"col1": "x", "col2": "y_"})
        .setModelDir(args.model_dir)
        .setExportDir(args.export_dir)
        .setClusterSize(2)
        .setMasterNode("chief")
        .setNumPS(0)
        .setBatchSize(args.batch_size)
        .setEpochs(args.epochs)
    )
    return estimator.fit(df)


def score(model, df):
    return (
        model.setTagSet("serve")
        .setSignatureDefKey("serving_default")
        .setInputMapping({"c1": "dense_input"})
        .setOutputMapping({"dense": "cout"})
        .transform(df)
    )
