"""Which rows each epoch trains under parameter servers when one worker is slow: programs and their driver.

    python -m tests.support.ps_visitation <run_dir> <scenario>...

Starts ``local-cluster[4,1,...]`` (ps, chief, 2 workers) and runs each scenario, printing
``RESULT <scenario> <json>``. Worker 1 reads its batches ``SLOW_US`` microseconds late (a sleep in its own
pipeline, after the feed), so the coordinator hands worker 0 more steps. The chief counts, in a variable on
the parameter server, how often each id is trained on, epoch by epoch, two ways: ``ctx.dataset_fn`` with one
iterator and ``steps_per_epoch`` steps of ``next`` per epoch (Keras ``fit``'s way), and ``ctx.epoch_dataset_fn``
with an iterator per epoch and ``get_next_as_optional`` until ``steps_per_epoch`` batches were counted.
Scenarios: ``frame`` (a DataFrame fed from Spark), ``parquet`` (the same rows read directly from Parquet
files), ``files`` (InputMode.TENSORFLOW: TFRecord files read by the workers), ``resume`` (epoch loop with a
checkpoint at each epoch's end; a test kills worker 0 mid-epoch), and the visitation matrix's cells
``cell-<frame|parquet>-<drop|pad>-<shuffle|ordered>`` (one epoch each, the workers' shares uneven).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path

from tests.conftest import local_cluster_conf
from tests.support.ps_driver import FILE_BATCH, FILE_ROWS, write_id_files
from tests.support.ps_programs import _write

#: The issue's setting: 3,000 rows whose id is the row's number, batches of 50.
ROWS, BATCH = 3000, 50
#: Rows of a matrix cell: the two workers' shares (502 and 501 rows) fill no whole number of batches.
CELL_ROWS = 1003
#: How late worker 1 reads each batch, in microseconds.
SLOW_US = 30000
#: Written by each worker in its working directory: its pid, and how late it reads (read by the pipeline).
PID_FILE, DELAY_FILE = "pid.txt", "delay_us.txt"


def _serve(ctx) -> None:
    import tensorflow as tf

    if ctx.job_name == "worker":
        Path(PID_FILE).write_text(str(os.getpid()))
        Path(DELAY_FILE).write_text(str(SLOW_US if ctx.task_index == 1 else 0))
        _write(ctx, "node", {"pid": os.getpid(), "host": ctx.host, "attempt": ctx.attempt})
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    tf.distribute.Server(
        resolver.cluster_spec(), job_name=ctx.job_name, task_index=ctx.task_index, protocol="grpc", start=True
    ).join()


def _slowed(dataset_fn):
    """``dataset_fn`` whose batches carry the pid of the worker that takes them, and reach worker 1 late."""

    def slowed(input_context=None):
        import tensorflow as tf
        from tensorflow.python.data.experimental.ops import testing

        delay = tf.strings.to_number(tf.io.read_file(DELAY_FILE), tf.int64)
        batches = dataset_fn(input_context).map(lambda x, ids: (ids, tf.io.read_file(PID_FILE)))
        return batches.apply(testing.sleep(delay))

    return slowed


class Counter:
    """Counts of each id trained on, in a variable on the parameter server, and the loops that train."""

    def __init__(self, strategy, coordinator, max_id: int):
        import tensorflow as tf

        self.coordinator = coordinator
        with strategy.scope():
            self.counts = tf.Variable(tf.zeros([max_id + 1], tf.int32))
        counts = self.counts

        @tf.function
        def take(iterator):
            ids, pid = next(iterator)
            counts.scatter_nd_add(tf.expand_dims(ids, 1), tf.ones_like(ids, tf.int32))
            return pid

        @tf.function
        def take_optional(iterator):
            batch = iterator.get_next_as_optional()

            def train():
                ids, pid = batch.get_value()
                counts.scatter_nd_add(tf.expand_dims(ids, 1), tf.ones_like(ids, tf.int32))
                return pid

            return tf.cond(batch.has_value(), train, lambda: tf.constant(""))

        self.take, self.take_optional = take, take_optional

    def snapshot(self) -> list[int]:
        return [int(c) for c in self.counts.numpy()]

    def epoch(self, iterator, steps: int, optional: bool) -> dict:
        """Train one epoch; return the batches each worker (pid) took and the time it took."""
        started, pids, batches = time.time(), {}, 0
        while batches < steps:
            step = self.take_optional if optional else self.take
            results = [self.coordinator.schedule(step, args=(iterator,)) for _ in range(steps - batches)]
            self.coordinator.join()
            for result in results:
                pid = result.fetch().decode()
                if pid:
                    pids[pid] = pids.get(pid, 0) + 1
                    batches += 1
        return {"batches_by_pid": pids, "seconds": round(time.time() - started, 3)}


def _epochs(counter: Counter, per_worker, steps: int, epochs: int, optional: bool) -> list[dict]:
    """Run ``epochs`` epochs; each record holds the counts of that epoch alone."""
    records, before = [], counter.snapshot()
    iterator = iter(per_worker)
    for epoch in range(epochs):
        if optional and epoch:
            iterator = iter(per_worker)  # an iterator per epoch, each one pass
        record = counter.epoch(iterator, steps, optional)
        after = counter.snapshot()
        record["counts"] = [a - b for a, b in zip(after, before, strict=True)]
        before = after
        records.append(record)
    return records


def _coordinator():
    import tensorflow as tf

    strategy = tf.distribute.experimental.ParameterServerStrategy(
        tf.distribute.cluster_resolver.TFConfigClusterResolver()
    )
    return strategy, tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)


def visit(args, ctx):
    """Count the ids each epoch trains on, with ``ctx.dataset_fn`` and with ``ctx.epoch_dataset_fn`` (or the
    same of ``ctx.worker_files`` when ``args['pattern']`` names files)."""
    import tensorflow as tf

    if ctx.job_name in ("ps", "worker"):
        _serve(ctx)
        return None
    strategy, coordinator = _coordinator()
    if args.get("pattern"):
        files = ctx.worker_files(args["pattern"])

        def read(names):
            ids = tf.data.TFRecordDataset(names).map(lambda record: tf.strings.to_number(record, tf.int64))
            return ids.batch(args["batch_size"]).map(lambda ids: (tf.cast(ids, tf.float64)[:, None], ids))

        steps = files.steps_per_epoch(read)
        endless, epoch_fn = files.dataset_fn(read), files.epoch_dataset_fn(read)
    else:
        steps, endless, epoch_fn = ctx.steps_per_epoch, ctx.dataset_fn, ctx.epoch_dataset_fn
    result = {"steps_per_epoch": steps, "chief_pid": os.getpid(), "returned_at": 0.0}
    styles = (("endless", endless, False), ("per_epoch", epoch_fn, True))
    for name, fn, optional in (s for s in styles if s[0] in args.get("styles", ("endless", "per_epoch"))):
        counter = Counter(strategy, coordinator, args["max_id"])
        per_worker = coordinator.create_per_worker_dataset(_slowed(fn))
        result[name] = _epochs(counter, per_worker, steps, args.get("epochs", 2), optional)
    result["returned_at"] = time.time()
    return result


def resume(args, ctx):
    """Epochs of ``ctx.epoch_dataset_fn`` (an iterator per epoch), the counts and the epoch number saved in a
    checkpoint at each epoch's end and restored by a new attempt, which starts the next epoch not yet saved
    from its beginning. Progress (epoch, batches, attempt) is written after every step so that a test can
    kill a worker mid-epoch; each attempt records the counts it restored and those of every epoch it ran."""
    import tensorflow as tf

    if ctx.job_name in ("ps", "worker"):
        _serve(ctx)
        return None
    strategy, coordinator = _coordinator()
    counter = Counter(strategy, coordinator, args["max_id"])
    with strategy.scope():
        epoch = tf.Variable(0, dtype=tf.int64)
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(counts=counter.counts, epoch=epoch), str(Path(ctx.run_dir) / "ckpt"), max_to_keep=2
    )
    manager.restore_or_initialize()
    _write(ctx, f"restored{ctx.attempt}", {"epoch": int(epoch.numpy()), "counts": counter.snapshot()})
    per_worker = coordinator.create_per_worker_dataset(_slowed(ctx.epoch_dataset_fn))
    progress = Path(ctx.run_dir) / "progress-chief.json"
    while int(epoch.numpy()) < args["epochs"]:
        iterator = iter(per_worker)
        batches = 0
        while batches < ctx.steps_per_epoch:
            batches += bool(coordinator.schedule(counter.take_optional, args=(iterator,)).fetch())
            progress.write_text(json.dumps({"epoch": int(epoch.numpy()), "batches": batches, "attempt": ctx.attempt}))
            time.sleep(args.get("sleep", 0.05))
        epoch.assign_add(1)
        manager.save(checkpoint_number=int(epoch.numpy()))
        _write(ctx, f"epoch{int(epoch.numpy())}-a{ctx.attempt}", {"counts": counter.snapshot()})
    return {"counts": counter.snapshot(), "attempt": ctx.attempt, "returned_at": time.time()}


def id_frame(spark, rows: int = ROWS):
    """``rows`` rows: ``x`` (the id as an array of one double) and ``id``, the row's number."""
    return spark.range(0, rows, numPartitions=3).selectExpr("array(cast(id as double)) as x", "id")


