"""What a user writes to train on the multi-host cluster, kept as text and written into a temporary folder
(on no test path) by the tests and ``bench/recovery.py``: a training module and a Spark driver."""

from __future__ import annotations

import textwrap
from pathlib import Path

TRAINING = textwrap.dedent(
    '''
    """y = 3 x0 - 2 x1 + 1 on MultiWorkerMirroredStrategy, fed from Spark, checkpointed and exported."""
    import json
    import os
    import time


    def main(args, ctx):
        import tensorflow as tf

        from airflow_tfos.runtime import RunCheckpointer, export_model, fit_resumable
        from airflow_tfos.shared.rundir import RunDir

        RunDir(ctx.run_dir).add_event(
            "tf_config", node=f"{ctx.job_name}:{ctx.task_index}", attempt=ctx.attempt,
            tf_config=json.loads(os.environ["TF_CONFIG"]),
        )
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.Input(shape=(2,)), tf.keras.layers.Dense(1)])
            model.compile(optimizer=tf.keras.optimizers.SGD(0.3), loss="mse")
        checkpointer = RunCheckpointer(ctx, model=model, every_steps=args["every"])

        class Pace(tf.keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                time.sleep(args.get("sleep", 0))

        histories = fit_resumable(
            model, ctx.dataset(), epochs=args["epochs"], steps_per_epoch=ctx.steps_per_epoch,
            checkpointer=checkpointer, callbacks=[Pace()], verbose=0,
        )
        loss = float(histories[-1].history["loss"][-1]) if histories else None
        hold = args.get("hold_export_until")
        if hold and ctx.attempt >= 1:  # a drill's: a later attempt exports once the file exists (2 min at most)
            deadline = time.monotonic() + 120
            while not os.path.exists(hold) and time.monotonic() < deadline:
                time.sleep(0.2)
        export_model(ctx, model, metrics={"loss": loss})
        kernel, bias = model.get_weights()
        return {"step": checkpointer.step, "loss": loss, "attempt": ctx.attempt,
                "weights": [float(v) for v in kernel[:, 0]] + [float(bias[0])]}
    '''
)

DRIVER = textwrap.dedent(
    '''
    """python drive.py <master> <run_dir> <parquet> [args-json] [run-options-json]"""
    import json
    import os
    import sys

    from pyspark.sql import SparkSession

    import my_training
    from airflow_tfos.runtime import TFClusterRun
    from airflow_tfos.runtime.driver.entry import write_report_safely
    from airflow_tfos.runtime.feed import Feed
    from airflow_tfos.shared.rundir import RunDir

    master, run_dir, data = sys.argv[1:4]
    args = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {"epochs": 4, "every": 10}
    options = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}
    spark_conf = options.pop("spark_conf", {})
    here = os.environ["SPARK_LOCAL_IP"]
    builder = (
        SparkSession.builder.master(master).appName("multihost training")
        .config("spark.driver.host", here).config("spark.driver.bindAddress", here)
        .config("spark.cores.max", "3").config("spark.executor.memory", "640m").config("spark.ui.enabled", "false")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .config("spark.executorEnv.TF_CPP_MIN_LOG_LEVEL", "2")
    )
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        frame = spark.read.parquet(data)
        tf_run = TFClusterRun(
            spark.sparkContext, my_training.main, args, num_nodes=3, run_dir=run_dir, data=frame,
            feed=Feed(features="x", label="y", batch_size=16), **options,
        )
        result = tf_run.start().wait(options.get("timeout", 600))
        write_report_safely(RunDir(run_dir))
        print("RESULT " + json.dumps(result), flush=True)
    finally:
        spark.stop()
    '''
)


def write_user_code(folder: Path) -> Path:
    """Write ``my_training.py`` and ``drive.py`` into ``folder``; return it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "my_training.py").write_text(TRAINING)
    (folder / "drive.py").write_text(DRIVER)
    return folder
