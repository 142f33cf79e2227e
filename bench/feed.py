"""InputMode.SPARK feed benchmarks, side by side on one local Spark cluster (2 executors, 2 TF workers).

    python bench/feed.py [--small]

1. Rows per second delivered into TF per worker: airflow-tfos (DataFrame -> Arrow -> local spill ->
   tf.data tensors) against tensorflowonspark 2.2.5 InputMode.SPARK (RDD -> DataFeed.next_batch(1024)
   -> NumPy), for rows of 2 floats and rows of 784 floats + a label, on the same cached data.
   Ours counts from the moment the Spark task starts reading its partition until the rows have come
   out of the tf.data pipeline as tensors; TFoS's from the call to ``train()`` (its nodes are already
   up and waiting) until the last batch reached ``map_fun``.
2. Training steps per second of a small Keras model (784-128-10, MultiWorkerMirroredStrategy) fed
   from Spark, against the same model on the same workers fed from an in-memory tf.data pipeline
   of the same rows (the ceiling).
3. Peak resident memory of a worker (the Spark task that spills, and the TF process) at 1x and 10x
   the data size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import local_cluster_conf


def _record(directory: str, ctx, record: dict) -> None:
    path = Path(directory) / f"{ctx.job_name}-{ctx.task_index}.json"
    path.write_text(json.dumps(record))


def _records(directory: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(directory).glob("*.json"))]


def ours_feed_main(args, ctx):
    import resource

    share = ctx.feed_shares["train"]
    dataset = ctx.dataset()
    started = time.time()
    for _x, _y in dataset:
        pass
    first_pass = time.time() - started
    started = time.time()
    for _x, _y in dataset:
        pass
    second_pass = time.time() - started
    _record(
        args["out"],
        ctx,
        {
            "rows": share.rows,
            "spill_s": share.spill_seconds,
            "first_pass_s": first_pass,
            "second_pass_s": second_pass,
            "spill_peak_rss_mb": share.spill_peak_rss_mb,
            "tf_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        },
    )


def tfos_feed_main(args, ctx):
    import numpy as np
    from tensorflowonspark import TFNode

    feed = TFNode.DataFeed(ctx.mgr)
    rows, last = 0, None
    while not feed.should_stop():
        batch = feed.next_batch(1024)
        if batch:
            np.asarray([r[0] for r in batch], dtype=np.float32)
            rows += len(batch)
            last = time.time()
    Path(args["out"], f"{ctx.job_name}-{ctx.task_index}.json").write_text(json.dumps({"rows": rows, "last": last}))


def ours_steps_main(args, ctx):
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def build():
        with strategy.scope():
            tf.keras.utils.set_random_seed(1)
            model = tf.keras.Sequential(
                [tf.keras.Input(shape=(784,)), tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)]
            )
            model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    def steps_per_second(model, dataset, epochs):
        model.fit(dataset, epochs=1, steps_per_epoch=ctx.steps_per_epoch, verbose=0)  # warm-up
        started = time.time()
        model.fit(dataset, epochs=epochs, steps_per_epoch=ctx.steps_per_epoch, verbose=0)
        return epochs * ctx.steps_per_epoch / (time.time() - started)

    fed = steps_per_second(build(), ctx.dataset(), args["epochs"])
    xs, ys = zip(*ctx.batches(), strict=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    memory = (
        tf.data.Dataset.from_tensor_slices((np.concatenate(xs), np.concatenate(ys)))
        .batch(ctx.feed_shares["train"].feed.batch_size)
        .repeat()
        .with_options(options)
        .prefetch(tf.data.AUTOTUNE)
    )
    ceiling = steps_per_second(build(), memory, args["epochs"])
    _record(args["out"], ctx, {"fed_steps_s": fed, "memory_steps_s": ceiling})


def image_frame(spark, rows: int):
    frame = spark.range(0, rows, numPartitions=4).selectExpr(
        "transform(sequence(1, 784), i -> cast(((id * 31 + i) % 255) / 255.0 as float)) as x",
        "cast(id % 10 as int) as y",
    )
    return frame.cache()


def pair_frame(spark, rows: int):
    return spark.range(0, rows, numPartitions=4).selectExpr("array(rand(1), rand(2)) as x", "rand(3) as y").cache()


def run_ours(sc, frame, batch_size=1024) -> list[dict]:
    from airflow_tfos.runtime import run
    from airflow_tfos.runtime.feed import Feed

    out = tempfile.mkdtemp(prefix="bench-feed-ours-")
    feed = Feed(features="x", label="y", batch_size=batch_size, shuffle=False, cast_floats=None)
    run(sc, ours_feed_main, {"out": out}, num_nodes=2, data=frame, feed=feed, timeout=1200)
    return _records(out)


def run_tfos(sc, rdd) -> list[dict]:
    from tensorflowonspark import TFCluster

    out = tempfile.mkdtemp(prefix="bench-feed-tfos-")
    cluster = TFCluster.run(
        sc, tfos_feed_main, {"out": out}, 2, 0, False, TFCluster.InputMode.SPARK, master_node="chief"
    )
    started = time.time()
    cluster.train(rdd, 1)
    cluster.shutdown(grace_secs=1)
    return [{"rows": r["rows"], "seconds": r["last"] - started} for r in _records(out)]


def feed_rates(spark, name: str, frame) -> None:
    sc = spark.sparkContext
    total = frame.count()
    rdd = frame.rdd.map(lambda row: (list(row.x), row.y)).cache()
    rdd.count()
    tfos = run_tfos(sc, rdd)
    ours = run_ours(sc, frame)
    rdd.unpersist()
    tfos_rates = [r["rows"] / r["seconds"] for r in tfos]
    ours_rates = [r["rows"] / (r["spill_s"] + r["first_pass_s"]) for r in ours]
    replay_rates = [r["rows"] / r["second_pass_s"] for r in ours]
    print(f"[{name}] {total} rows, 2 workers")
    for i, (t, o) in enumerate(zip(tfos_rates, ours_rates, strict=True)):
        print(
            f"[{name}] worker {i}: tensorflowonspark {t:,.0f} rows/s ({tfos[i]['rows']} rows in "
            f"{tfos[i]['seconds']:.2f} s), airflow-tfos {o:,.0f} rows/s ({ours[i]['rows']} rows: read from Spark "
            f"and spilled in {ours[i]['spill_s']:.2f} s, into TF in {ours[i]['first_pass_s']:.2f} s)"
        )
    t_med, o_med = statistics.median(tfos_rates), statistics.median(ours_rates)
    print(f"feed_rows_per_s_per_worker[{name}] tensorflowonspark=2.2.5: {t_med:,.0f}")
    print(f"feed_rows_per_s_per_worker[{name}] airflow-tfos: {o_med:,.0f}")
    print(f"feed_ratio[{name}] airflow-tfos/tensorflowonspark: {o_med / t_med:.1f}")
    print(
        f"feed_rows_per_s_per_worker[{name}] airflow-tfos later epochs (replayed from local disk): "
        f"{statistics.median(replay_rates):,.0f}"
    )


def training_steps(spark, rows: int) -> None:
    from airflow_tfos.runtime import run
    from airflow_tfos.runtime.feed import Feed

    frame = image_frame(spark, rows)
    frame.count()
    out = tempfile.mkdtemp(prefix="bench-steps-")
    feed = Feed(features="x", label="y", batch_size=64, shuffle=False)
    run(
        spark.sparkContext, ours_steps_main, {"out": out, "epochs": 3}, num_nodes=2, data=frame, feed=feed, timeout=1200
    )
    records = _records(out)
    fed = statistics.median(r["fed_steps_s"] for r in records)
    ceiling = statistics.median(r["memory_steps_s"] for r in records)
    frame.unpersist()
    print(f"train_steps_per_s fed from Spark: {fed:.1f}")
    print(f"train_steps_per_s in-memory tf.data (ceiling): {ceiling:.1f}")
    print(f"train_steps_ratio fed/ceiling: {fed / ceiling:.2f}")


def peak_memory(spark, rows: int) -> None:
    peaks = {}
    for factor in (1, 10):
        frame = image_frame(spark, rows * factor)
        frame.count()
        records = run_ours(spark.sparkContext, frame)
        frame.unpersist()
        peaks[factor] = (max(r["spill_peak_rss_mb"] for r in records), max(r["tf_peak_rss_mb"] for r in records))
        print(
            f"peak_rss_mb[{factor}x = {rows * factor} rows of 784 floats] spark task {peaks[factor][0]:.0f}, "
            f"TF process {peaks[factor][1]:.0f}"
        )
    print(f"peak_rss_ratio 10x/1x spark task: {peaks[10][0] / peaks[1][0]:.2f}")
    print(f"peak_rss_ratio 10x/1x TF process: {peaks[10][1] / peaks[1][1]:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a quick run on less data")
    options = parser.parse_args()
    scale = 0.2 if options.small else 1.0

    conf = local_cluster_conf("bench-feed", 2, 3072, "2g")
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        feed_rates(spark, "2 floats", pair_frame(spark, int(100_000 * scale)))
        feed_rates(spark, "784 floats + label", image_frame(spark, int(100_000 * scale)))
        training_steps(spark, int(20_000 * scale))
        peak_memory(spark, int(20_000 * scale))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
