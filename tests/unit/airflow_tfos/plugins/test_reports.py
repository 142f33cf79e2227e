"""Training reports served by the api-server's plugin app, and the extra link that points at them.

The tests drive the app with FastAPI's TestClient, mounted as the api-server mounts it; a real
``airflow api-server`` serves them in tests/integration/airflow/test_report_server.py.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import struct
import urllib.parse
import urllib.request
import zlib
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from airflow_tfos.links import tfos as links
from airflow_tfos.links.tfos import TrainingReportLink
from airflow_tfos.plugins import reports
from airflow_tfos.plugins.report_urls import (
    URL_PREFIX,
    decode_report_token,
    encode_report_token,
    report_link,
)
from airflow_tfos.plugins.reports import NOT_FOUND, TFoSReportsPlugin, authenticated_user, create_app
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from tests.support.hadoop_site import ha_cluster_conf

PAGE = b'<!doctype html><html><body><h1>Training report</h1><img src="metrics.png" alt="m"></body></html>'


def tiny_png() -> bytes:
    """A valid 1x1 grey PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00\x80")) + chunk(b"IEND", b"")
    )


PNG = tiny_png()


def make_run_dir(path: Path, *, report: bool = True, spec: bool = True) -> str:
    """A hand-made run directory: spec.json, and report/report.html with the PNG it shows."""
    rundir = RunDir(str(path))
    if spec:
        rundir.write_spec({"train_fn": "tests.example:train"})
    if report:
        rundir.storage.write_bytes(rundir.path("report", "metrics.png"), PNG)
        rundir.storage.write_bytes(rundir.path("report", "report.html"), PAGE)
    return str(path)


def mounted(app: FastAPI) -> FastAPI:
    """The plugin app mounted as the api-server mounts it."""
    root = FastAPI()
    root.mount(URL_PREFIX, app)
    return root


#: Which Dags each test user may read (None: every Dag); what the auth manager answers in the unit tests.
READERS: dict[str, set[str] | None] = {"tester": None, "alice": {"dag_a"}}


def fake_may_read_dag(user: str, dag_id: str | None) -> bool:
    readable = READERS.get(user, set())
    return readable is None or (dag_id is not None and dag_id in readable)


@pytest.fixture
def signed_in(monkeypatch):
    """A client factory: the app with ``user`` signed in, authorized per Dag by :data:`READERS` (the
    api-server's authentication and a real auth manager are tested on a real api-server below)."""
    monkeypatch.setattr(reports, "may_read_dag", fake_may_read_dag)
    monkeypatch.setattr(reports, "may_read_some_dag", lambda user: READERS.get(user, set()) != set())

    def client_of(user: str) -> TestClient:
        app = create_app()
        app.dependency_overrides[authenticated_user] = lambda: user
        return TestClient(mounted(app), base_url="http://api-server")

    return client_of


@pytest.fixture
def client(signed_in) -> TestClient:
    """The app with a signed-in user who may read every Dag."""
    return signed_in("tester")


def get(client: TestClient, link: str):
    return client.get(urllib.parse.urljoin(f"{client.base_url}/", link))


def test_serves_the_page_and_the_plot_it_shows(client, tmp_path):
    run_dir = make_run_dir(tmp_path / "run")
    page = get(client, report_link(run_dir))
    assert page.status_code == 200, page.text
    assert page.content == PAGE
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "script-src" not in page.headers["content-security-policy"]  # default-src 'none': no scripts
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"

    plot = client.get(urllib.parse.urljoin(str(page.url), "metrics.png"))  # as the browser resolves <img src>
    assert plot.status_code == 200, plot.text
    assert (plot.content, plot.headers["content-type"]) == (PNG, "image/png")


def test_the_link_is_the_address_the_app_serves(client, tmp_path, monkeypatch):
    run_dir = make_run_dir(tmp_path / "run")
    xcoms: dict[str, str] = {"run_dir": run_dir}
    monkeypatch.setattr(links.XCom, "get_value", lambda *, ti_key, key: xcoms.get(key))
    train = SimpleNamespace(run_dir=None, webhdfs_conn_id=None)  # run_dir resolved at run time, pushed to XCom
    ti_key = SimpleNamespace(dag_id="nightly")
    link = TrainingReportLink().get_link(train, ti_key=ti_key)
    assert link == report_link(run_dir, dag_id="nightly") != report_link(run_dir)  # names the task's Dag
    assert link.startswith("tfos/reports/") and link.endswith("/report.html")
    assert get(client, link).content == PAGE

    xcoms.clear()  # the feed and shutdown tasks push no run_dir: their own (rendered) run_dir is used
    feed = SimpleNamespace(run_dir=run_dir, webhdfs_conn_id="webhdfs_default")
    expected = report_link(run_dir, "webhdfs_default", dag_id="nightly")
    assert TrainingReportLink().get_link(feed, ti_key=ti_key) == expected
    assert TrainingReportLink().get_link(SimpleNamespace(run_dir=None), ti_key=None) == ""


