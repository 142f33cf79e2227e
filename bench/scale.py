"""How cost grows with the TF cluster: 1, 2, 4 and 8 TF nodes on ``local-cluster[N,1,<small>]``.

For each size N, on a fresh local Spark cluster of N one-core executors (small memory), it measures:

1. launch: seconds from ``run()`` until every node has built its MultiWorkerMirroredStrategy (the
   nodes' ready marks), and the slowest node's TF import (:mod:`airflow_tfos.runtime.program.launch_times`);
2. steps/s: synchronous training steps per second of a small Keras model (8-16-1, batch 32 per node)
   on in-memory data, timed on the chief after one warm-up epoch;
3. feed rows/s per node: InputMode.SPARK, the same number of rows (2 floats + a label) per node, read
   from Spark as Arrow and spilled to local disk by each node's barrier task (rows / the task's reading
   seconds; the median node), and in all (rows / the slowest node's seconds).

and prints a table with each figure's ratio to 1 node. All N nodes share this machine's cores (printed):
beyond that count the nodes take turns on them, so per-node figures fall by design.

With ``--multihost`` (as root), the same on the multi-host cluster of ``airflow_tfos.testing.multihost``
instead: a Spark standalone master and 4 worker hosts (1 core each) as network namespaces of this machine, the
driver on a host of its own, each size on a fresh application of N one-core executors, one per worker host,
so that the TF nodes' collectives and the feed cross hosts. Sizes above 4 are left out. The hosts still
share this machine's cores.

    python bench/scale.py [--sizes 1,2,4,8] [--steps 30] [--rows-per-node 20000] [--multihost]
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

from airflow_tfos.runtime.program import launch_times

WORKER_MB = 640
EXECUTOR_MEMORY = "512m"


def _write(directory: str, name: str, record: dict) -> None:
    (Path(directory) / f"{name}.json").write_text(json.dumps(record))


def train_main(args, ctx):
    """Build the strategy (mark the time), then time synchronous steps of a small model."""
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    _write(args["out"], f"ready-{ctx.executor_id}", {"ready": time.time()})
    rng = np.random.default_rng(ctx.executor_id)
    x = rng.normal(size=(1024, 8)).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 0).astype("float32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat().with_options(options)
    with strategy.scope():
        model = tf.keras.Sequential(
            [tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(1)]
        )
        model.compile(optimizer="sgd", loss="mse")
    model.fit(dataset, epochs=1, steps_per_epoch=3, verbose=0)  # traces the step; not timed
    started = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=args["steps"], verbose=0)
    seconds = time.perf_counter() - started
    _write(args["out"], f"steps-{ctx.executor_id}", {"steps": args["steps"], "seconds": seconds})


def feed_main(args, ctx):
    """Report what this node's task read from Spark (no TensorFlow needed)."""
    share = ctx.feed_shares["train"]
    _write(args["out"], f"feed-{ctx.executor_id}", {"rows": share.rows, "seconds": share.spill_seconds})


def _records(directory: str, prefix: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(directory).glob(f"{prefix}-*.json"))]


def standalone_conf(app_name: str, master: str, executors: int):
    """SparkConf for ``executors`` one-core executors of a standalone master (one per worker host), the
    driver on this process's host (``SPARK_LOCAL_IP``)."""
    from pyspark import SparkConf

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return (
        SparkConf()
        .setMaster(master)
        .setAppName(app_name)
        .set("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
        .set("spark.executor.cores", "1")
        .set("spark.cores.max", str(executors))
        .set("spark.executor.memory", EXECUTOR_MEMORY)
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
    )


def measure(nodes: int, steps: int, rows_per_node: int, master: str | None = None) -> dict:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from airflow_tfos.runtime import Feed, run

    if master:
        conf = standalone_conf(f"bench-scale-{nodes}", master, nodes)
    else:
        conf = local_cluster_conf(f"bench-scale-{nodes}", nodes, WORKER_MB, EXECUTOR_MEMORY)
    conf.set("spark.sql.adaptive.enabled", "false")
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    out = tempfile.mkdtemp(prefix=f"bench-scale-{nodes}-")
    times_dir = Path(out) / "times"
    times_dir.mkdir()
    try:
        _wait_for_executors(sc, nodes)
        hosts = hosts_of_executors(sc)
        sc.parallelize(range(nodes), nodes).count()  # executors up before timing
        called = time.time()
        run(
            sc,
            train_main,
            {"out": out, "steps": steps},
            num_nodes=nodes,
            timeout=600,
            env={launch_times.LAUNCH_TIMES_ENV: str(times_dir)},
        )
        ready = [r["ready"] for r in _records(out, "ready")]
        if len(ready) != nodes:
            raise RuntimeError(f"expected {nodes} ready marks, got {len(ready)}")
        imports = [r["tf_imported"] - r["started"] for r in launch_times.read_records(str(times_dir))]
        chief = _records(out, "steps")[0]

        spark = SparkSession(sc)
        frame = (
            spark.range(0, rows_per_node * nodes, numPartitions=nodes)
            .selectExpr("array(rand(1), rand(2)) as x", "rand(3) as y")
            .cache()
        )
        frame.count()
        run(
            sc,
            feed_main,
            {"out": out},
            num_nodes=nodes,
            data=frame,
            feed=Feed(features="x", label="y", batch_size=256, shuffle=False),
            timeout=600,
        )
        fed = _records(out, "feed")
        frame.unpersist()
    finally:
        sc.stop()
        shutil.rmtree(out, ignore_errors=True)
    return {
        "launch_s": max(ready) - called,
        "tf_import_s": max(imports),
        "steps_per_s": chief["steps"] / chief["seconds"],
        "feed_rows_per_s_node": statistics.median(r["rows"] / r["seconds"] for r in fed),
        "feed_rows_per_s_all": sum(r["rows"] for r in fed) / max(r["seconds"] for r in fed),
        "hosts": hosts,
    }


def _wait_for_executors(sc, count: int, within: float = 120) -> None:
    """Until ``count`` executors registered (a standalone master starts them one by one)."""
    deadline = time.monotonic() + within
    while len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1 < count:  # the driver counts as one
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} executors registered within {within:.0f} s")
        time.sleep(0.5)


