"""A real DAG run (``airflow dags test``) against both emulators Kerberized, with a real MIT KDC: the Airflow side
logs in from the connections' keytab (the YARN and WebHDFS connections, the deferred training task's trigger
and the export sensor). The driver, as on YARN in cluster mode, has no Kerberos login at all (no ticket cache,
no keytab): the training task's hook obtains a WebHDFS delegation token before spark-submit and hands it to
the driver in ``spark.yarn.appMasterEnv`` of its private properties file; the driver takes it out of its
environment and lends it to the TF nodes, which write the checkpoints and the export; the deferred trigger
renews it and cancels it when the application ends. Neither the token nor the keytab's path is in the run
directory, the task logs, the driver's log, Airflow's database, a properties file left behind, or a command
line (nor, but for the driver's own, in a process environment) seen while the DAG ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_tfos.hooks.run_dir import default_run_dir
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from airflow_tfos.testing.yarn import ResourceManagerEmulator
from tests.conftest import REPO
from tests.integration.airflow.emulated import DAG_ID, DAGS, NAMESERVICE, dags_test, succeeded, tail
from tests.integration.airflow.yarn_driver_fakes import YarnDriverBroker, write_spark_submit

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


@pytest.fixture(scope="module")
def kerberized(kdc, tmp_path_factory) -> Iterator[tuple]:
    tmp_path = tmp_path_factory.mktemp("kerberized")
    home = tmp_path / "airflow"
    bin_dir = write_spark_submit(tmp_path / "bin").parent
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    # The driver has no Kerberos login: no ticket cache, no client keytab (as in a YARN container).
    driver_env = {k: v for k, v in os.environ.items() if k not in (WEBHDFS_ENV, "KRB5_CLIENT_KTNAME")}
    driver_env.update(
        {"PYTHONPATH": python_path, "SPARK_LOCAL_IP": "127.0.0.1", "KRB5CCNAME": "FILE:/nonexistent/driver-ccache"}
    )
    login = {"auth": "kerberos", "principal": "alice@TFOS.TEST", "keytab": kdc.alice_keytab}
    with (
        WebHDFSEmulator(kerberos_keytab=kdc.http_keytab, token_renew_interval=5.0) as hdfs,
        ResourceManagerEmulator(kerberos_keytab=kdc.http_keytab) as rm,
        YarnDriverBroker(rm, log_dir=tmp_path / "drivers", env=driver_env) as broker,
    ):
        port = int(hdfs.url.rsplit(":", 1)[1])
        webhdfs = {"conn_type": "webhdfs", "host": "127.0.0.1", "port": port, "extra": {"nameservice": NAMESERVICE}}
        webhdfs["extra"].update(login)
        env = {
            **{k: v for k, v in os.environ.items() if k != WEBHDFS_ENV},
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__FERNET_KEY": "dGhpcy1pcy1hLXRlc3Qta2V5LW9mLTMyLWJ5dGVzISE=",  # encrypts trigger arguments
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW_CONN_SPARK_TFOS_EM": json.dumps({"conn_type": "spark", "host": "yarn"}),
            "AIRFLOW_CONN_YARN_TFOS_EM": json.dumps({"conn_type": "yarn", "host": rm.addresses[0], "extra": login}),
            "AIRFLOW_CONN_WEBHDFS_TFOS_EM": json.dumps(webhdfs),
            "AIRFLOW_TFOS_RUN_DIR_BASE": f"hdfs://{NAMESERVICE}/tfos-runs",
            "AIRFLOW_TFOS_LOCAL_DIR": str(tmp_path / "tfos-local"),
            "FAKE_SPARK_SUBMIT_CALLS": str(tmp_path / "spark-submit-calls.jsonl"),
            "FAKE_YARN_DRIVER_BROKER": broker.url,
            "PATH": os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")]),
            "PYTHONPATH": python_path,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "TFOS_EM_EXECUTOR_KRB5CCNAME": "FILE:/nonexistent/ccache",
            "TFOS_EM_DEFERRABLE": "1",
        }
        migrated = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
        )
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        yield hdfs, rm, broker, env, home


class ProcessWatch:
    """Read every visible process's command line (and environment, where readable) while the test runs."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[str, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                        environ = (entry / "environ").read_bytes().replace(b"\0", b"\n").decode(errors="replace")
                    except OSError:
                        continue
                    self.seen[int(entry.name)] = (cmdline, environ)

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def test_a_train_dag_on_kerberized_yarn_and_hdfs(kerberized, kdc):
    hdfs, rm, broker, env, home = kerberized
    with ProcessWatch() as processes:
        done = dags_test(env)
    assert succeeded(done), tail(done, broker)

    run_dir = default_run_dir(
        f"hdfs://{NAMESERVICE}/tfos-runs", DAG_ID, "train", datetime(2026, 11, 21, tzinfo=UTC), ""
    )
    local_run = Path(hdfs.local_path(run_dir.split(NAMESERVICE, 1)[1]))
    assert (local_run / "export" / "_SUCCESS").is_file() and (local_run / "export" / "saved_model.pb").is_file()
    assert json.loads((local_run / "export" / "_SUCCESS").read_text())["step"] == 10
    # The ResourceManager was asked only with SPNEGO, as alice; HDFS as alice, by Kerberos or the run's token.
    assert rm.principals and set(rm.principals) == {"alice@TFOS.TEST"}
    (token,) = hdfs.tokens.requested  # the hook's: the driver, without a login, could not have asked for one
    with pytest.raises(Exception, match="not known"):  # cancelled once the application ended (not just expired)
        hdfs.tokens.verify(token)
    assert hdfs.tokens.renewals.get(token, 0) >= 2  # by the hook, then by the deferred trigger (it lives 5 s)
    # The checkpoints were written by the TF nodes with the token (the driver and the operator only read them).
    writes = ("CREATE", "MKDIRS", "RENAME")
    checkpoints = {
        (u, via) for _, op, path, u, via in hdfs.kerberos.authenticated if "/checkpoints/" in path and op in writes
    }
    assert checkpoints == {("alice", "token")}

    secrets = [*hdfs.tokens.issued, kdc.alice_keytab]
    texts = {str(p): p.read_text(errors="replace") for p in local_run.rglob("*") if p.is_file() and p.suffix != ".pb"}
    texts.update({str(p): p.read_text(errors="replace") for p in (home / "logs").rglob("*") if p.is_file()})
    texts.update({s["app_id"]: s["log"].read_text(errors="replace") for s in broker.submissions})
    texts["dags test output"] = done.stdout + done.stderr
    # The task deferred; its trigger took the token over, renewed it and cancelled it at the application's end.
    assert "Pausing task as DEFERRED" in texts["dags test output"]
    assert "renewing the WebHDFS delegation token of the run" in texts["dags test output"]
    assert "WebHDFS delegation token cancelled" in texts["dags test output"]
    texts["airflow.db"] = (home / "airflow.db").read_bytes().decode("latin-1")  # the trigger's arguments
    texts["spark-submit calls"] = Path(env["FAKE_SPARK_SUBMIT_CALLS"]).read_text()
    assert '"--properties-file"' in texts["spark-submit calls"]
    left = list(Path(env["AIRFLOW_TFOS_LOCAL_DIR"]).rglob("*.properties"))
    assert left == []  # the private properties file was deleted after the submission
    commands = {f"cmdline of {pid}": cmd for pid, (cmd, _) in processes.seen.items()}
    assert any("airflow_tfos.runtime.driver" in c for c in commands.values())
    assert any("airflow_tfos.runtime.program.child" in c for c in commands.values())  # the TF nodes were seen too
    texts.update(commands)
    # The driver's own environment held the token when it started (YARN's appMasterEnv); nothing it started did
    # (Spark's JVM, the executors, the TF nodes). Environments do hold the keytab's path (the connections).
    environs = [e for cmd, e in processes.seen.values() if "runtime.driver" not in cmd]
    assert [t[:6] for t in hdfs.tokens.issued if any(t in e for e in environs)] == []
    # The task logs (`airflow dags test` prints them) and the driver's log were read, and say what happened.
    assert "exported" in texts["dags test output"] and "train" in texts["dags test output"]
    assert any("delegation token of the hook that submitted" in texts[s["app_id"]] for s in broker.submissions)
    assert "obtained a WebHDFS delegation token" not in "".join(texts[s["app_id"]] for s in broker.submissions)
    leaks = [f"{name}: {s[:6]}..." for name, text in texts.items() for s in secrets if s in text]
    assert leaks == []