def test_tokens_carry_a_connection_only_for_hdfs_and_when_not_the_default():
    assert decode_report_token(encode_report_token("hdfs://prod/runs/r", "hdfs_prod")) == (
        "hdfs://prod/runs/r",
        "hdfs_prod",
    )
    assert decode_report_token(encode_report_token("hdfs://prod/runs/r", "webhdfs_default")) == (
        "hdfs://prod/runs/r",
        None,
    )
    assert decode_report_token(encode_report_token("/runs/r/", "hdfs_prod")) == ("/runs/r", None)
    token = encode_report_token("/runs/ünïcode dir")
    assert token.replace("-", "").replace("_", "").isalnum()
    assert decode_report_token(token) == ("/runs/ünïcode dir", None)


def token_of(value) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (encode_report_token("/srv/runs/../../etc"), "contains '..'"),
        (encode_report_token("runs/relative"), "relative path"),
        (encode_report_token("ftp://host/runs/r"), "is no run directory"),
        (encode_report_token("/"), "root"),
        (encode_report_token("/srv/runs\n/r"), "control characters"),
        ("not*base64", "not a training report address"),
        (token_of({"run_dir": "/srv"}), "names no run directory"),
        (token_of(["/srv/runs/r", "bad conn/../id"]), "is not a connection id"),
    ],
)
def test_refuses_addresses_that_are_no_run_directory(client, token, message):
    reply = client.get(f"/tfos/reports/{token}/report.html")
    assert reply.status_code == 400, reply.text
    assert message in reply.json()["detail"]


def test_refuses_traversal_out_of_the_run_directory(client, tmp_path):
    run_dir = make_run_dir(tmp_path / "runs" / "r")
    make_run_dir(tmp_path / "runs" / "other")
    sneaky = encode_report_token(f"{tmp_path}/runs/other/../r")
    reply = client.get(f"/tfos/reports/{sneaky}/report.html")
    assert reply.status_code == 400 and "contains '..'" in reply.json()["detail"]
    token = encode_report_token(run_dir)
    for name in ("..%2Fspec.json", "%2E%2E", "..", "%2e%2e%2f%2e%2e%2fspec.json"):
        reply = client.get(f"/tfos/reports/{token}/{name}")
        assert reply.status_code in (400, 404), (name, reply.status_code)
        assert reply.content not in (PAGE, PNG) and b"train_fn" not in reply.content
    # a normalised run directory is served: repeated slashes and '.' segments are harmless
    assert client.get(f"/tfos/reports/{encode_report_token(f'{tmp_path}//runs/./r/')}/report.html").content == PAGE


@pytest.mark.parametrize(
    "name", ["spec.json", "status.json", "report.htm", "report.html.png.html", ".png", "x.PNG", "a.b.png", "evil.svg"]
)
def test_serves_no_other_file_names(client, tmp_path, name):
    run_dir = make_run_dir(tmp_path / "run")
    (tmp_path / "run" / "report" / name).write_bytes(b"<svg onload=alert(1)>")
    reply = client.get(f"/tfos/reports/{encode_report_token(run_dir)}/{name}")
    assert reply.status_code == 404, reply.text
    assert "is not served: only report.html and the PNG plots" in reply.json()["detail"]


def test_refuses_a_plot_that_links_out_of_the_report_folder(client, tmp_path):
    run_dir = make_run_dir(tmp_path / "run")
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"api-server's secrets")
    (tmp_path / "run" / "report" / "leak.png").symlink_to(secret)
    reply = client.get(f"/tfos/reports/{encode_report_token(run_dir)}/leak.png")
    assert reply.status_code == 404 and b"secrets" not in reply.content
    assert "is not a file of the training report" in reply.json()["detail"]


def test_refuses_a_directory_that_is_no_run_directory(client, tmp_path):
    not_a_run = make_run_dir(tmp_path / "docs", spec=False)
    reply = get(client, report_link(not_a_run))
    assert reply.status_code == 404
    assert reply.json()["detail"] == NOT_FOUND


