"""Shared fixtures: one real local Spark cluster (separate executor JVMs) for the test session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Executors and TF node processes import the test programs by module path, as users' programs are.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: Executors of the shared cluster: enough for ps + chief + worker.
NUM_EXECUTORS = 3


def local_cluster_conf(num_executors: int = NUM_EXECUTORS, app_name: str = "airflow-tfos-tests"):
    from pyspark import SparkConf

    return (
        SparkConf()
        .setMaster(f"local-cluster[{num_executors},1,1024]")
        .setAppName(app_name)
        .set("spark.driver.host", "127.0.0.1")
        .set("spark.driver.bindAddress", "127.0.0.1")
        .set("spark.executor.memory", "768m")
        .set("spark.ui.enabled", "false")
        .set("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .set("spark.executorEnv.TF_CPP_MIN_LOG_LEVEL", "2")
    )


@pytest.fixture(scope="session")
def sc():
    """A real local-cluster SparkContext with NUM_EXECUTORS one-core executor JVMs."""
    from pyspark import SparkContext

    context = SparkContext(conf=local_cluster_conf())
    context.setLogLevel("WARN")
    yield context
    context.stop()


@pytest.fixture(scope="session")
def spark(sc):
    """A SparkSession on the shared local cluster."""
    from pyspark.sql import SparkSession

    return SparkSession(sc)
