"""Airflow for real (``airflow`` commands on SQLite) against the Hadoop lab, for the DAG tests of this folder.

The environment holds what a cluster gives and nothing else: ``HADOOP_CONF_DIR`` and ``SPARK_CONF_DIR`` (the lab's
folder), and one ``spark`` connection whose host is ``yarn``; no ``yarn`` or ``webhdfs`` connection.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO

SPARK_CONN = "tfos_spark"


@dataclass
class AirflowOnLab:
    """The environment of the Airflow commands, and the lab's ResourceManager."""

    env: dict[str, str]
    rm_web: str

    @classmethod
    def start(cls, spark_on_lab, hadoop_lab, home: Path, dags: Path, **more: str) -> AirflowOnLab:
        """An Airflow home in ``home`` reading ``dags``, its database migrated."""
        rm_web = hadoop_lab.description["rm_web"]
        # cluster mode for the Spark provider's own operator too (the project's operators always use it on YARN)
        spark = {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}
        env = spark_on_lab.env(
            AIRFLOW_HOME=str(home),
            AIRFLOW__CORE__DAGS_FOLDER=str(dags),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
            **{f"AIRFLOW_CONN_{SPARK_CONN.upper()}": json.dumps(spark)},
            AIRFLOW_TFOS_LOCAL_DIR=str(home / "tfos-local"),
            AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(
                {"type": "file", "log_file_path": str(home / "lineage.jsonl"), "append": True}
            ),
            PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
            **more,
        )
        env.pop("PYTHONPATH", None)  # the DAGs import the installed package, and their own folder
        lab = cls(env, rm_web)
        migrated = lab.airflow("db", "migrate", timeout=300)
        assert migrated.returncode == 0, tail(migrated)
        return lab

    def airflow(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.rm_web}{path}", timeout=10) as response:
            return json.load(response)

    def apps(self) -> list[dict]:
        """Every application the ResourceManager knows, from its REST API."""
        return (self.get("/ws/v1/cluster/apps").get("apps") or {}).get("app") or []

    def apps_tagged(self, tag: str) -> list[dict]:
        return [a for a in self.apps() if tag in (a.get("applicationTags") or "").split(",")]

    def wait_for_app(self, tag: str, state: str, within: float) -> dict:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            found = [a for a in self.apps_tagged(tag) if a["state"] == state]
            if found:
                return found[0]
            time.sleep(1)
        raise AssertionError(f"no application tagged {tag} reached {state} in {within:.0f} s: {self.apps_tagged(tag)}")

    def link(self, dag_id: str, task_id: str, link_class: str, within: float = 0) -> str | None:
        """Where an extra link of the task leads (its XCom in the Airflow database), waiting up to ``within``
        seconds for the task to push it; None when it has not."""
        database = self.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
        deadline = time.monotonic() + within
        while True:
            with sqlite3.connect(database) as db:
                found = db.execute(
                    "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = ?",
                    (dag_id, task_id, f"_link_{link_class}"),
                ).fetchone()
            if found or time.monotonic() > deadline:
                return json.loads(found[0]) if found else None
            time.sleep(0.5)

    def lineage(self, job: str) -> list[dict]:
        """The OpenLineage events of ``job`` that the file transport wrote (``lineage.jsonl`` in Airflow's home)."""
        path = Path(self.env["AIRFLOW_HOME"]) / "lineage.jsonl"
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        return [e for e in events if e.get("job", {}).get("name") == job]

    def node_addresses(self) -> set[str]:
        return {n["nodeHTTPAddress"] for n in self.get("/ws/v1/cluster/nodes")["nodes"]["node"]}


def ended_well(done: subprocess.CompletedProcess) -> bool:
    """Whether ``dags test`` ended with its DAG run successful, or ``tasks test`` with its task successful (both
    exit 0 also when a task failed or is up for retry)."""
    text = done.stdout + done.stderr
    runs = re.findall(r"DagRun Finished: .*? state=(\w+)", text)
    states = runs or re.findall(r"new_state=(\w+)", text)
    return done.returncode == 0 and bool(states) and states[-1] == "success"


def tail(done: subprocess.CompletedProcess) -> str:
    return (done.stdout + done.stderr)[-8000:]
