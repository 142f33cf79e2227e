"""What every benchmark sets up: the environment for a local Spark cluster on this machine."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def local_cluster_conf(app_name: str, executors: int, worker_mb: int, executor_memory: str):
    """Environment and SparkConf for ``local-cluster[executors,1,worker_mb]`` on 127.0.0.1."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("TFOS_SERVER_HOST", "127.0.0.1")  # TFoS's reservation server
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    from pyspark import SparkConf

    return (
        SparkConf()
        .setMaster(f"local-cluster[{executors},1,{worker_mb}]")
        .setAppName(app_name)
        .set("spark.driver.host", "127.0.0.1")
        .set("spark.executor.memory", executor_memory)
        .set("spark.ui.enabled", "false")
        .set("spark.ui.showConsoleProgress", "false")
    )
