"""A Spark driver run as its own process by tests that need a fresh SparkContext or a signal.

    python -m tests.integration.spark.driver_script <scenario> <run_dir>

Scenarios: ``sleep`` (runs until interrupted), ``gpu`` (a local cluster whose workers discover a
stub GPU through a discovery script), ``recover`` (checkpointed training that a test disturbs), ``stall``
(the same, with a stall watchdog of 4 s and one checkpoint save of 6 s), ``freeze`` (the same, one node's
executor JVM stopped while its TF process trains on to the end), ``remote`` (the same training, its run directory
a URI such as ``hdfs://``, the storage's log on stderr).
"""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
import time
from pathlib import Path

from tests.conftest import local_cluster_conf
from tests.support import programs


def gpu_conf(run_dir: Path):
    script = run_dir / "discover_gpu.sh"
    script.write_text('#!/bin/sh\necho \'{"name": "gpu", "addresses": ["7"]}\'\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    conf = local_cluster_conf(2, app_name="airflow-tfos-gpu-stub")
    for key, value in {
        "spark.worker.resource.gpu.amount": "1",
        "spark.worker.resource.gpu.discoveryScript": str(script),
        "spark.executor.resource.gpu.amount": "1",
        "spark.task.resource.gpu.amount": "1",
    }.items():
        conf.set(key, value)
    return conf


def main(scenario: str, run_dir: str) -> int:
    from pyspark import SparkContext

    from airflow_tfos.runtime import TFClusterRun

    conf = gpu_conf(Path(run_dir)) if scenario == "gpu" else local_cluster_conf(2, app_name="airflow-tfos-driver")
    if scenario == "freeze":  # three one-core executors for two nodes: a replacement starts on the spare
        conf = local_cluster_conf(3, app_name="airflow-tfos-driver").set("spark.cores.max", "2")
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    try:
        if scenario == "sleep":
            tf_run = TFClusterRun(sc, programs.sleep_forever, num_nodes=2, run_dir=run_dir).start()
            print(f"RUN_ID {tf_run.cluster_id}", flush=True)
            tf_run.wait()
        elif scenario == "recover":
            args = {"steps_per_epoch": 20, "epochs": 3, "every": 5, "sleep": 0.25}
            tf_run = TFClusterRun(sc, programs.recoverable_training, args, num_nodes=2, run_dir=run_dir, max_attempts=3)
            print("RESULT " + json.dumps(tf_run.start().wait(600)), flush=True)
        elif scenario == "stall":
            # a checkpoint save of 6 s at step 10 must not fire a watchdog of 4 s; a frozen node must
            args = {"steps_per_epoch": 20, "epochs": 3, "every": 5, "sleep": 0.25}
            args.update(slow_save_at=10, slow_save_secs=6)
            tf_run = TFClusterRun(
                sc, programs.recoverable_training, args, num_nodes=2, run_dir=run_dir, max_attempts=3, stall_timeout=4
            )
            print("RESULT " + json.dumps(tf_run.start().wait(600)), flush=True)
        elif scenario == "remote":
            # the "recover" training with its run directory where the URI says (hdfs://...), the storage's log shown
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [%(name)s] %(message)s")
            args = {"steps_per_epoch": 20, "epochs": 3, "every": 5, "sleep": 0.4, "progress": False}
            tf_run = TFClusterRun(sc, programs.recoverable_training, args, num_nodes=2, run_dir=run_dir, max_attempts=3)
            print("RESULT " + json.dumps(tf_run.start().wait(600)), flush=True)
        elif scenario == "freeze":
            # worker:0 stops its executor's JVM at step 10 and trains on to step 60: the run must end soon after
            # its nodes did, not when Spark's heartbeat times out (120 s, Spark's default)
            args = {"steps_per_epoch": 20, "epochs": 3, "every": 5, "sleep": 0.1}
            args["freeze"] = {"attempt": 0, "node": "worker:0", "step": 10}
            tf_run = TFClusterRun(sc, programs.recoverable_training, args, num_nodes=2, run_dir=run_dir, max_attempts=3)
            result = tf_run.start().wait(600)
            print(f"ENDED {time.time()}", flush=True)
            print("RESULT " + json.dumps(result), flush=True)
        elif scenario == "gpu":
            result = TFClusterRun(sc, programs.report_context, num_nodes=2, gpus_per_node=1, run_dir=run_dir)
            print("RESULT " + json.dumps(result.start().wait()), flush=True)
        else:
            raise SystemExit(f"unknown scenario {scenario}")
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        return 130
    finally:
        sc.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main(sys.argv[1], sys.argv[2]))
