"""What the DAG runs against the YARN and WebHDFS emulators share (tests/integration/airflow/test_dag_runs_kerberos.py):
the DAG folder (``emulated_dags/``), its nameservice, and ``airflow dags test`` with its outcome. The failed
lifecycle launch these emulators once carried runs on Hadoop's own YARN now
(tests/integration/hadoop/test_drills_yarn.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.integration.airflow.test_dag_runs import dags_test as run_dag
from tests.integration.airflow.test_dag_runs import succeeded as succeeded
from tests.integration.airflow.yarn_driver_fakes import YarnDriverBroker

DAGS = Path(__file__).parent / "emulated_dags"
DAG_ID, LOGICAL_DATE = "tfos_em_train", "2026-11-21"
NAMESERVICE = "emuns"


def dags_test(
    env: dict[str, str], timeout: float = 300, dag_id: str = DAG_ID, date: str = LOGICAL_DATE
) -> subprocess.CompletedProcess:
    return run_dag(env, dag_id, timeout=timeout, date=date)


def tail(done: subprocess.CompletedProcess, broker: YarnDriverBroker | None = None) -> str:
    text = (done.stdout + done.stderr)[-6000:]
    for submission in broker.submissions if broker else []:
        text += f"\n--- driver of {submission['app_id']} ---\n" + submission["log"].read_text()[-3000:]
    return text
