"""InputMode.SPARK feed benchmarks, side by side on one local Spark cluster (2 executors, 2 TF workers).

    python bench/feed.py [--small]

1. Rows per second delivered into TF per worker, airflow-tfos against tensorflowonspark 2.2.5
   InputMode.SPARK (RDD -> DataFeed.next_batch(1024) -> NumPy), for rows of 2 floats and rows of
   784 floats + a label, on the same cached data, in alternating rounds. Both are timed from the
   driver's call (``run()``, ``TFCluster.train()``) until the last row has come out in the TF
   process; for airflow-tfos the TF processes' start-up (between the end of the spill and
   ``main_fun``) is left out, as TFoS's nodes are already up when ``train()`` is called. Counted for
   airflow-tfos: laying the rows out one partition per node (a Spark shuffle), reading them from
   Spark as Arrow and spilling them to local disk, and the first pass of the tf.data pipeline (printed with
   the TF process's CPU time over it, all its threads: near the pass's own time, the pass is work, not waiting).
   Beside them, the same rows laid out the same way (hash-partitioned on a node column) and drained
   into Python by a barrier task and thrown away: the most any consumer of Spark's JVM-to-Python
   Arrow path gets here; and the same again with the rows spilled by the feed's own code instead of
   thrown away, with no TF process beside it: the feed's path minus the TF processes importing
   TensorFlow on the same cores while the rows are spilled. One uncounted run of each comes first
   (Python workers and the JVM's compiled code warm up, for all of them).
2. Training steps per second of a small Keras model (784-128-10, MultiWorkerMirroredStrategy) fed
   from Spark, against the same model on the same workers fed from an in-memory tf.data pipeline
   of the same rows (the ceiling), both used the same way: one iterator for all epochs
   (``.repeat()`` and ``steps_per_epoch``), and ``fit(dataset, epochs=...)`` re-iterating the
   dataset each epoch. Rounds alternate between the models; medians are printed.
3. Peak resident memory of a worker (the Spark task that spills, and the TF process) at 1x and 10x
   the data size.
5. ``--types``: for a dense-vector column (100 values), a sparse-vector column (``OneHotEncoder`` of
   10,000 categories: one value set) and a string column (64 characters), the spill's size per worker
   and the rows per second per worker from the driver's call to the first pass's end, and replayed.
6. The direct path: the same rows written to Parquet files once (as a nightly task before training
   writes them) and given as ``spark.read.parquet(path)``: each node's TF process reads its share of
   the row groups itself, every epoch (``Feed(read="direct")``), skipping Spark's JVM-to-Python
   transfer, the layout shuffle and the spill. Timed like the DataFrame path (from the driver's call,
   the TF process's start-up left out: its first pass is the read), side by side with it in 1, 2
   and 3. Beside it, its ceiling: the same row-group shares (footers read on the driver, cut by the
   same code) decoded into NumPy by pyarrow alone in a barrier task per executor, with no TF process,
   timed the same way ("pyarrow alone").
4. ``--readers``: rows per second out of one node's share on local disk, in one process, for rows of
   784 floats + a label, batches of 256, shuffled: the ``from_generator`` pipeline over the Arrow
   spill (``ctx.dataset()``, MultiWorkerMirroredStrategy) against the fixed-width records read by
   TF's own ops (``ctx.dataset_fn``, parameter servers). Alternating rounds; medians are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
    started, cpu = time.time(), time.process_time()  # the TF process is up and its pipeline built
    for _x, _y in dataset:
        pass
    first_pass, first_pass_cpu = time.time() - started, time.process_time() - cpu
    started = time.time()
    for _x, _y in dataset:
        pass
    second_pass = time.time() - started
    _record(
        args["out"],
        ctx,
        {
            "rows": share.rows,
            "spill_started_at": share.spill_started_at,
            "spill_s": share.spill_seconds,
            "first_pass_s": first_pass,
            "first_pass_cpu_s": first_pass_cpu,  # all the TF process's threads
            "second_pass_s": second_pass,
            "spill_peak_rss_mb": share.spill_peak_rss_mb,
            "tf_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "spill_bytes": os.path.getsize(share.path) if share.path else 0,  # direct reads spill nothing
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

    from airflow_tfos.runtime.feed.dataset import for_workers

    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    def build():
        with strategy.scope():
            tf.keras.utils.set_random_seed(1)
            model = tf.keras.Sequential(
                [tf.keras.Input(shape=(784,)), tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)]
            )
            model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    steps = ctx.steps_per_epoch
    xs, ys = zip(*ctx.batches(), strict=True)
    share = ctx.feed_shares["train"]
    memory = for_workers(  # laid out for the workers as the fed dataset is: the same rows per step
        tf.data.Dataset.from_tensor_slices((np.concatenate(xs), np.concatenate(ys))).batch(
            share.feed.batch_size, drop_remainder=True
        ),
        share.workers,
    )
    fed = ctx.dataset()
    # name: (dataset, steps_per_epoch for fit); None re-iterates the finite dataset every epoch
    runs = {
        "fed repeat": (fed.repeat(), steps),
        "memory repeat": (memory.repeat().prefetch(tf.data.AUTOTUNE), steps),
        "fed per-epoch": (fed, None),
        "memory per-epoch": (memory.prefetch(tf.data.AUTOTUNE), None),
    }
    models = {name: build() for name in runs}
    for name, (dataset, steps_per_epoch) in runs.items():  # warm-up: traces the step functions
        models[name].fit(dataset, epochs=1, steps_per_epoch=steps_per_epoch, verbose=0)
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args["rounds"]):
        for name, (dataset, steps_per_epoch) in runs.items():
            started = time.time()
            models[name].fit(dataset, epochs=args["epochs"], steps_per_epoch=steps_per_epoch, verbose=0)
            rates[name].append(args["epochs"] * steps / (time.time() - started))
    _record(args["out"], ctx, rates)


def image_frame(spark, rows: int):
    frame = spark.range(0, rows, numPartitions=4).selectExpr(
        "transform(sequence(1, 784), i -> cast(((id * 31 + i) % 255) / 255.0 as float)) as x",
        "cast(id % 10 as int) as y",
    )
    return frame.cache()


def pair_frame(spark, rows: int):
    return spark.range(0, rows, numPartitions=4).selectExpr("array(rand(1), rand(2)) as x", "rand(3) as y").cache()


def parquet_copy(frame, folder: str):
    """``frame``'s rows written as Parquet files under ``folder`` (Spark's defaults), read back as a plain scan."""
    frame.write.mode("overwrite").parquet(folder)
    return frame.sparkSession.read.parquet(folder)


def run_ours(sc, frame, batch_size=1024, features="x", read="spark") -> list[dict]:
    from airflow_tfos.runtime import Feed, run

    out = tempfile.mkdtemp(prefix="bench-feed-ours-")
    feed = Feed(features=features, label="y", batch_size=batch_size, shuffle=False, cast_floats=None, read=read)
    called = time.time()
    run(sc, ours_feed_main, {"out": out}, num_nodes=2, data=frame, feed=feed, timeout=1200)
    for record in (records := _records(out)):
        record["layout_s"] = record["spill_started_at"] - called
        record["seconds"] = record["layout_s"] + record["spill_s"] + record["first_pass_s"]
    return records


def run_tfos(sc, rdd) -> list[dict]:
    from tensorflowonspark import TFCluster

    out = tempfile.mkdtemp(prefix="bench-feed-tfos-")
    cluster = TFCluster.run(
        sc, tfos_feed_main, {"out": out}, 2, 0, False, TFCluster.InputMode.SPARK, master_node="chief"
    )
    called = time.time()
    cluster.train(rdd, 1)
    cluster.shutdown(grace_secs=1)
    return [{"rows": r["rows"], "seconds": r["last"] - called} for r in _records(out)]


def _drain(batches):
    import pyarrow as pa

    rows = 0
    for batch in batches:
        rows += batch.num_rows
    yield pa.RecordBatch.from_pydict({"rows": [rows], "drained_at": [time.time()]})


def _spill(batches):
    """Our spill of a task's batches (checks, conversion, local Arrow file), with no TF process beside it."""
    import pyarrow as pa

    from airflow_tfos.runtime import Feed
    from airflow_tfos.runtime.feed.spark_side import spill_partition

    folder = tempfile.mkdtemp(prefix="bench-feed-spill-")
    try:
        feed = Feed(features="x", label="y", batch_size=1024, shuffle=False, cast_floats=None)
        info = spill_partition(batches, folder, feed, with_validation=False)["train"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    yield pa.RecordBatch.from_pydict({"rows": [info["rows"]], "drained_at": [time.time()]})


def run_spark_alone(frame, consume=_drain) -> list[dict]:
    """The same rows laid out on 2 barrier tasks as the feed lays them out (round-robin, hash-partitioned
    on a node column), drained into Python and thrown away (or, with ``consume=_spill``, spilled)."""
    from pyspark.sql import functions as F

    from airflow_tfos.runtime.feed.spark_side import partition_keys

    keys = partition_keys(2)
    pick = (F.pmod(F.monotonically_increasing_id(), F.lit(2)) + 1).cast("int")
    node = F.element_at(F.array(F.lit(keys[0]), F.lit(keys[1])), pick)
    called = time.time()
    laid_out = frame.withColumn("node", node).repartition(2, "node")
    done = laid_out.mapInArrow(consume, "rows long, drained_at double", barrier=True).collect()
    return [{"rows": r["rows"], "seconds": r["drained_at"] - called} for r in done]


def run_spark_alone_dealt_out(frame) -> list[dict]:
    """A frame already dealt out into one partition per barrier task, drained into Python as it is."""
    called = time.time()
    done = frame.mapInArrow(_drain, "rows long, drained_at double", barrier=True).collect()
    return [{"rows": r["rows"], "seconds": r["drained_at"] - called} for r in done]


def _read_share(shares):
    """pyarrow alone: a node's share of the Parquet row groups decoded into NumPy arrays, nothing else done
    (pyarrow's default reads, batches of 4,096 rows: as fast as any setting tried on these files)."""
    import numpy as np
    import pyarrow.parquet as pq

    from airflow_tfos.runtime.feed.parquet_reads import slice_batches, storage_path

    rows = 0
    for share in shares:
        handles = {}
        for part in share:
            if part.path not in handles:
                handles[part.path] = pq.ParquetFile(storage_path(part.path)[1])
            group = handles[part.path].metadata.row_group(part.row_group)
            about_4096_rows = 4096 * group.total_byte_size // group.num_rows
            for batch in slice_batches(handles[part.path], part, ["x", "y"], batch_bytes=about_4096_rows):
                np.asarray(batch.column(0).flatten().to_numpy(zero_copy_only=False)).reshape(batch.num_rows, -1)
                batch.column(1).to_numpy()
                rows += batch.num_rows
    yield {"rows": rows, "drained_at": time.time()}


def run_pyarrow_alone(files) -> list[dict]:
    """The direct path's ceiling: the same row-group shares as the direct path's (footers read on the driver,
    cut by the same code), each decoded by pyarrow into NumPy in a barrier task on its own executor, no TF."""
    from airflow_tfos.runtime import Feed
    from airflow_tfos.runtime.feed.direct import row_groups, scan_files, split_rows

    spark = files.sparkSession
    called = time.time()
    paths, _why = scan_files(files, Feed(features="x", label="y"))
    shares = split_rows(row_groups(paths), 2)
    nodes = spark.sparkContext.parallelize(range(2), 2)  # one element per partition: one node per task
    done = nodes.barrier().mapPartitions(lambda indexes: _read_share([shares[i] for i in indexes])).collect()
    return [{"rows": r["rows"], "seconds": r["drained_at"] - called} for r in done]


def _rates(records: list[dict]) -> list[float]:
    return [r["rows"] / r["seconds"] for r in records]


def feed_rates(spark, name: str, frame, rounds: int, folder: str) -> None:
    sc = spark.sparkContext
    total = frame.count()
    files = parquet_copy(frame, folder)
    rdd = frame.rdd.map(lambda row: (list(row.x), row.y)).cache()
    rdd.count()
    dealt = frame.repartition(2).cache()  # already one round-robin partition per node: no layout shuffle
    dealt.count()
    runs = {
        "tensorflowonspark": lambda: run_tfos(sc, rdd),
        "airflow-tfos": lambda: run_ours(sc, frame),
        "direct": lambda: run_ours(sc, files, read="direct"),
        "dealt out": lambda: run_ours(sc, dealt),
    }
    drains = {
        "spark alone": lambda: run_spark_alone(frame),
        "spark alone, dealt out": lambda: run_spark_alone_dealt_out(dealt),
        "spark and our spill, no TF process": lambda: run_spark_alone(frame, _spill),
        "pyarrow alone": lambda: run_pyarrow_alone(files),
    }
    results: dict[str, list[dict]] = {system: [] for system in (*runs, *drains)}
    for run_once in (*runs.values(), *drains.values()):  # warm-up, not counted
        run_once()
    for number in range(rounds):
        order = list(runs) if number % 2 == 0 else list(reversed(runs))
        for system in order:
            results[system] += runs[system]()
        for system, run_once in drains.items():
            results[system] += run_once()
    rdd.unpersist()
    dealt.unpersist()
    print(f"[{name}] {total} rows, 2 workers, {rounds} rounds")
    for r in results["tensorflowonspark"]:
        print(f"[{name}] tensorflowonspark: {r['rows']} rows in {r['seconds']:.2f} s")
    for r in results["airflow-tfos"]:
        print(
            f"[{name}] airflow-tfos: {r['rows']} rows in {r['seconds']:.2f} s: laid out (Spark shuffle) "
            f"{r['layout_s']:.2f} s, read from Spark and spilled {r['spill_s']:.2f} s, "
            f"into TF {r['first_pass_s']:.2f} s (CPU {r['first_pass_cpu_s']:.2f} s)"
        )
    for r in results["direct"]:
        print(
            f"[{name}] direct: {r['rows']} rows in {r['seconds']:.2f} s: planned and launched "
            f"{r['layout_s']:.2f} s, first rows probed {r['spill_s']:.2f} s, "
            f"read from the Parquet files into TF {r['first_pass_s']:.2f} s (CPU {r['first_pass_cpu_s']:.2f} s)"
        )
    for r in results["dealt out"]:
        print(
            f"[{name}] airflow-tfos, frame already dealt out: {r['rows']} rows in {r['seconds']:.2f} s: launched "
            f"{r['layout_s']:.2f} s, read from Spark and spilled {r['spill_s']:.2f} s, "
            f"into TF {r['first_pass_s']:.2f} s"
        )
    for system in drains:
        for r in results[system]:
            print(f"[{name}] {system}: {r['rows']} rows in {r['seconds']:.2f} s")
    medians = {system: statistics.median(_rates(records)) for system, records in results.items()}
    for system in ("tensorflowonspark", "airflow-tfos", "spark alone", "direct"):
        label = "tensorflowonspark=2.2.5" if system == "tensorflowonspark" else system
        print(f"feed_rows_per_s_per_worker[{name}] {label}: {medians[system]:,.0f}")
    ours, tfos, alone = medians["airflow-tfos"], medians["tensorflowonspark"], medians["spark alone"]
    direct = medians["direct"]
    print(f"feed_ratio[{name}] airflow-tfos/tensorflowonspark: {ours / tfos:.1f}")
    print(f"feed_ratio[{name}] spark-alone/tensorflowonspark: {alone / tfos:.1f}")
    print(f"feed_ratio[{name}] airflow-tfos/spark-alone: {ours / alone:.2f}")
    print(f"feed_ratio[{name}] direct/tensorflowonspark: {direct / tfos:.1f}")
    print(f"feed_ratio[{name}] direct/spark-alone: {direct / alone:.2f}")
    decoded = medians["pyarrow alone"]
    print(f"feed_rows_per_s_per_worker[{name}] pyarrow alone, the same row groups decoded into NumPy: {decoded:,.0f}")
    print(f"feed_ratio[{name}] pyarrow-alone/tensorflowonspark: {decoded / tfos:.1f}")
    print(f"feed_ratio[{name}] direct/pyarrow-alone: {direct / decoded:.2f}")
    spilled = medians["spark and our spill, no TF process"]
    print(f"feed_rows_per_s_per_worker[{name}] spark and our spill, no TF process importing beside it: {spilled:,.0f}")
    print(f"feed_ratio[{name}] spill without a TF process/spark-alone: {spilled / alone:.2f}")
    dealt_ours, dealt_alone = medians["dealt out"], medians["spark alone, dealt out"]
    print(f"feed_rows_per_s_per_worker[{name}] airflow-tfos, frame already dealt out: {dealt_ours:,.0f}")
    print(f"feed_rows_per_s_per_worker[{name}] spark alone, frame already dealt out: {dealt_alone:,.0f}")
    print(f"feed_ratio[{name}] airflow-tfos/spark-alone, frame already dealt out: {dealt_ours / dealt_alone:.2f}")
    for system, source in (("airflow-tfos", "replayed from local disk"), ("direct", "read from the files again")):
        replay = statistics.median(r["rows"] / r["second_pass_s"] for r in results[system])
        print(f"feed_rows_per_s_per_worker[{name}] {system} later epochs ({source}): {replay:,.0f}")


def training_steps(spark, rows: int, folder: str) -> None:
    from airflow_tfos.runtime import Feed, run

    frame = image_frame(spark, rows)
    frame.count()
    inputs = {"dataframe": (frame, "spark"), "direct": (parquet_copy(frame, folder), "direct")}
    for path, (data, read) in inputs.items():
        out = tempfile.mkdtemp(prefix="bench-steps-")
        feed = Feed(features="x", label="y", batch_size=64, shuffle=False, read=read)
        run(
            spark.sparkContext,
            ours_steps_main,
            {"out": out, "epochs": 3, "rounds": 5},
            num_nodes=2,
            data=data,
            feed=feed,
            timeout=1200,
        )
        records = _records(out)
        median = {name: statistics.median(v for r in records for v in r[name]) for name in records[0]}
        source = "from Spark" if path == "dataframe" else "from the Parquet files directly"
        for usage in ("repeat", "per-epoch"):
            fed, ceiling = median[f"fed {usage}"], median[f"memory {usage}"]
            print(f"train_steps_per_s[{path} {usage}] fed {source}: {fed:.1f}")
            print(f"train_steps_per_s[{path} {usage}] in-memory tf.data (ceiling): {ceiling:.1f}")
            print(f"train_steps_ratio[{path} {usage}] fed/ceiling: {fed / ceiling:.2f}")
    frame.unpersist()


def peak_memory(spark, rows: int, folder: str) -> None:
    peaks: dict[tuple[str, int], tuple[float, float]] = {}
    for factor in (1, 10):
        frame = image_frame(spark, rows * factor)
        frame.count()
        inputs = {"dataframe": (frame, "spark"), "direct": (parquet_copy(frame, f"{folder}/{factor}x"), "direct")}
        for path, (data, read) in inputs.items():
            records = run_ours(spark.sparkContext, data, read=read)
            peak = (max(r["spill_peak_rss_mb"] for r in records), max(r["tf_peak_rss_mb"] for r in records))
            peaks[path, factor] = peak
            print(
                f"peak_rss_mb[{path} {factor}x = {rows * factor} rows of 784 floats] spark task {peak[0]:.0f}, "
                f"TF process {peak[1]:.0f}"
            )
        frame.unpersist()
    for path in ("dataframe", "direct"):
        print(f"peak_rss_ratio[{path}] 10x/1x spark task: {peaks[path, 10][0] / peaks[path, 1][0]:.2f}")
        print(f"peak_rss_ratio[{path}] 10x/1x TF process: {peaks[path, 10][1] / peaks[path, 1][1]:.2f}")


def _image_spill(path: str, rows: int, feed) -> dict[str, int]:
    import numpy as np
    import pyarrow as pa

    from airflow_tfos.runtime.feed.spill import SpillWriter

    writer = SpillWriter(path, feed.columns)
    rng = np.random.default_rng(0)
    for start in range(0, rows, 10_000):
        n = min(10_000, rows - start)
        offsets = pa.array(np.arange(n + 1, dtype=np.int32) * 784)
        images = pa.ListArray.from_arrays(offsets, pa.array(rng.random(n * 784, dtype=np.float32)))
        writer.write(pa.record_batch({"image": images, "label": pa.array(rng.integers(0, 10, n))}))
    return writer.close().widths


def reader_rates(rows: int, rounds: int) -> None:
    """Rows/s of one full shuffled pass: the generator over the Arrow spill against TF's record reader."""

    from airflow_tfos.runtime import Feed
    from airflow_tfos.runtime.feed.dataset import FeedShare, make_dataset
    from airflow_tfos.runtime.feed.native import NativeShares, record_columns, write_records
    from airflow_tfos.runtime.feed.spill import read_batches

    feed = Feed(features="image", label="label", batch_size=256)
    steps = rows // feed.batch_size
    with tempfile.TemporaryDirectory() as tmp:
        spill = os.path.join(tmp, "train.arrow")
        widths = _image_spill(spill, rows, feed)
        share = FeedShare("train", spill, rows, steps, widths, feed)
        columns = record_columns(feed, {"image": "<f4", "label": "<i8"}, widths)
        native = NativeShares("train", columns, steps * feed.batch_size, steps, 1, feed)
        started = time.monotonic()
        write_records(read_batches(spill), columns, os.path.join(tmp, native.file_name))
        seconds = time.monotonic() - started
        print(f"readers: {rows} rows rewritten as {native.record_bytes}-byte records in {seconds:.2f} s")
        here = os.getcwd()
        os.chdir(tmp)  # the record file is opened by its relative name, as on a worker
        try:
            pipelines = {
                "generator (ctx.dataset)": lambda: make_dataset(share),
                "records (ctx.dataset_fn)": lambda: native.build(False),
            }
            rates: dict[str, list[float]] = {name: [] for name in pipelines}
            for build in pipelines.values():  # one uncounted pass each
                for _ in build():
                    pass
            for _ in range(rounds):
                for name, build in pipelines.items():
                    dataset = build()
                    started = time.monotonic()
                    count = sum(int(y.shape[0]) for _x, y in dataset)
                    rates[name].append(count / (time.monotonic() - started))
        finally:
            os.chdir(here)
    for name, values in rates.items():
        each = ", ".join(f"{v:,.0f}" for v in values)
        print(f"readers: {name}: median {statistics.median(values):,.0f} rows/s ({each})")


def typed_frames(spark, rows: int) -> dict:
    """A dense-vector, a sparse-vector and a string column, each with a label ``y``, cached."""
    from pyspark.ml.feature import OneHotEncoder
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    base = spark.range(0, rows, numPartitions=4)
    dense = base.select(
        array_to_vector(F.expr("transform(sequence(1, 100), i -> cast((id * 31 + i) % 255 as double))")).alias("x"),
        F.expr("cast(id % 10 as int) as y"),
    )
    codes = base.selectExpr("cast(id % 10000 as double) as c", "cast(id % 10 as int) as y")
    sparse = OneHotEncoder(inputCols=["c"], outputCols=["x"]).fit(codes).transform(codes).select("x", "y")
    strings = base.selectExpr("sha2(cast(id as string), 256) as x", "cast(id % 10 as int) as y")
    frames = {"dense vector[100]": dense, "sparse vector[10000], 1 set": sparse, "string[64]": strings}
    return {name: frame.cache() for name, frame in frames.items()}


def type_rates(spark, rows: int) -> None:
    """Spill size and rows/s per worker for vector and string columns (one run each, after a warm-up)."""
    frames = typed_frames(spark, rows)
    for frame in frames.values():
        frame.count()
    run_ours(spark.sparkContext, pair_frame(spark, 1000))  # warms up the Python workers and the JVM
    for name, frame in frames.items():
        records = run_ours(spark.sparkContext, frame)
        for r in records:
            print(
                f"[{name}] worker: {r['rows']} rows, spill {r['spill_bytes'] / 2**20:.1f} MiB "
                f"({r['spill_bytes'] / r['rows']:.0f} bytes/row), {r['rows'] / r['seconds']:,.0f} rows/s first pass "
                f"(spill {r['spill_s']:.2f} s), {r['rows'] / r['second_pass_s']:,.0f} rows/s replayed"
            )
        print(f"feed_rows_per_s_per_worker[{name}]: {statistics.median(_rates(records)):,.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a quick run on less data")
    parser.add_argument("--readers", action="store_true", help="only the two readers of a share, no Spark")
    parser.add_argument("--types", action="store_true", help="only vector and string columns")
    parser.add_argument("--rates", action="store_true", help="only the rates of 784-float rows")
    options = parser.parse_args()
    scale = 0.2 if options.small else 1.0
    if options.readers:
        reader_rates(int(100_000 * scale), rounds=3)
        return 0

    conf = local_cluster_conf("bench-feed", 2, 3072, "2g")
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    files = tempfile.mkdtemp(prefix="bench-feed-parquet-")  # the Parquet copies of the direct path
    try:
        if options.types:
            type_rates(spark, int(100_000 * scale))
            return 0
        if options.rates:
            feed_rates(spark, "784 floats + label", image_frame(spark, int(100_000 * scale)), 3, f"{files}/images")
            return 0
        feed_rates(spark, "2 floats", pair_frame(spark, int(100_000 * scale)), 3, f"{files}/pairs")
        feed_rates(spark, "784 floats + label", image_frame(spark, int(100_000 * scale)), 2, f"{files}/images")
        training_steps(spark, int(20_000 * scale), f"{files}/steps")
        peak_memory(spark, int(20_000 * scale), f"{files}/memory")
    finally:
        spark.stop()
        shutil.rmtree(files, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