def run_cell(sc, spark, cell: str, **kwargs):
    """A cell of the visitation matrix: ``cell-<frame|parquet>-<drop|pad>-<shuffle|ordered>``, CELL_ROWS rows
    (the workers' shares fill no whole number of batches), one epoch of ``ctx.epoch_dataset_fn``."""
    from airflow_tfos.runtime import TFClusterRun
    from airflow_tfos.shared.feed import Feed

    _, source, balance, order = cell.split("-")
    feed = Feed(features="x", label="id", batch_size=BATCH, balance=balance, shuffle=order == "shuffle")
    data = id_frame(spark, CELL_ROWS)
    if source == "parquet":
        path = str(Path(kwargs["run_dir"]) / "ids.parquet")
        data.write.parquet(path)
        data, feed = spark.read.parquet(path), dataclasses.replace(feed, read="direct")
    args = {"max_id": CELL_ROWS, "epochs": 1, "styles": ["per_epoch"]}
    return TFClusterRun(sc, visit, args, data=data, feed=feed, **kwargs)


def run_scenario(sc, spark, run_dir: str, scenario: str) -> dict:
    from airflow_tfos.runtime import TFClusterRun
    from airflow_tfos.shared.feed import Feed

    kwargs = {"num_nodes": 4, "num_ps": 1, "run_dir": run_dir}
    feed = Feed(features="x", label="id", batch_size=BATCH, balance="drop", shuffle=False)
    if scenario.startswith("cell-"):
        run = run_cell(sc, spark, scenario, **kwargs)
    elif scenario == "frame":
        run = TFClusterRun(sc, visit, {"max_id": ROWS}, data=id_frame(spark), feed=feed, **kwargs)
    elif scenario == "parquet":
        path = str(Path(run_dir) / "ids.parquet")
        id_frame(spark).write.parquet(path)
        data = spark.read.parquet(path)
        run = TFClusterRun(
            sc, visit, {"max_id": ROWS}, data=data, feed=dataclasses.replace(feed, read="direct"), **kwargs
        )
    elif scenario == "files":
        args = {"pattern": write_id_files(Path(run_dir) / "data"), "batch_size": FILE_BATCH}
        run = TFClusterRun(sc, visit, {**args, "max_id": 3 * sum(FILE_ROWS)}, **kwargs)
    elif scenario == "resume":
        args = {"max_id": ROWS, "epochs": 3}
        run = TFClusterRun(sc, resume, args, data=id_frame(spark), feed=feed, max_attempts=3, **kwargs)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    return {**run.start().wait(400), "run_id": run.cluster_id}


