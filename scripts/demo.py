"""The demo: train a digit classifier with 2 TF workers on a local Spark cluster; print its accuracy.

Run by ``make demo``. Spark runs as ``local-cluster[2,1,2048]``: a master, two workers and two executor
JVMs on this machine, each executor hosting one TF node (chief and worker) in one barrier stage.
"""

from __future__ import annotations

import logging
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark import SparkConf, SparkContext

    from airflow_tfos.runtime import run
    from airflow_tfos.runtime.examples.digits import DigitsArgs, main_fun

    conf = (
        SparkConf()
        .setMaster("local-cluster[2,1,2048]")
        .setAppName("airflow-tfos-demo")
        .set("spark.driver.host", "127.0.0.1")
        .set("spark.executor.memory", "1g")
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
    )
    print("Starting a local Spark cluster (2 executors) ...", flush=True)
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    started = time.monotonic()
    try:
        args = DigitsArgs()
        print(f"Training on scikit-learn's digits with 2 TF workers, {args.epochs} epochs ...", flush=True)
        result = run(sc, main_fun, args, num_nodes=2, timeout=900)
    finally:
        sc.stop()
    print()
    print(f"  workers:            {result['workers']} (MultiWorkerMirroredStrategy, Keras)")
    steps = result["steps_per_epoch"]
    print(f"  training examples:  {result['train_examples']} ({steps} steps/epoch per worker)")
    print(f"  final training loss {result['final_loss']:.4f}")
    print(f"  TEST ACCURACY:      {result['test_accuracy']:.4f}")
    print(f"  wall time:          {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
