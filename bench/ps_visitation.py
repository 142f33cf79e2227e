"""Under parameter servers: rows/s per worker of each worker reading its own share, against the tf.data service.

    python bench/ps_visitation.py [--rows 24000] [--width 64] [--batch 100] [--epochs 3] [--slow-us 20000]

One Spark driver, ``local-cluster[4,1,...]``: ps, chief and 2 workers, fed ``rows`` rows of ``width`` float32
and an id from a DataFrame. In one run, the chief trains ``epochs`` epochs of each way, in turn, both with the
workers at the same speed and with worker 1 reading each batch ``slow-us`` microseconds late:

- ``own share`` (what the workers did before): each worker's dataset yields its own share, one pass per
  iterator, and the chief schedules steps (``get_next_as_optional``) until every batch was taken;
- ``tf.data service``: ``ctx.epoch_dataset_fn``, each batch to whichever worker asks first.

Each step adds its batch's ids into a variable on the parameter server (so every row counts), and the
last column says whether every epoch trained every id exactly once. Prints, per way and speed, rows/s of
the worker that took more batches and of the other (batches taken times the batch size, over the epochs'
seconds) and of both together.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, local_cluster_conf

sys.path.insert(0, str(REPO))


def bench_program(args, ctx):
    """On the chief: every way and speed in turn; workers and the ps serve."""
    import tensorflow as tf
    from tensorflow.python.data.experimental.ops import testing

    if ctx.job_name in ("ps", "worker"):
        if ctx.job_name == "worker":
            Path("pid.txt").write_text(str(os.getpid()))
            Path("slow_us.txt").write_text(str(args["slow_us"] if ctx.task_index == 1 else 0))
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        tf.distribute.Server(
            resolver.cluster_spec(), job_name=ctx.job_name, task_index=ctx.task_index, protocol="grpc", start=True
        ).join()
        return None
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver()
    )
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    rows, steps = args["rows"], ctx.steps_per_epoch
    ways = {
        "own share": ctx.feed_shares["train"].native.dataset_fn(repeat=False),
        "tf.data service": ctx.epoch_dataset_fn,
    }
    results = []
    for slowed in (False, True):
        for way, dataset_fn in ways.items():
            with strategy.scope():
                counts = tf.Variable(tf.zeros([rows], tf.int32))

            def tagged(input_context=None, dataset_fn=dataset_fn, slowed=slowed):
                batches = dataset_fn(input_context).map(lambda x, ids: (ids, tf.io.read_file("pid.txt")))
                if not slowed:
                    return batches
                return batches.apply(testing.sleep(tf.strings.to_number(tf.io.read_file("slow_us.txt"), tf.int64)))

            step = _step(counts)
            per_worker = coordinator.create_per_worker_dataset(tagged)
            for epoch in range(args["epochs"] + 1):  # the first one warms up (traces, starts the jobs)
                iterator = iter(per_worker)
                before = counts.numpy()
                started, taken, batches = time.perf_counter(), {}, 0
                while batches < steps:
                    scheduled = [coordinator.schedule(step, args=(iterator,)) for _ in range(steps - batches)]
                    coordinator.join()
                    for result in scheduled:
                        pid = result.fetch().decode()
                        if pid:
                            taken[pid] = taken.get(pid, 0) + 1
                            batches += 1
                seconds = time.perf_counter() - started
                exact = bool(((counts.numpy() - before) == 1).all())
                if epoch:
                    results.append({"way": way, "slowed": slowed, "seconds": seconds, "taken": taken, "exact": exact})
    return {"results": results, "batch": args["batch"], "steps_per_epoch": steps}


def _step(counts):
    """A step that adds its batch's ids into ``counts``, and returns the pid of the worker that took it."""
    import tensorflow as tf

    @tf.function
    def step(iterator):
        batch = iterator.get_next_as_optional()

        def train():
            ids, pid = batch.get_value()
            counts.scatter_nd_add(tf.expand_dims(ids, 1), tf.ones_like(ids, tf.int32))
            return pid

        return tf.cond(batch.has_value(), train, lambda: tf.constant(""))

    return step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=24000)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--slow-us", type=int, default=20000)
    opts = parser.parse_args()
    conf = local_cluster_conf("airflow-tfos-bench-ps-visitation", 4, 1024, "640m")
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from airflow_tfos.runtime import Feed, TFClusterRun

    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    spark = SparkSession(sc)
    try:
        data = spark.range(0, opts.rows, numPartitions=4).selectExpr(
            f"array_repeat(cast(id as float), {opts.width}) as x", "id"
        )
        feed = Feed(features="x", label="id", batch_size=opts.batch, balance="drop", shuffle=False)
        args = {"rows": opts.rows, "batch": opts.batch, "epochs": opts.epochs, "slow_us": opts.slow_us}
        with tempfile.TemporaryDirectory(prefix="bench-ps-visitation-") as run_dir:
            run = TFClusterRun(sc, bench_program, args, num_nodes=4, num_ps=1, run_dir=run_dir, data=data, feed=feed)
            out = run.start().wait(600)
    finally:
        sc.stop()
    batch = out["batch"]
    print(f"{opts.rows} rows of {opts.width} float32, batches of {batch}, {out['steps_per_epoch']} steps an epoch")
    print(f"{'way':<16} {'worker 1':<14} {'rows/s: busier worker':>22} {'other':>8} {'both':>8}  every row once")
    for slowed in (False, True):
        for way in ("own share", "tf.data service"):
            runs = [r for r in out["results"] if r["way"] == way and r["slowed"] == slowed]
            seconds = sum(r["seconds"] for r in runs)
            taken: dict[str, int] = {}
            for r in runs:
                for pid, count in r["taken"].items():
                    taken[pid] = taken.get(pid, 0) + count
            rates = sorted((count * batch / seconds for count in taken.values()), reverse=True)
            speed = f"{opts.slow_us / 1000:g} ms late" if slowed else "same speed"
            exact = all(r["exact"] for r in runs)
            print(f"{way:<16} {speed:<14} {rates[0]:>22,.0f} {rates[-1]:>8,.0f} {sum(rates):>8,.0f}  {exact}")
    print(json.dumps(out["results"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
