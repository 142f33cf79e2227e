"""The report route authorizes before it looks anything up, and says nothing about what it did not authorize.

Against a real WebHDFS emulator and connections defined as the api-server reads them (``AIRFLOW_CONN_*``):
every request the namenode sees and every connection lookup is counted, so "nothing before authorization"
is a count of zero; a user who may not read the run's Dag gets the same answer whether the address names a
connection that exists, one that does not, or one of another type; storage failures are told in the
api-server's log, not to the user.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse

import pytest
from airflow.sdk import BaseHook
from fastapi import FastAPI
from fastapi.testclient import TestClient

from airflow_tfos.plugins import reports
from airflow_tfos.plugins.report_urls import URL_PREFIX, encode_report_token, report_link
from airflow_tfos.plugins.reports import NOT_FOUND, authenticated_user, create_app
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.testing.webhdfs import WebHDFSEmulator

PAGE = b"<!doctype html><html><body><h1>Training report</h1></body></html>"
RUN_DIR = "hdfs://prod/runs/nightly_b/2026-11-27"
#: Which Dags each user may read (None: every Dag); carol may read none.
READERS: dict[str, set[str] | None] = {"admin": None, "alice": {"dag_a"}, "carol": set()}


@pytest.fixture(scope="module")
def emu():
    with WebHDFSEmulator() as emulator:
        storage = WebHDFSStorage(emulator.config(user="airflow"))
        run = RunDir(RUN_DIR, storage=storage)
        run.write_spec({"train_fn": "tests.example:train"})
        run.write_owner(dag_id="dag_b", task_id="train", run_id="scheduled__2026-11-27")
        storage.write_bytes(f"{RUN_DIR}/report/report.html", PAGE)
        yield emulator


@pytest.fixture
def lookups(emu, monkeypatch):
    """Connections as the api-server has them, and a record of every connection looked up."""
    hosts = ",".join(u.split("://", 1)[1] for u in emu.urls)
    for conn_id, conn in {
        "hdfs_reports": {"conn_type": "webhdfs", "host": hosts, "login": "airflow", "extra": {"retries": 0}},
        "not_hdfs": {"conn_type": "http", "host": "10.1.2.3", "password": "s3cret"},
    }.items():
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
    for name in ("AIRFLOW_CONN_WEBHDFS_DEFAULT", "AIRFLOW_TFOS_WEBHDFS", "HADOOP_CONF_DIR"):
        monkeypatch.delenv(name, raising=False)
    asked: list[str] = []
    real = BaseHook.get_connection.__func__

    def get_connection(cls, conn_id):
        asked.append(conn_id)
        return real(cls, conn_id)

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(get_connection))
    return asked


def client_of(user: str, monkeypatch) -> TestClient:
    def may_read_dag(who, dag_id):
        readable = READERS[who]
        return readable is None or (dag_id is not None and dag_id in readable)

    monkeypatch.setattr(reports, "may_read_dag", may_read_dag)
    monkeypatch.setattr(
        reports, "may_read_some_dag", lambda who: READERS[who] is None or bool(READERS[who]), raising=False
    )
    app = create_app()
    app.dependency_overrides[authenticated_user] = lambda: user
    root = FastAPI()
    root.mount(URL_PREFIX, app)
    return TestClient(root, base_url="http://api-server")


def get(client: TestClient, link: str):
    return client.get(urllib.parse.urljoin(f"{client.base_url}/", link))


def test_no_connection_and_no_storage_call_before_the_user_is_authorized(emu, lookups, monkeypatch):
    carol = client_of("carol", monkeypatch)  # may read no Dag
    before = len(emu.requests)
    for conn_id in ("hdfs_reports", "hdfs_nowhere", "not_hdfs"):
        reply = get(carol, report_link(RUN_DIR, conn_id))
        assert (reply.status_code, reply.json()) == (404, {"detail": NOT_FOUND}), reply.text
    assert lookups == [] and len(emu.requests) == before, (lookups, emu.requests[before:])

    alice = client_of("alice", monkeypatch)  # may read dag_a; the address says the run is dag_b's
    for conn_id in ("hdfs_reports", "hdfs_nowhere", "not_hdfs"):
        reply = get(alice, report_link(RUN_DIR, conn_id, dag_id="dag_b"))
        assert (reply.status_code, reply.json()) == (404, {"detail": NOT_FOUND}), reply.text
    assert lookups == [] and len(emu.requests) == before, (lookups, emu.requests[before:])

    admin = client_of("admin", monkeypatch)
    assert get(admin, report_link(RUN_DIR, "hdfs_reports", dag_id="dag_b")).content == PAGE
    assert set(lookups) == {"hdfs_reports"} and len(emu.requests) > before  # the count sees what happens


def test_an_unauthorized_user_gets_one_answer_whether_the_connection_exists_or_not(emu, lookups, monkeypatch):
    alice = client_of("alice", monkeypatch)  # reads dag_a: an address naming no Dag is looked up, then refused
    answers = set()
    for conn_id in ("hdfs_reports", "hdfs_nowhere", "not_hdfs"):
        for dag_id in (None, "dag_a", "dag_b"):
            for name in ("report.html", "metrics.png"):
                token = encode_report_token(RUN_DIR, conn_id, dag_id=dag_id)
                reply = alice.get(f"/tfos/reports/{token}/{name}")
                answers.add((reply.status_code, reply.text))
    assert answers == {(404, json.dumps({"detail": NOT_FOUND}, separators=(",", ":")))}, answers
    # the address naming dag_a does not open dag_b's run directory: owner.json decides
    assert get(client_of("admin", monkeypatch), report_link(RUN_DIR, "hdfs_reports", dag_id="dag_a")).status_code == 404


def test_a_storage_failure_is_logged_and_the_user_gets_no_address_of_it(emu, lookups, monkeypatch, caplog):
    admin = client_of("admin", monkeypatch)
    storage = reports.run_dir_storage(RUN_DIR, "hdfs_reports")
    assert storage.config.timeout <= 5 and storage.config.deadline <= 10  # the api-server's threads wait seconds
    emu.fail_next(1_000, server="datanode", status=500)  # owner.json and the page are read from the datanode
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger=reports.__name__):
            reply = get(admin, report_link(RUN_DIR, "hdfs_reports", dag_id="dag_b"))
        elapsed = time.monotonic() - started
    finally:
        emu.clear_faults()
    assert reply.status_code in (404, 502), reply.text
    host, port = emu.url.split("://", 1)[1].split(":")
    for secret in (host, port, emu.datanode_url.rsplit(":", 1)[1], "/runs/nightly_b", "webhdfs"):
        assert secret not in reply.text, reply.text
    assert elapsed < 12, elapsed
    assert any(port in r.getMessage() or emu.datanode_url in r.getMessage() for r in caplog.records), caplog.text


def test_an_authorized_users_report_that_cannot_be_read_is_a_502_naming_nothing(emu, lookups, monkeypatch, caplog):
    run_dir = "hdfs://prod/runs/nightly_b/locked"
    storage = WebHDFSStorage(emu.config(user="airflow"))
    run = RunDir(run_dir, storage=storage)
    run.write_spec({"train_fn": "tests.example:train"})
    run.write_owner(dag_id="dag_b", task_id="train", run_id="scheduled__2026-11-27")
    storage.write_bytes(f"{run_dir}/report/report.html", PAGE)
    emu.make_read_only("/runs/nightly_b/locked/report", unreadable=True)
    with caplog.at_level(logging.WARNING, logger=reports.__name__):
        reply = get(client_of("admin", monkeypatch), report_link(run_dir, "hdfs_reports", dag_id="dag_b"))
    assert (reply.status_code, reply.json()) == (502, {"detail": reports.STORAGE_FAILED})
    assert "Permission denied" in caplog.text and "/runs/nightly_b/locked/report/report.html" in caplog.text
