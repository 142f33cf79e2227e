"""The Hadoop lab (``scripts/hadoop.py``): Hadoop's own NameNode, DataNodes, ResourceManager and NodeManagers,
started once for the tests of this folder and stopped when they are done, also when one fails or the session is
interrupted. The first start on a machine builds the lab with Maven (the jars come from Maven Central, checksums
enforced, into ``hadoop-lab/target/``, ignored by git); a build that cannot reach Maven Central fails the tests
with Maven's line naming the artifact."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO


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


@pytest.fixture(scope="package")
def hadoop_lab(tmp_path_factory, pytestconfig):
    """One lab for the tests of this folder: built on first use, started here, stopped (``down``) at the end."""
    conf_dir = tmp_path_factory.mktemp("hadoop-lab")
    timings: dict[str, float] = {}
    if hadoop.needs_build():
        timings["build_s"] = round(hadoop.build(), 1)
    try:
        description = hadoop.up(conf_dir, datanodes=2, nodemanagers=2, vcores=4, heap="1g", timeout=240)
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
        line = "hadoop lab: " + ", ".join(f"{k} {v}" for k, v in timings.items()) + f"; ended {len(ended)} processes"
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():  # shown whether the tests passed or not
                reporter.write_line(line)


def spark_jars_zip() -> Path:
    """pip's pyspark jars as one stored (not compressed) zip, built once per pyspark version in the lab's build
    folder: what ``spark.yarn.archive`` points at."""
    import pyspark

    target = hadoop.LAB_TARGET / f"spark-jars-{pyspark.__version__}.zip"
    if not target.exists():
        jars = Path(pyspark.__file__).parent / "jars"
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as archive:
            for jar in sorted(jars.glob("*.jar")):
                archive.write(jar, jar.name)
        partial.rename(target)
    return target


@pytest.fixture(scope="package")
def spark_archive(hadoop_lab) -> str:
    """Spark's jars on the lab's HDFS, uploaded once: ``spark.yarn.archive`` for every application."""
    from hdfs import InsecureClient

    started = time.monotonic()
    local = spark_jars_zip()
    client = InsecureClient(f"http://{hadoop_lab.description['namenode_http']}")
    client.makedirs(os.path.dirname(SPARK_ARCHIVE_PATH))
    client.upload(SPARK_ARCHIVE_PATH, str(local), overwrite=True)
    hadoop_lab.timings["spark_archive_s"] = round(time.monotonic() - started, 1)
    return f"{hadoop_lab.fs_default}{SPARK_ARCHIVE_PATH}"
