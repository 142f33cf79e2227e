"""A user's training module, beside their DAG (``lab_dags.py``): TFoSTrainOperator ships it as a zip, and the TF
nodes on YARN import it from there (the containers' Python has no copy of it).

InputMode.TENSORFLOW: each node reads its share of the Parquet files straight from HDFS (WebHDFS, served by the
DataNodes), fits y = x . [2, -3] + 1 with two workers, checkpoints, and exports.

For the failure drills (tests/integration/hadoop/test_drills_yarn.py), ``step_secs`` slows every step down, and
``freeze`` = ``{"attempt": A, "node": "worker:0", "step": S}`` makes that node, in that attempt, stop its own
executor's JVM with SIGSTOP once it reached step S and train on to the end (:func:`freeze_own_executor`; a
``drill_freeze`` event in the run directory names the JVM's pid).
"""

from __future__ import annotations

import os
import signal
import time

#: What the JVM that runs a Spark executor runs (``YarnCoarseGrainedExecutorBackend`` on YARN).
EXECUTOR_MAIN = b"CoarseGrainedExecutorBackend"


def freeze_own_executor() -> int:
    """Stop (SIGSTOP) the Spark executor JVM this TF node's process descends from; return its pid. The node's
    process is a process of its own and trains on; the JVM answers nothing any more (heartbeats, task ends)."""
    pid = os.getpid()
    while pid > 1:
        with open(f"/proc/{pid}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])  # the parent
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            if EXECUTOR_MAIN in cmdline.read():
                os.kill(pid, signal.SIGSTOP)
                return pid
    raise RuntimeError("this process runs in no Spark executor")


def drill_callbacks(args, ctx, checkpointer) -> list:
    """The drills' Keras callbacks: each step ``step_secs`` long, and the freeze ``args['freeze']`` names."""
    import tensorflow as tf

    from airflow_tfos.shared.rundir import RunDir

    freeze = args.get("freeze") or {}
    freezes = freeze.get("attempt") == ctx.attempt and freeze.get("node") == f"{ctx.job_name}:{ctx.task_index}"

    class Drill(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            global FROZEN
            time.sleep(args.get("step_secs", 0))
            if freezes and FROZEN is None and checkpointer.step >= freeze["step"]:
                FROZEN = freeze_own_executor()
                RunDir(ctx.run_dir).add_event("drill_freeze", pid=FROZEN, step=checkpointer.step, attempt=ctx.attempt)

    return [Drill()] if args.get("step_secs") or freezes else []


FROZEN: int | None = None


def train(args, ctx):
    import tensorflow as tf

    from airflow_tfos.runtime import RunCheckpointer, export_model, fit_resumable, parquet_dataset
    from airflow_tfos.shared.feed import Feed

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    feed = Feed(features="x", label="y", batch_size=args["batch_size"])
    files = ctx.shard_files(args["data"])
    with strategy.scope():
        tf.keras.utils.set_random_seed(7)
        model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
        model.compile(optimizer=tf.keras.optimizers.SGD(0.1), loss="mse")
    checkpointer = RunCheckpointer(ctx, model=model, every_steps=args["checkpoint_every"])
    histories = fit_resumable(
        model,
        parquet_dataset(files, feed, workers=ctx.num_workers),
        epochs=args["epochs"],
        steps_per_epoch=args["steps_per_epoch"],
        checkpointer=checkpointer,
        callbacks=drill_callbacks(args, ctx, checkpointer),
    )
    weights = [float(w) for w in model.get_weights()[0].ravel()]
    if histories:
        loss = histories[-1].history["loss"][-1]
    else:  # restored at the last step: nothing was fitted in this attempt
        loss = model.evaluate(parquet_dataset(files, feed, workers=ctx.num_workers), verbose=0)
    export_model(ctx, model, metrics={"loss": float(loss)})
    return {"weights": weights, "files": len(files)}


def sleep_long(args, ctx):
    """A lifecycle's program that never gets to serve: it sleeps until its application is killed."""
    time.sleep(600)