def test_serves_a_report_only_to_readers_of_the_dag_its_owner_json_names(signed_in, tmp_path):
    ours, theirs = make_run_dir(tmp_path / "a"), make_run_dir(tmp_path / "b")
    RunDir(ours).write_owner(dag_id="dag_a", task_id="train", run_id="manual__1")
    RunDir(theirs).write_owner(dag_id="dag_b", task_id="train", run_id="manual__1")
    alice, tester = signed_in("alice"), signed_in("tester")
    assert get(alice, report_link(ours)).content == PAGE
    foreign, missing = get(alice, report_link(theirs)), get(alice, report_link(str(tmp_path / "nothing")))
    # a foreign run directory reads exactly as one that does not exist
    assert (
        (foreign.status_code, foreign.json()) == (missing.status_code, missing.json()) == (404, {"detail": NOT_FOUND})
    )
    plot = alice.get(f"/tfos/reports/{encode_report_token(theirs)}/metrics.png")
    assert (plot.status_code, plot.json()["detail"]) == (404, NOT_FOUND)
    assert get(tester, report_link(theirs)).content == PAGE  # a reader of every Dag
    # the address does not decide: owner.json does
    RunDir(ours).write_owner(dag_id="dag_b", task_id="train", run_id="manual__2")
    assert get(alice, report_link(ours)).status_code == 404


def test_a_run_directory_that_names_no_dag_is_for_readers_of_every_dag(signed_in, tmp_path):
    run_dir = make_run_dir(tmp_path / "old")  # written before owner.json existed
    assert get(signed_in("alice"), report_link(run_dir)).json() == {"detail": NOT_FOUND}
    assert get(signed_in("tester"), report_link(run_dir)).content == PAGE
    (tmp_path / "old" / "owner.json").write_text("[1, 2]")  # not ours: names no Dag either
    assert get(signed_in("alice"), report_link(run_dir)).status_code == 404
    assert get(signed_in("tester"), report_link(run_dir)).content == PAGE


def test_tabs_ask_the_auth_manager_before_they_look_for_the_run_directory(signed_in, tmp_path, monkeypatch):
    ours, theirs = make_run_dir(tmp_path / "a"), make_run_dir(tmp_path / "b")
    RunDir(ours).write_owner(dag_id="dag_a", task_id="train", run_id="r1")
    RunDir(theirs).write_owner(dag_id="dag_b", task_id="train", run_id="r1")
    xcoms = {"dag_a": [("train", -1, encode_report_token(ours))], "dag_b": [("train", -1, encode_report_token(theirs))]}
    asked: list[tuple] = []

    def tokens(dag_id, run_id, task_id=None, map_index=None):
        asked.append((dag_id, run_id, task_id, map_index))
        return xcoms.get(dag_id, [])

    monkeypatch.setattr(reports, "task_report_tokens", tokens)
    alice = signed_in("alice")
    tab = "/tfos/tab/task?dag_id={}&run_id=r1&task_id=train&map_index={}"
    page = alice.get(tab.format("dag_a", "%7BMAP_INDEX%7D"))  # an unmapped task: the UI leaves {MAP_INDEX}
    assert page.status_code == 200 and page.content == PAGE
    assert str(page.url) == f"http://api-server/{report_link(ours)}"  # redirected to the link's address
    assert asked == [("dag_a", "r1", "train", -1)]
    alice.get(tab.format("dag_a", "3"))
    assert asked[-1] == ("dag_a", "r1", "train", 3)

    asked.clear()
    for url in (tab.format("dag_b", "-1"), "/tfos/tab/run?dag_id=dag_b&run_id=r1"):
        refused = alice.get(url)
        assert (refused.status_code, refused.json()) == (404, {"detail": NOT_FOUND}), url
    assert asked == []  # refused before anything of dag_b was looked up

    assert alice.get("/tfos/tab/run?dag_id=dag_a&run_id=r1").content == PAGE  # one training task: its report
    xcoms["dag_a"] = [("train", 0, encode_report_token(ours)), ("train", 1, encode_report_token(theirs))]
    listing = alice.get("/tfos/tab/run?dag_id=dag_a&run_id=r1")
    assert listing.status_code == 200 and "<li><a href='../reports/" in listing.text
    assert "default-src 'none'" in listing.headers["content-security-policy"]
    # each entry is still checked by the report route: map index 1 trained into dag_b's run directory
    first, second = re.findall(r"href='([^']+)'", listing.text)
    assert alice.get(urllib.parse.urljoin(str(listing.url), first)).content == PAGE
    assert alice.get(urllib.parse.urljoin(str(listing.url), second)).status_code == 404
    xcoms["dag_a"] = []
    assert "has recorded no run directory" in alice.get(tab.format("dag_a", "-1")).text


def test_a_run_without_a_report_says_so(client, tmp_path):
    run_dir = make_run_dir(tmp_path / "run", report=False)
    reply = get(client, report_link(run_dir))
    assert reply.status_code == 404
    assert reply.json()["detail"] == f"no training report yet in {run_dir}"
    reply = client.get(f"/tfos/reports/{encode_report_token(run_dir)}/memory.png")
    assert reply.status_code == 404 and reply.json()["detail"] == f"no memory.png in the training report of {run_dir}"


def test_needs_a_signed_in_user(tmp_path):
    run_dir = make_run_dir(tmp_path / "run")
    reply = get(TestClient(mounted(create_app()), base_url="http://api-server"), report_link(run_dir))
    assert reply.status_code == 401
    assert reply.json()["detail"] == "Not authenticated"


