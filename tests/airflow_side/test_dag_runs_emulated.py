"""A real DAG run (``airflow dags test`` on SQLite) of TFoSTrainOperator on the YARN path, with the run
directory on HDFS: both reached through their protocol emulators, which run here, in the test's process.

- HDFS: :class:`~airflow_tfos.testing.webhdfs.WebHDFSEmulator`, reached through a ``webhdfs`` connection
  (Airflow side) and the settings TFoSHook hands the driver in its private properties file (Spark side).
- YARN: :class:`~airflow_tfos.testing.yarn.ResourceManagerEmulator` and a stand-in ``spark-submit``
  (tests/airflow_side/yarn_driver_fakes.py) that starts the REAL driver on ``local-cluster[2,1,1024]``
  and registers it with the emulator, which reports its state from the real process.

Spark, TensorFlow and Airflow are real. The DAG is in tests/airflow_side/emulated_dags/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_tfos.hooks.runs import default_run_dir, run_tag
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.shared.storage.webhdfs_config import ENV_VAR
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from airflow_tfos.testing.yarn import ResourceManagerEmulator
from tests.airflow_side.yarn_driver_fakes import YarnDriverBroker, read_calls, write_spark_submit
from tests.conftest import REPO

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

DAGS = Path(__file__).parent / "emulated_dags"
DAG_ID, LOGICAL_DATE = "tfos_em_train", "2026-11-21"
NAMESERVICE = "emuns"


def dags_test(env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", DAG_ID, LOGICAL_DATE],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def succeeded(done: subprocess.CompletedProcess) -> bool:
    return done.returncode == 0 and "state=failed" not in done.stdout + done.stderr


def tail(done: subprocess.CompletedProcess, broker: YarnDriverBroker | None = None) -> str:
    text = (done.stdout + done.stderr)[-6000:]
    for submission in broker.submissions if broker else []:
        text += f"\n--- driver of {submission['app_id']} ---\n" + submission["log"].read_text()[-3000:]
    return text


def lineage_events(path: Path, job: str) -> list[dict]:
    """The OpenLineage events the file transport wrote for ``job`` (one JSON event per line)."""
    if not path.exists():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [e for e in events if e.get("job", {}).get("name") == job]


def test_train_dag_submits_to_yarn_exports_to_hdfs_and_a_rerun_submits_nothing(tmp_path):
    home = tmp_path / "airflow"
    calls = tmp_path / "spark-submit-calls.jsonl"
    lineage = tmp_path / "openlineage.jsonl"
    bin_dir = write_spark_submit(tmp_path / "bin").parent
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    # the drivers get HDFS settings only as YARN would give them: from the submission, not from this process
    driver_env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    driver_env.update({"PYTHONPATH": python_path, "SPARK_LOCAL_IP": "127.0.0.1"})

    with (
        WebHDFSEmulator() as hdfs,
        ResourceManagerEmulator() as rm,
        YarnDriverBroker(rm, log_dir=tmp_path / "drivers", env=driver_env) as broker,
    ):
        port = int(hdfs.url.rsplit(":", 1)[1])
        env = {
            **{k: v for k, v in os.environ.items() if k != ENV_VAR},
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                {"type": "file", "log_file_path": str(lineage), "append": True}
            ),
            "AIRFLOW_CONN_SPARK_TFOS_EM": json.dumps({"conn_type": "spark", "host": "yarn"}),
            "AIRFLOW_CONN_YARN_TFOS_EM": json.dumps(
                {"conn_type": "yarn", "host": ",".join(rm.addresses), "login": "airflow"}
            ),
            "AIRFLOW_CONN_WEBHDFS_TFOS_EM": json.dumps(
                {
                    "conn_type": "webhdfs",
                    "host": "127.0.0.1",
                    "port": port,
                    "login": "airflow",
                    "extra": {"nameservice": NAMESERVICE},
                }
            ),
            "AIRFLOW_TFOS_RUN_DIR_BASE": f"hdfs://{NAMESERVICE}/tfos-runs",
            "AIRFLOW_TFOS_LOCAL_DIR": str(tmp_path / "tfos-local"),
            "FAKE_SPARK_SUBMIT_CALLS": str(calls),
            "FAKE_YARN_DRIVER_BROKER": broker.url,
            "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
            "PYTHONPATH": python_path,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        migrated = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
        )
        assert migrated.returncode == 0, migrated.stderr[-3000:]

        first = dags_test({**env, "TFOS_EM_DEFERRABLE": "1"})
        assert succeeded(first), tail(first, broker)

        # one submission, through spark-submit to YARN in cluster mode, carrying the run's tag
        run_dir = default_run_dir(
            f"hdfs://{NAMESERVICE}/tfos-runs", DAG_ID, "train", datetime(2026, 11, 21, tzinfo=UTC), ""
        )
        (argv,) = read_calls(calls)
        # the training function's package (tests, importable here but not installed) went with --py-files,
        # beside the runtime zip: its content hash is in the spec
        py_files = argv[argv.index("--py-files") + 1].split(",")
        (user_zip,) = [p for p in py_files if Path(p).name.startswith("user-code-")]
        assert any(Path(p).name.startswith("airflow_tfos-runtime-") for p in py_files)
        (submission,) = broker.submissions
        assert submission["tags"] == [run_tag(run_dir)]
        assert ENV_VAR in submission["env"]  # the WebHDFS settings came through the properties file
        assert submission["command"][submission["command"].index("--run-dir") + 1] == run_dir

        # the ResourceManager tracked it to its end, and the operator and the trigger asked it
        app = rm.application(submission["app_id"])
        assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED")
        assert run_tag(run_dir) in app["applicationTags"]
        assert [r for r in rm.requests if submission["app_id"] in r.path], "nobody asked the RM about the application"

        # the export is on (emulated) HDFS, complete, for this spec
        rundir = RunDir(run_dir, storage=WebHDFSStorage(hdfs.config(user="airflow", nameservice=NAMESERVICE)))
        export = rundir.export_success()
        assert export is not None and export["step"] == 10
        assert export["spec_hash"] == rundir.read_spec()["spec_hash"]
        assert rundir.read_spec()["code"] == {"packages": ["tests"], "hash": Path(user_zip).stem.split("-")[-1]}
        local_run = Path(hdfs.local_path(run_dir.split(NAMESERVICE, 1)[1]))
        assert (local_run / "export" / "_SUCCESS").is_file()
        assert (local_run / "export" / "saved_model.pb").is_file()
        assert {r.user for r in hdfs.requests if r.op == "CREATE"} == {"airflow"}

        # OpenLineage (file transport): the training task's COMPLETE event names the export on HDFS
        complete = [e for e in lineage_events(lineage, f"{DAG_ID}.train") if e["eventType"] == "COMPLETE"]
        assert complete, "no OpenLineage COMPLETE event for the training task"
        (output,) = complete[-1]["outputs"]
        assert (output["namespace"], output["name"]) == (
            f"hdfs://{NAMESERVICE}",
            run_dir.split(NAMESERVICE, 1)[1] + "/export",
        )
        assert output["facets"]["tfosModel"]["specHash"] == export["spec_hash"]
        assert output["facets"]["tfosModel"]["step"] == 10

        # the same DAG run again: done already, nothing submitted
        again = dags_test(env)
        assert succeeded(again), tail(again, broker)
        assert "nothing to do" in again.stdout + again.stderr
        assert len(read_calls(calls)) == 1 and len(broker.submissions) == 1
        assert rundir.export_success() == export
