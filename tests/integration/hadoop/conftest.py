"""The Hadoop lab (``scripts/hadoop.py``): Hadoop's own NameNode, DataNodes, ResourceManager and NodeManagers,
started once for the tests of this folder and stopped when they are done, also when one fails or the session is
interrupted. The first start on a machine builds the lab with Maven (the jars come from Maven Central, checksums
enforced, into ``hadoop-lab/target/``, ignored by git); a build that cannot reach Maven Central fails the tests
with Maven's line naming the artifact."""

from __future__ import annotations

import importlib.util
import io
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import REPO
from tests.integration.hadoop.airflow_lab import AirflowOnLab


def _load_lab_script() -> Any:
    spec = importlib.util.spec_from_file_location("hadoop_lab_script", REPO / "scripts" / "hadoop.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


hadoop = _load_lab_script()

#: Where Spark's jars go on the lab's HDFS (``spark.yarn.archive``), so that a submit does not upload them.
SPARK_ARCHIVE_PATH = "/spark/spark-jars.zip"


def _lab_rss_mib(conf_dir: Path, pid: int) -> float:
    """Resident memory of the lab's JVM (not of the containers YARN runs)."""
    processes = hadoop.status(conf_dir).get("processes", {})
    return processes.get(pid, {}).get("rss_mib", 0.0)


@dataclass
class Lab:
    """A running lab: its folder (``HADOOP_CONF_DIR``), its addresses and what its start measured."""

    conf_dir: Path
    description: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def webhdfs(self) -> str:
        """``webhdfs://127.0.0.1:<port>``: the NameNode's WebHDFS, as the project's storage takes it."""
        return self.description["webhdfs"]

    @property
    def fs_default(self) -> str:
        """``hdfs://127.0.0.1:<port>``: the NameNode's RPC address, as Hadoop's clients and Spark take it."""
        return self.description["fs_default"]

    def uri(self, path: str) -> str:
        return f"{self.webhdfs}/{path.lstrip('/')}"

    def inspect(self, *paths: str) -> dict[str, list[dict[str, Any]] | None]:
        """What HDFS holds under ``paths``, read by Hadoop's own Java client (``HdfsInspect``), by path."""
        return hadoop.inspect_hdfs(self.conf_dir, list(paths))["paths"]


def _run_lab(conf_dir: Path, pytestconfig, label: str, **settings: Any):
    """Build on first use, start a lab with ``settings`` (:func:`hadoop.up`'s), yield it, stop it (``down``) and
    print one line of what its start and stop measured."""
    timings: dict[str, float] = {}
    if hadoop.needs_build():
        timings["build_s"] = round(hadoop.build(), 1)
    try:
        description = hadoop.up(conf_dir, datanodes=2, vcores=4, heap="1g", timeout=240, **settings)
    except BaseException:
        hadoop.down(conf_dir)  # a start interrupted half-way (Ctrl-C) leaves nothing running either
        raise
    timings.update(up_s=description["up_seconds"], rss_start_mib=_lab_rss_mib(conf_dir, description["pid"]))
    lab = Lab(conf_dir, description, timings)
    try:
        yield lab
    finally:
        timings["rss_end_mib"] = _lab_rss_mib(conf_dir, description["pid"])
        started = time.monotonic()
        ended = hadoop.down(conf_dir)
        timings["down_s"] = round(time.monotonic() - started, 1)
        line = f"{label}: " + ", ".join(f"{k} {v}" for k, v in timings.items()) + f"; ended {len(ended)} processes"
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():  # shown whether the tests passed or not
                reporter.write_line(line)


@pytest.fixture(scope="package")
def hadoop_lab(tmp_path_factory, pytestconfig):
    """One lab for the tests of this folder: built on first use, started here, stopped (``down``) at the end."""
    yield from _run_lab(tmp_path_factory.mktemp("hadoop-lab"), pytestconfig, "hadoop lab", nodemanagers=2)


#: The secure lab's daemons' principal (one for all: docs/hadoop-lab.md), and who may impersonate others there.
SECURE_SERVICE, SECURE_PROXY_USER = "hadoop/127.0.0.1", "airflow"
#: Its delegation tokens' renew interval: short, so that a test outlives one; and their lifetime, which a DAG run
#: and the ResourceManager's keeping them alive after it (20 s: docs/hadoop-lab.md) stay within.
TOKEN_RENEW_SECS, TOKEN_MAX_LIFETIME_SECS = 12, 600


@pytest.fixture(scope="package")
def secure_lab(tmp_path_factory, pytestconfig, kdc):
    """The same Hadoop in secure mode against the session's KDC: Kerberos on RPC, SPNEGO on WebHDFS and the
    ResourceManager's REST API, delegation tokens renewable every ``TOKEN_RENEW_SECS``; one NodeManager."""
    keytab = kdc.shared_keytab("hadoop-lab.keytab", SECURE_SERVICE, "HTTP/127.0.0.1")
    kerberos = hadoop.Kerberos(
        kdc.env()["KRB5_CONFIG"], kdc.principal(SECURE_SERVICE), keytab, (SECURE_PROXY_USER,), TOKEN_RENEW_SECS,
        TOKEN_MAX_LIFETIME_SECS,
    )  # fmt: skip
    conf_dir = tmp_path_factory.mktemp("secure-lab")
    yield from _run_lab(conf_dir, pytestconfig, "secure hadoop lab", nodemanagers=1, kerberos=kerberos)


def secure_storage(lab: Lab, login, *, user: str | None = None):
    """The project's WebHDFS storage of a secure lab's NameNode, logged in as ``login`` (a ``KerberosLogin``),
    impersonating ``user`` when given; no retries (a refusal is the answer)."""
    from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
    from airflow_tfos.shared.storage.webhdfs_config import WebHDFSConfig

    namenode = f"http://{lab.description['namenode_http']}"
    return WebHDFSStorage(WebHDFSConfig(namenodes=(namenode,), user=user, auth="kerberos", retries=0), login=login)


def set_owner(lab: Lab, login, path: str, owner: str) -> None:
    """``SETOWNER`` through WebHDFS (HDFS's superuser's to do), with ``login``."""
    import requests

    from airflow_tfos.shared.storage.kerberos import negotiate_header

    host = lab.description["namenode_http"]
    answer = requests.put(
        f"http://{host}/webhdfs/v1{path}?op=SETOWNER&owner={owner}",
        headers={"Authorization": negotiate_header(host.split(":")[0], login)},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text


@dataclass
class SparkOnLab:
    """Spark on the lab's YARN as ``hadoop.py spark`` sets it up: ``SPARK_CONF_DIR`` (its spark-defaults.conf
    names Spark's jars and the packed environment on HDFS) and what it wrote there."""

    conf_dir: Path
    settings: dict[str, str]

    def conf_dir_without_env(self, folder: Path) -> Path:
        """A ``SPARK_CONF_DIR`` like the lab's but with no default Python environment: for applications that
        name their own (``packed_env=``; Spark refuses the same archive twice)."""
        folder.mkdir(parents=True, exist_ok=True)
        lines = (self.conf_dir / "spark-defaults.conf").read_text().splitlines()
        own = ("spark.yarn.dist.archives", "spark.pyspark.python", "spark.yarn.appMasterEnv.PYSPARK_PYTHON")
        kept = [line for line in lines if not line.startswith(own) and "executorEnv.PYSPARK_PYTHON" not in line]
        (folder / "spark-defaults.conf").write_text("\n".join(kept) + "\n")
        return folder

    def env(self, **more: str) -> dict[str, str]:
        """This process's environment with ``HADOOP_CONF_DIR`` and ``SPARK_CONF_DIR`` at the lab, and ``more``."""
        drop = ("AIRFLOW_TFOS_WEBHDFS", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
        return {
            **{k: v for k, v in os.environ.items() if k not in drop},
            "HADOOP_CONF_DIR": str(self.conf_dir),
            "SPARK_CONF_DIR": str(self.conf_dir),
            "SPARK_LOCAL_IP": "127.0.0.1",
            **more,
        }


@pytest.fixture(scope="package")
def spark_on_lab(hadoop_lab) -> SparkOnLab:
    """Spark's jars (``spark.yarn.archive``) and the packed environment (the containers' Python: the runtime's
    packages without airflow_tfos and pyspark, linked, see :mod:`airflow_tfos.testing.packed_env`) on the lab's
    HDFS, uploaded once; ``spark-defaults.conf`` in the lab's folder."""
    started = time.monotonic()
    done = hadoop.spark_setup(hadoop_lab.conf_dir, env_mode="link")
    hadoop_lab.timings.update(done["timings"], spark_setup_s=round(time.monotonic() - started, 1))
    return SparkOnLab(hadoop_lab.conf_dir, done["settings"])


@pytest.fixture(scope="package")
def secure_spark(secure_lab) -> SparkOnLab:
    """Spark on the secure lab's YARN, as :func:`spark_on_lab` sets it up (uploaded by HDFS's superuser, logged
    in from the daemons' keytab; every JVM told where the realm's krb5.conf is)."""
    started = time.monotonic()
    done = hadoop.spark_setup(secure_lab.conf_dir, env_mode="link")
    secure_lab.timings.update(done["timings"], spark_setup_s=round(time.monotonic() - started, 1))
    return SparkOnLab(secure_lab.conf_dir, done["settings"])


#: Where the DAG tests of dags/ keep their run directories on the lab's HDFS (``[tfos] run_dir_base``).
LAB_RUNS = "/lab-runs"
#: y = x . [2, -3] + 1: what the users' two workers must find
WEIGHTS, BIAS = np.array([2.0, -3.0], dtype="float32"), 1.0


def write_parquet(hadoop_lab: Lab, folder: str, files: int = 2, rows: int = 400, storage=None) -> None:
    """``files`` Parquet files of ``rows`` rows each on the lab's HDFS, through the project's WebHDFS storage
    (``storage``, else the one of the lab's URI)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_tfos.shared.storage import storage_for

    rng = np.random.default_rng(11)
    storage = storage or storage_for(hadoop_lab.uri(folder))
    for index in range(files):
        x = rng.uniform(-1, 1, size=(rows, 2)).astype("float32")
        table = pa.table({"x": pa.array(x.tolist(), type=pa.list_(pa.float32())), "y": x @ WEIGHTS + BIAS})
        out = io.BytesIO()
        pq.write_table(table, out)
        storage.write_bytes(hadoop_lab.uri(f"{folder}/part-{index}.parquet"), out.getvalue())


@pytest.fixture(scope="package")
def lab_airflow(spark_on_lab, hadoop_lab, tmp_path_factory) -> AirflowOnLab:
    """One Airflow home reading dags/ (a user's DAGs and their training module), its Parquet data on the lab."""
    data = f"/lab/linear-{uuid.uuid4().hex[:8]}"
    write_parquet(hadoop_lab, data)
    archive = spark_on_lab.settings["spark.yarn.dist.archives"].split("#", 1)[0]
    home = tmp_path_factory.mktemp("airflow-lab-dag")
    return AirflowOnLab.start(
        spark_on_lab,
        hadoop_lab,
        home,
        Path(__file__).parent / "dags",
        AIRFLOW__TFOS__RUN_DIR_BASE=f"hdfs://{LAB_RUNS}",
        LAB_DATA=f"hdfs://{data}",
        LAB_PACKED_ENV=archive,
        # the cluster has no default Python environment: the operator names it
        SPARK_CONF_DIR=str(spark_on_lab.conf_dir_without_env(home / "spark-conf")),
    )
