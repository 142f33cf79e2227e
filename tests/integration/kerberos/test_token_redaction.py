"""No WebHDFS delegation token in anything a failed Kerberized run leaves behind.

A request authenticated with a delegation token carries it in its URL (``delegation=<token>``), and
``requests``/``urllib3`` put that URL into the text of their exceptions (a TLS failure: "Max retries exceeded
with url: /webhdfs/v1/...&delegation=..."). Against the session's real KDC and a TLS WebHDFS emulator whose
certificate the client does not trust (as when the namenode's certificate changed), a process holding a
delegation token fails the ways a run fails: the driver's entry point cannot read spec.json, the heartbeat
cannot write status.json, a TF node's program fails and its error record, traceback, the attempt-failed
event, status.json, the failure event and the training report are written. Then every file, log line and
byte of stdout/stderr is searched for the token. The redaction itself:
tests/unit/airflow_tfos/shared/storage/test_kerberos_redaction.py.
"""

from __future__ import annotations

import json
import logging

import pytest

from airflow_tfos.runtime.driver import entry as driver
from airflow_tfos.runtime.driver.heartbeat import DriverWatch
from airflow_tfos.runtime.errors import NodeFailedError, NodeFailure
from airflow_tfos.runtime.program import child
from airflow_tfos.shared import events
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import parse_spec
from airflow_tfos.shared.storage import kerberos
from airflow_tfos.shared.storage.kerberos import KerberosLogin
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage, clear_cached_storages
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV
from airflow_tfos.testing.tls import self_signed
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from tests.conftest import wait_for


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory):
    """A CA bundle that did not sign the emulator's certificate (the client's, after the server's changed)."""
    return self_signed(tmp_path_factory.mktemp("other-tls"))[1]


@pytest.fixture(scope="module")
def hdfs(kdc, tls):
    with WebHDFSEmulator(kerberos_keytab=kdc.http_keytab, ssl_context=tls[0]) as emulator:
        yield emulator


@pytest.fixture
def token(hdfs, kdc, tls):
    """A real delegation token of alice's, given to this process as a driver or a TF node is given one."""
    alice = KerberosLogin(kdc.principal("alice"), kdc.alice_keytab)
    trusted = WebHDFSStorage(hdfs.config(user=None, auth="kerberos", verify=tls[1], retries=0), login=alice)
    value = trusted.get_delegation_token()
    assert len(value) > 20
    kerberos.use_delegation_token(value)
    yield value
    kerberos.use_delegation_token(None)
    trusted.cancel_delegation_token(value)


@pytest.fixture
def task_log(tmp_path):
    """Every log record of the process, written to a file as a task's log is (tracebacks included)."""
    path = tmp_path / "task.log"
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield path
    root.removeHandler(handler)
    root.setLevel(level)
    handler.close()


def test_a_tls_failure_while_holding_a_delegation_token_leaves_the_token_nowhere(
    hdfs, other_ca, token, task_log, tmp_path, monkeypatch, capfd, caplog
):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setattr(logging.getLogger("matplotlib"), "level", logging.WARNING)
    config = hdfs.config(user=None, auth="kerberos", verify=other_ca, retries=0)
    monkeypatch.setenv(WEBHDFS_ENV, config.to_json())
    clear_cached_storages()
    uri = hdfs.uri("/runs/leak", scheme="swebhdfs")
    untrusting = WebHDFSStorage(config)

    # The error itself: named as a TLS failure, with the URL it failed on, but without the token.
    with pytest.raises(OSError) as failure:
        untrusting.read_bytes(f"{uri}/data/part-0")
    assert "CERTIFICATE_VERIFY_FAILED" in str(failure.value) and "TLS" in str(failure.value)
    assert "/webhdfs/v1/runs/leak/data/part-0" in str(failure.value)

    # The driver's entry point: spec.json cannot be read (stderr, the log).
    assert driver.run_driver(uri) == driver.EXIT_BAD_INPUT

    # The heartbeat: status.json on HDFS cannot be written (its warning, then its debug lines).
    spec = parse_spec({"train_fn": "pkg.mod:main", "num_nodes": 1})
    watch = DriverWatch(RunDir(uri, storage=untrusting), spec, {"application_id": "app-1"}, 0.05)
    watch.start()
    try:
        wait_for(lambda: "cannot update status.json" in task_log.read_text(), 20, "the heartbeat's warning")
        wait_for(lambda: "still cannot be updated" in task_log.read_text(), 20, "the heartbeat's debug line")
    finally:
        watch.finished.set()
        watch.join(10)

    # A TF node's program fails on it: the node's error record (with its traceback), what the driver makes of
    # it (the attempt-failed event, status.json, the failure event, the log, stderr), then the report.
    node_dir = tmp_path / "executor" / "node-0"
    node_dir.mkdir(parents=True)
    child._write_error(node_dir, failure.value)
    record = json.loads((node_dir / child.ERROR).read_text())
    node_error = NodeFailedError(NodeFailure("chief", 0, 0, "127.0.0.1", record["reason"], record["traceback"]))
    local = RunDir(f"file://{tmp_path}/run")
    local.add_event(events.ATTEMPT_FAILED, attempt=0, reason=str(node_error).splitlines()[0][:500], retrying=False)
    logging.getLogger("airflow_tfos.driver").error("the driver failed", exc_info=failure.value)
    driver._fail(local, str(node_error), driver.EXIT_FAILED, application_id="app-1")
    driver._fail(local, f"{type(failure.value).__name__}: {failure.value}", driver.EXIT_FAILED)
    assert driver.write_report_safely(local)
    assert "CERTIFICATE_VERIFY_FAILED" in local.read_status()["error"]

    out, err = capfd.readouterr()
    assert "CERTIFICATE_VERIFY_FAILED" in err and "cannot update status.json" in task_log.read_text()
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    written = {str(p.relative_to(tmp_path)): p.read_bytes().decode(errors="replace") for p in files}
    assert len(written) >= 5, sorted(written)
    leaks = [name for name, text in written.items() if token in text]
    leaks += [name for name, text in [("stdout", out), ("stderr", err), ("caplog", caplog.text)] if token in text]
    leaks += [r.getMessage() for r in caplog.records if token in r.getMessage() or token in (r.exc_text or "")]
    assert not leaks, leaks
