"""Training reports served by a real ``airflow api-server`` (with users who may each read one Dag), read over
HTTP. The plugin app itself, driven with FastAPI's TestClient: tests/unit/airflow_tfos/plugins/test_reports.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import urllib.parse
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from airflow_tfos.plugins.report_urls import encode_report_token, report_link, report_path
from airflow_tfos.plugins.reports import NOT_FOUND
from airflow_tfos.shared.rundir import RunDir
from tests.conftest import REPO
from tests.support.api_server import dag_readers_env, http_get, running_api_server, sign_in
from tests.unit.airflow_tfos.plugins.test_reports import PAGE, PNG, make_run_dir

#: Airflow loads provider-info plugins only with ``[core] lazy_discover_providers = False``; otherwise a
#: package's plugins come from its ``airflow.plugins`` entry point.
ENTRY_POINT_REGISTERED = any(
    e.value.startswith("airflow_tfos.plugins.reports") for e in entry_points(group="airflow.plugins")
)


@contextlib.contextmanager
def fresh_api_server(tmp_path: Path, extra_env: dict[str, str] | None = None):
    """A real ``airflow api-server`` on 127.0.0.1 with a fresh SQLite home; yields its base URL and env."""
    home = tmp_path / "airflow"
    (home / "dags").mkdir(parents=True)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        **(extra_env or {}),
    }
    env.pop("AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS", None)  # Airflow's default, as users have it
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with running_api_server(env, tmp_path / "api-server.log") as server:
        yield server


#: Users of the per-Dag api-server: who may read which Dag's task instances (admin: every Dag).
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}


@pytest.fixture(scope="module")
def api_server(tmp_path_factory):
    """A real api-server whose auth manager lets alice read Dag nightly_a only, bob nightly_b only, and admin
    every Dag (:mod:`tests.support.dag_readers`); ``signed`` holds each user's bearer token."""
    root = tmp_path_factory.mktemp("api-server")
    roles = {"alice": "viewer", "bob": "viewer", "admin": "admin"}
    env = dag_readers_env(root, PASSWORDS, roles, "alice=nightly_a;bob=nightly_b")
    with fresh_api_server(root, env) as server:
        server.signed = {user: sign_in(server.url, user, password) for user, password in PASSWORDS.items()}
        yield server


@pytest.mark.integration
@pytest.mark.timeout(150)
@pytest.mark.xfail(
    not ENTRY_POINT_REGISTERED,
    strict=True,
    raises=AssertionError,
    reason="airflow-tfos is installed without the airflow.plugins entry point "
    '(pyproject.toml: [project.entry-points."airflow.plugins"] tfos_reports = '
    '"airflow_tfos.plugins.reports:TFoSReportsPlugin", then reinstall); Airflow loads provider-info '
    "plugins only with [core] lazy_discover_providers = False",
)
def test_a_real_api_server_serves_the_report(api_server, tmp_path):
    listed = subprocess.run(
        [sys.executable, "-m", "airflow", "plugins", "-o", "json"],
        env=api_server.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert '"airflow_tfos_reports"' in listed.stdout and '"/tfos"' in listed.stdout, listed.stdout[-3000:]

    run_dir = make_run_dir(tmp_path / "run")
    page_url = urllib.parse.urljoin(f"{api_server.url}/", report_link(run_dir))
    admin = api_server.signed["admin"]
    code, body, headers = http_get(page_url, admin)
    assert code == 200, body[-2000:]
    assert body == (tmp_path / "run" / "report" / "report.html").read_bytes()
    assert headers["content-type"] == "text/html; charset=utf-8"
    code, body, headers = http_get(urllib.parse.urljoin(page_url, "metrics.png"), admin)
    assert (code, body, headers["content-type"]) == (200, PNG, "image/png")

    code, body, _ = http_get(page_url, headers={"Authorization": "Bearer not-a-token"})
    assert code in (401, 403) and body != PAGE  # the api-server's authentication guards the app
    code, body, _ = http_get(f"{api_server.url}/{report_path(encode_report_token(run_dir), 'spec.json')}", admin)
    assert code == 404 and b"train_fn" not in body


@pytest.mark.integration
@pytest.mark.timeout(150)
@pytest.mark.xfail(
    not ENTRY_POINT_REGISTERED,
    strict=True,
    raises=AssertionError,
    reason="airflow-tfos is installed without the airflow.plugins entry point (see above)",
)
def test_a_real_api_server_serves_each_report_to_the_readers_of_its_dag(api_server, tmp_path):
    runs = {name: make_run_dir(tmp_path / name) for name in ("a", "b", "old")}
    RunDir(runs["a"]).write_owner(dag_id="nightly_a", task_id="train", run_id="scheduled__2026-11-22")
    RunDir(runs["b"]).write_owner(dag_id="nightly_b", task_id="train", run_id="scheduled__2026-11-22")
    server, signed = api_server, api_server.signed

    def fetch(user: str | None, run: str, name: str = "report.html", dag_id: str | None = None) -> tuple[int, bytes]:
        url = f"{server.url}/{report_path(encode_report_token(run, dag_id=dag_id), name)}"
        code, body, _ = http_get(url, signed[user] if user else None)
        return code, body

    not_found = json.dumps({"detail": NOT_FOUND}, separators=(",", ":")).encode()
    missing = str(tmp_path / "never-written")
    assert fetch("alice", runs["a"], dag_id="nightly_a") == (200, PAGE)
    assert fetch("alice", runs["a"], "metrics.png", dag_id="nightly_a") == (200, PNG)
    # another Dag's report, a run directory that does not exist and one that names no Dag read the same
    for run in (runs["b"], missing, runs["old"]):
        assert fetch("alice", run, dag_id="nightly_a") == (404, not_found), run
        assert fetch("alice", run, dag_id="nightly_b") == (404, not_found), run
    assert fetch("alice", runs["b"], "metrics.png") == (404, not_found)
    assert fetch("bob", runs["b"], dag_id="nightly_b") == (200, PAGE)
    assert fetch("bob", runs["a"], dag_id="nightly_b") == (404, not_found)
    # an address naming no Dag: for users who may read some Dag (none is in this api-server's database)
    assert fetch("bob", runs["b"]) == (404, not_found)
    assert fetch("admin", runs["old"]) == (200, PAGE)  # a reader of every Dag
    assert fetch("admin", runs["b"]) == (200, PAGE)
    assert fetch(None, runs["a"])[0] == 401

    # the task instance tab asks the auth manager first: no answer about another Dag's task instances
    tab = "tfos/tab/task?dag_id={}&run_id=scheduled__2026-11-22&task_id=train&map_index=%7BMAP_INDEX%7D"
    code, body, _ = http_get(f"{server.url}/{tab.format('nightly_b')}", signed["alice"])
    assert (code, body) == (404, not_found)
    code, body, _ = http_get(f"{server.url}/{tab.format('nightly_a')}", signed["alice"])
    assert code == 200 and b"has recorded no run directory" in body  # no such run in this database
