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


def write_linear_parquet(path: Path, seed: int, parts: int = 3, rows: int = 200) -> str:
    """Write ``parts`` Parquet files of ``rows`` rows of y = 3 x0 - 2 x1 + 1 (``x`` a 2-float array) into ``path``."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for part in range(parts):
        x = rng.random((rows, 2))
        table = pa.table({"x": pa.array(list(x), type=pa.list_(pa.float64())), "y": 3 * x[:, 0] - 2 * x[:, 1] + 1})
        pq.write_table(table, path / f"part-{part}.parquet")
    return str(path)


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