def hosts_of_executors(sc) -> list[str]:
    """The addresses the executors (and the driver) run on."""
    return sorted({info.host() for info in sc._jsc.sc().statusTracker().getExecutorInfos()})


COLUMNS = (
    ("launch_s", "launch s"),
    ("tf_import_s", "TF import s"),
    ("steps_per_s", "steps/s"),
    ("feed_rows_per_s_node", "feed rows/s/node"),
    ("feed_rows_per_s_all", "feed rows/s all"),
)


def format_table(results: dict[int, dict]) -> str:
    base = results[min(results)]
    header = f"{'nodes':>5} | " + " | ".join(f"{title:>16} {'(x1)':>6}" for _, title in COLUMNS)
    lines = [header, "-" * len(header)]
    for nodes, figures in sorted(results.items()):
        cells = [f"{figures[key]:>16.2f} {figures[key] / base[key]:>5.2f}x" for key, _ in COLUMNS]
        lines.append(f"{nodes:>5} | " + " | ".join(cells))
    return "\n".join(lines)


RESULT = "RESULT "


def on_multihost(sizes: list[int], steps: int, rows_per_node: int) -> dict[int, dict]:
    """Each size measured by a driver of its own on the multi-host cluster's driver host."""
    from airflow_tfos.testing.multihost import WORKERS, MultiHostLab

    kept = [n for n in sizes if n <= len(WORKERS)]
    if not kept:
        raise SystemExit(f"multi-host: {len(WORKERS)} worker hosts; give --sizes of at most {len(WORKERS)}")
    if kept != sizes:
        print(f"multi-host: {len(WORKERS)} worker hosts, so sizes {sorted(set(sizes) - set(kept))} are left out")
    results: dict[int, dict] = {}
    log_dir = tempfile.mkdtemp(prefix="bench-scale-multihost-")
    print(f"multi-host: the daemons' output goes to {log_dir}", flush=True)
    started = time.monotonic()
    with MultiHostLab(log_dir=log_dir) as lab:
        print(f"multi-host cluster up in {time.monotonic() - started:.0f} s:\n{lab.describe()}", flush=True)
        for nodes in kept:
            argv = [sys.executable, __file__, "--one", str(nodes), "--master", lab.master, "--steps", str(steps)]
            argv += ["--rows-per-node", str(rows_per_node)]
            began = time.monotonic()
            done = lab.hosts.run("driver", argv, timeout=900, env=lab.env("driver"), cwd=str(Path(__file__).parent))
            lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
            if done.returncode != 0 or not lines:
                raise RuntimeError(f"the {nodes}-node driver failed ({done.returncode}):\n{done.stderr[-5000:]}")
            results[nodes] = json.loads(lines[-1][len(RESULT) :])
            print(f"{nodes} node(s): {results[nodes]} ({time.monotonic() - began:.0f} s)", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,2,4,8", help="TF cluster sizes, comma separated")
    parser.add_argument("--steps", type=int, default=30, help="timed training steps")
    parser.add_argument("--rows-per-node", type=int, default=20000, help="rows fed to each node")
    parser.add_argument("--multihost", action="store_true", help="on the multi-host cluster (network namespaces)")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, on --master: a multi-host driver
    parser.add_argument("--master", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        figures = measure(options.one, options.steps, options.rows_per_node, options.master)
        print(RESULT + json.dumps(figures), flush=True)
        return 0
    sizes = [int(s) for s in options.sizes.split(",")]
    cores = os.cpu_count()
    print(f"{cores} CPU cores on this machine; executors of 1 core and {EXECUTOR_MEMORY}", flush=True)
    if options.multihost:
        results = on_multihost(sizes, options.steps, options.rows_per_node)
    else:
        results = {}
        for nodes in sizes:
            started = time.monotonic()
            results[nodes] = measure(nodes, options.steps, options.rows_per_node)
            print(f"{nodes} node(s): {results[nodes]} ({time.monotonic() - started:.0f} s)", flush=True)
    where = "one worker host each, on the multi-host cluster; " if options.multihost else ""
    print(f"ratio (x1): each figure over its value at {min(results)} node(s); {where}{cores} cores shared by all nodes")
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