def main(run_dir: str, scenarios: list[str], master: str | None = None) -> int:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    logging.basicConfig(level=logging.INFO, format="%(levelname)s [%(name)s] %(message)s", stream=sys.stderr)
    conf = local_cluster_conf(4, app_name="airflow-tfos-ps-visitation").set("spark.executor.memory", "640m")
    if master:  # a standalone master (the multi-host lab): this host's address, one core per worker host
        here = os.environ["SPARK_LOCAL_IP"]
        conf.setMaster(master).set("spark.driver.host", here).set("spark.driver.bindAddress", here)
        conf.set("spark.cores.max", "4")
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    spark = SparkSession(sc)
    try:
        for scenario in scenarios:
            scenario_dir = Path(run_dir) / scenario
            scenario_dir.mkdir(parents=True, exist_ok=True)
            result = run_scenario(sc, spark, str(scenario_dir), scenario)
            sys.stdout.write(f"RESULT {scenario} {json.dumps(result)}\n")
            sys.stdout.flush()
    finally:
        sc.stop()
    return 0


def check_cell(result: dict, cell_dir: Path, log: str) -> dict:
    """Assert what a cell promises; return the feed's balance per worker. One epoch of ``ctx.epoch_dataset_fn``,
    worker 1 slowed; the workers' shares (502 and 501 rows) fill no whole number of batches of 50, so balance
    drops or repeats rows, and says how many on which worker (its ``feed`` event and the driver's log)."""
    from tests.support.helpers import feed_balance, logged_balance, read_records, report_visitation

    (record,) = result["per_epoch"]
    counts = record["counts"][:CELL_ROWS]
    balance = feed_balance(str(cell_dir))
    assert set(balance) == {"worker:0", "worker:1"} and sum(b["rows"] for b in balance.values()) == CELL_ROWS
    logged = logged_balance(log, result["run_id"])
    assert logged == {node: {k: b[k] for k in ("rows", "repeated", "dropped")} for node, b in balance.items()}
    repeated = sum(b["repeated"] for b in balance.values())
    dropped = sum(b["dropped"] for b in balance.values())
    if "-drop-" in cell_dir.name:
        assert (repeated, dropped) == (0, 3)  # 502 - 500 and 501 - 500
    else:
        assert (repeated, dropped) == (97, 0)  # 550 - 502 and 550 - 501
    # Every id once, except exactly the rows balance left out (never trained) or repeated (trained twice).
    assert sum(counts) == sum(b["rows_per_epoch"] for b in balance.values()) == result["steps_per_epoch"] * BATCH
    assert counts.count(0) == dropped and sum(c - 1 for c in counts if c) == repeated and max(counts) <= 2
    trained = [i for i, c in enumerate(counts) for _ in range(c)]
    report_visitation(f"ps-{cell_dir.name.removeprefix('cell-')}", trained, sum(range(CELL_ROWS)), repeated, dropped)
    # However slow worker 1 was: the fast worker took more batches, the epoch still trained every row.
    nodes = read_records(str(cell_dir), "node")
    fast, slow = (str(nodes[f"worker:{i}"]["pid"]) for i in range(2))
    taken = record["batches_by_pid"]  # the slow worker may have taken none: the fast one read its share too
    assert taken.get(fast, 0) > taken.get(slow, 0) and sum(taken.values()) == result["steps_per_epoch"], taken
    return balance


if __name__ == "__main__":
    argv = sys.argv[1:]
    master = argv.pop(argv.index("--master") + 1) if "--master" in argv else None
    if master:
        argv.remove("--master")
    sys.exit(main(argv[0], argv[1:], master))
