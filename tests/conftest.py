"""Shared fixtures: one real local Spark cluster (separate executor JVMs) for the test session, WebHDFS
emulators, and run directories on local disk or on HDFS."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from airflow_tfos.testing.ports import free_port  # noqa: F401 - the tests import it from here

REPO = Path(__file__).resolve().parent.parent

# Executors and TF node processes import the test programs by module path, as users' programs are.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Every JVM of the tests (Spark drivers, masters, workers, executors) lives seconds to a minute: compiling with
# the JIT's first tier only starts a local-cluster application about a third sooner on two cores (measured:
# 19 s against 28 s for a context, a job and a query). scripts/run_tests.py sets its own (the same, and Spark
# application ids per session).
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")

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


@pytest.fixture
def emu():
    """A WebHDFS emulator (one namenode) for one test."""
    from airflow_tfos.testing.webhdfs import WebHDFSEmulator

    with WebHDFSEmulator() as emulator:
        yield emulator


@pytest.fixture
def ha():
    """A WebHDFS emulator with an active and a standby namenode, for one test."""
    from airflow_tfos.testing.webhdfs import WebHDFSEmulator

    with WebHDFSEmulator(namenodes=2) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def emulator():
    """A WebHDFS emulator shared by the tests of one module."""
    from airflow_tfos.testing.webhdfs import WebHDFSEmulator

    with WebHDFSEmulator() as emu:
        yield emu


@pytest.fixture(scope="session")
def kdc():
    """One real MIT KDC for the test session (a throwaway realm on 127.0.0.1), its environment set in this
    process; ``kdc.http_keytab`` is the emulators' ``HTTP/127.0.0.1`` keytab, ``kdc.alice_keytab`` a user's."""
    from airflow_tfos.testing.kdc import KDC

    with KDC() as realm:
        realm.activate()
        realm.http_keytab = realm.service_keytab("HTTP/127.0.0.1")
        realm.alice_keytab = realm.user_keytab("alice")
        yield realm


def run_dir_for(request, tmp_path: Path, where: str, storage_settings: dict | None = None):
    """The run directory ``<where>/run`` of a test parametrized ``local`` / ``webhdfs``: on local disk under
    ``tmp_path``, or on the module's ``emulator`` under a folder named for the test (with a WebHDFS storage
    of ``storage_settings`` when given). Its ``.backing`` is its folder on this machine."""
    from airflow_tfos.shared.rundir import RunDir
    from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage

    rel = f"{where}/run".lstrip("/")
    if request.param == "local":
        run = RunDir(f"file://{tmp_path}/{rel}")
        run.backing = str(tmp_path / rel)
        return run
    emu = request.getfixturevalue("emulator")
    path = f"/{request.node.name.replace('[', '-').rstrip(']')}/{rel}"
    storage = WebHDFSStorage(emu.config(**storage_settings)) if storage_settings is not None else None
    run = RunDir(emu.uri(path), storage=storage)
    run.backing = emu.local_path(path)
    return run


def wait_for(predicate, within: float = 20.0, what: str = "condition", every: float = 0.05):
    """Call ``predicate`` until it returns something truthy, and return that; AssertionError after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {within:.0f} s")
        time.sleep(every)
