"""Fixtures of the tests on a real Airflow stack: training data, and one stack shared by every test module in
this folder, stopped when they are done (its scheduler and dag-processor would otherwise keep polling through
the rest of the session)."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import pytest

from airflow_tfos.hooks.backends.local_tracker import LocalBackend
from tests.conftest import write_linear_parquet
from tests.drills.stack import AirflowStack

DAGS = Path(__file__).parent / "dags"


@pytest.fixture(scope="session")
def drill_data(tmp_path_factory) -> str:
    """600 rows of y = 3 x0 - 2 x1 + 1 as Parquet files: 10 steps per epoch for 2 nodes at batch 30."""
    return write_linear_parquet(tmp_path_factory.mktemp("drill-data") / "linear", seed=11)


@pytest.fixture(scope="session")
def krb_hdfs(kdc):
    """A Kerberized WebHDFS emulator (the session's real KDC) that the stack's ``webhdfs_tfos_drill_krb``
    connection names, with alice's keytab."""
    from airflow_tfos.testing.webhdfs import WebHDFSEmulator

    with WebHDFSEmulator(kerberos_keytab=kdc.http_keytab) as emulator:
        yield emulator


@pytest.fixture(scope="package")
def stack(tmp_path_factory, drill_data, kdc, krb_hdfs):
    """api-server, scheduler, dag-processor and triggerer (LocalExecutor, SQLite) with the drill DAGs.

    Every component runs with the session's KDC settings (no ticket cache: a login comes from a connection's
    keytab). Stopped when this folder's tests are done, and with it every Spark application its tasks left running.
    """
    root = tmp_path_factory.mktemp("drill-stack")
    home = root / "airflow"
    home.mkdir()
    env = {
        "AIRFLOW_CONN_SPARK_TFOS_DRILL": json.dumps({"conn_type": "spark", "host": "local-cluster[2,1,1024]"}),
        "AIRFLOW_CONN_SPARK_TFOS_DRILL_ONE": json.dumps({"conn_type": "spark", "host": "local-cluster[1,1,1024]"}),
        "AIRFLOW_TFOS_LOCAL_DIR": str(home / "tfos-local"),
        "AIRFLOW__TFOS__RUN_DIR_BASE": str(root / "runs"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "TFOS_DRILL_DATA": drill_data,
        "TFOS_DRILL_REGISTRY": str(root / "registry"),
        "TFOS_DRILL_SCORES": str(root / "scores"),
        "AIRFLOW_CONN_WEBHDFS_TFOS_DRILL_KRB": json.dumps(
            {
                "conn_type": "webhdfs",
                "host": "127.0.0.1",
                "port": int(krb_hdfs.url.rsplit(":", 1)[1]),
                "extra": {"auth": "kerberos", "principal": kdc.principal("alice"), "keytab": kdc.alice_keytab},
            }
        ),
        "TFOS_DRILL_KRB_RUN_DIR": krb_hdfs.uri("/runs/drill-sensor"),
        **kdc.env(),
        "KRB5CCNAME": os.environ.get("KRB5CCNAME", ""),
    }
    airflow = AirflowStack(home, DAGS, env)
    try:
        airflow.start()
        airflow.wait_ready(["tfos_drill", "tfos_drill_long"])
        yield airflow
    finally:
        airflow.stop()
        backend = LocalBackend(env["AIRFLOW_TFOS_LOCAL_DIR"])
        for record in backend.records():
            with contextlib.suppress(Exception):
                backend.kill(record["app_id"], grace_secs=5, reason="the drills are over")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failed drill, add the end of every Airflow component's output to the report."""
    report = yield
    airflow = item.funcargs.get("stack") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(airflow, AirflowStack):
        report.sections.append(("Airflow stack", airflow.tails(40)))
    return report
