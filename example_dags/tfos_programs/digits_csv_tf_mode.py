"""A TensorFlowOnSpark 2.2.5 program in InputMode.TENSORFLOW, moved to airflow-tfos by changing its imports.

The only edits from the TFoS original are the two import lines marked "was:". Each TF node reads
its own share of the CSV part files directly (no data goes through Spark), trains a Keras model with
MultiWorkerMirroredStrategy, and the chief exports it:

    spark-submit digits_csv_tf_mode.py --cluster_size 2 --data_dir <day>/train_csv --export_dir <dir>
"""

import argparse

from pyspark import SparkConf, SparkContext

from airflow_tfos.runtime.compat import TFCluster  # was: from tensorflowonspark import TFCluster


def main_fun(args, ctx):
    import tensorflow as tf

    from airflow_tfos.runtime.compat import TFNode, compat  # was: from tensorflowonspark import TFNode, compat

    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    data_dir = TFNode.hdfs_path(ctx, args.data_dir).replace("file://", "")
    files = sorted(tf.io.gfile.glob(data_dir + "/part-*"))
    my_files = files[ctx.worker_num :: args.cluster_size]  # this node's share of the files

    def parse(line):
        values = tf.io.decode_csv(line, record_defaults=[[0]] + [[0.0]] * 64)
        return tf.stack(values[1:]), values[0]

    options = tf.data.Options()
    compat.disable_auto_shard(options)
    dataset = (
        tf.data.TextLineDataset(my_files)
        .map(parse)
        .shuffle(1000, seed=ctx.worker_num)
        .repeat()
        .batch(args.batch_size)
        .with_options(options)
    )

    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Dense(64, activation="relu", input_shape=(64,)),
                tf.keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile(
            optimizer=tf.keras.optimizers.Adam(0.003), loss="sparse_categorical_crossentropy", metrics=["accuracy"]
        )

    history = model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, verbose=2)
    print(f"node {ctx.job_name}:{ctx.task_index} final loss {history.history['loss'][-1]:.4f}")
    compat.export_saved_model(model, args.export_dir, ctx.job_name == "chief")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster_size", type=int, default=2, help="number of TF nodes")
    parser.add_argument("--data_dir", required=True, help="CSV part files: label, then 64 pixels")
    parser.add_argument("--export_dir", required=True, help="where the chief exports the SavedModel")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--steps_per_epoch", type=int, default=15)
    parser.add_argument("--batch_size", type=int, default=32)
    args = parser.parse_args()

    sc = SparkContext(conf=SparkConf().setAppName("digits_csv_tf_mode"))
    cluster = TFCluster.run(
        sc,
        main_fun,
        args,
        args.cluster_size,
        num_ps=0,
        tensorboard=False,
        input_mode=TFCluster.InputMode.TENSORFLOW,
        master_node="chief",
    )
    cluster.shutdown()
    sc.stop()
