"""A TensorFlowOnSpark 2.2.5 program in the shape of TFoS's ``examples/mnist/keras/mnist_inference.py``, unchanged.

Parallel inference with ``TFParallel.run``: each single-node instance loads the SavedModel, reads its
share of the TFRecord files (``tf.data`` ``shard(num_workers, worker_num)``) and writes one
``label prediction`` line per input row to ``output/part-NNNNN``. TFoS's example named the model's input
and output (``conv2d_input``, ``dense_1``); this one takes them from the signature, whose names depend on
the Keras version that exported it.
"""

import argparse

import numpy as np
import tensorflow as tf


def inference(args, ctx):
    saved_model = tf.saved_model.load(args.export_dir, tags="serve")
    predict = saved_model.signatures["serving_default"]
    (input_name,) = predict.structured_input_signature[1]

    def parse_tfr(example_proto):
        feature_def = {"label": tf.io.FixedLenFeature(1, tf.int64), "image": tf.io.FixedLenFeature(784, tf.int64)}
        features = tf.io.parse_single_example(serialized=example_proto, features=feature_def)
        image = tf.reshape(tf.cast(features["image"], dtype=tf.float32) / 255.0, [28, 28, 1])
        label = tf.cast(features["label"], dtype=tf.float32)
        return (image, label)

    ds = tf.data.Dataset.list_files(f"{args.images_labels}/part-*", shuffle=False)
    ds = ds.shard(ctx.num_workers, ctx.worker_num)
    ds = ds.interleave(tf.data.TFRecordDataset)
    ds = ds.map(parse_tfr)
    ds = ds.batch(10)

    tf.io.gfile.makedirs(args.output)
    output_file = tf.io.gfile.GFile(f"{args.output}/part-{ctx.worker_num:05d}", mode="w")
    for batch in ds:
        (scores,) = predict(**{input_name: batch[0]}).values()
        labels = np.reshape(batch[1], -1).astype(int)
        preds = np.argmax(scores, axis=1)
        for x in zip(labels, preds, strict=True):
            output_file.write(f"{x[0]} {x[1]}\n")
    output_file.close()


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster_size", help="number of nodes in the cluster", type=int, default=1)
    parser.add_argument("--images_labels", type=str, help="Directory for input images with labels")
    parser.add_argument("--export_dir", help="HDFS path to export model", type=str, default="mnist_export")
    parser.add_argument("--output", help="HDFS path to save predictions", type=str, default="predictions")
    args, _ = parser.parse_known_args(argv)
    return args


def main(sc, args):
    """What the example does under ``if __name__ == "__main__"``, given the SparkContext."""
    from tensorflowonspark import TFParallel

    TFParallel.run(sc, inference, args, args.cluster_size)