def test_turned_off_by_the_serve_reports_option(client, tmp_path, monkeypatch):
    run_dir = make_run_dir(tmp_path / "run")
    monkeypatch.setenv("AIRFLOW__TFOS__SERVE_REPORTS", "False")
    reply = get(client, report_link(run_dir))
    assert reply.status_code == 404 and "turned off" in reply.json()["detail"]
    monkeypatch.setenv("AIRFLOW__TFOS__SERVE_REPORTS", "True")
    assert get(client, report_link(run_dir)).content == PAGE


def set_connection(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "webhdfs", **fields}))


def test_serves_a_run_directory_on_hdfs(client, monkeypatch, caplog):
    with WebHDFSEmulator() as emu:
        hosts = ",".join(u.split("://", 1)[1] for u in emu.urls)
        set_connection(monkeypatch, "hdfs_reports", host=hosts, login="airflow", extra={"retries": 1})
        run_dir = "hdfs://prod/runs/digits/2026-11-22"
        make_run_dir_on(WebHDFSStorage(emu.config(user="airflow")), run_dir)  # private to the connection's user
        page = get(client, report_link(run_dir, "hdfs_reports"))
        assert page.status_code == 200, page.text
        assert page.content == PAGE and page.headers["content-type"] == "text/html; charset=utf-8"
        plot = client.get(urllib.parse.urljoin(str(page.url), "metrics.png"))
        assert (plot.status_code, plot.content) == (200, PNG)

        missing = get(client, report_link("hdfs://prod/runs/digits/2026-11-23", "hdfs_reports"))
        assert (missing.status_code, missing.json()["detail"]) == (404, NOT_FOUND)
        # a connection that is not defined here, or of another type: the same 404, the log says which
        with caplog.at_level(logging.WARNING, logger=reports.__name__):
            undefined = get(client, report_link(run_dir, "hdfs_nowhere"))
            monkeypatch.setenv("AIRFLOW_CONN_NOT_HDFS", json.dumps({"conn_type": "http", "host": "127.0.0.1"}))
            wrong = get(client, report_link(run_dir, "not_hdfs"))
        for reply in (undefined, wrong):
            assert (reply.status_code, reply.json()["detail"]) == (404, NOT_FOUND)
        assert "connection 'hdfs_nowhere' is not defined on the api-server" in caplog.text
        assert "connection 'not_hdfs' is of type 'http', not 'webhdfs'" in caplog.text


def test_serves_an_hdfs_run_directory_known_from_the_hadoop_files_alone(client, monkeypatch, tmp_path):
    # No webhdfs connection on the api-server: the cluster's configuration folder names the namenodes.
    with WebHDFSEmulator() as emu:
        addresses = [u.split("://", 1)[1] for u in emu.urls]
        conf = ha_cluster_conf(tmp_path / "hadoop", nameservice="prod", namenodes=addresses, rms=["127.0.0.1:9"])
        monkeypatch.delenv("AIRFLOW_CONN_WEBHDFS_DEFAULT", raising=False)
        monkeypatch.delenv("AIRFLOW_TFOS_WEBHDFS", raising=False)
        monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
        monkeypatch.setenv("HADOOP_USER_NAME", "reports")  # the HDFS user, as Hadoop's clients take it
        run_dir = "hdfs://prod/runs/digits/2026-11-21"
        make_run_dir_on(WebHDFSStorage(emu.config(user="reports")), run_dir)  # private to that user
        page = get(client, report_link(run_dir))
        assert page.status_code == 200, page.text
        assert page.content == PAGE
        monkeypatch.delenv("HADOOP_CONF_DIR")
        assert get(client, report_link(run_dir)).status_code == 404


def make_run_dir_on(storage: WebHDFSStorage, run_dir: str) -> None:
    RunDir(run_dir, storage=storage).write_spec({"train_fn": "tests.example:train"})
    storage.write_bytes(f"{run_dir}/report/metrics.png", PNG)
    storage.write_bytes(f"{run_dir}/report/report.html", PAGE)


def test_the_provider_registers_the_plugin_and_its_option():
    from airflow.sdk.plugins_manager import is_valid_plugin

    from airflow_tfos.get_provider_info import get_provider_info

    info = get_provider_info()
    assert info["plugins"] == [
        {"name": "airflow_tfos_reports", "plugin-class": "airflow_tfos.plugins.reports.TFoSReportsPlugin"}
    ]
    assert is_valid_plugin(TFoSReportsPlugin)
    (app,) = TFoSReportsPlugin.fastapi_apps
    assert app["url_prefix"] == URL_PREFIX == "/tfos" and isinstance(app["app"], FastAPI)
    assert info["config"]["tfos"]["options"]["serve_reports"]["default"] == "True"
