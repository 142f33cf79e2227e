"""A real ``airflow api-server`` for tests, and what signing in to it takes.

Used where a test needs an api-server of its own: a fresh one on a temporary SQLite home (the report
server's tests), or a second one on the drills' stack database with other users (the report tab's tests).
Users who may each read some Dags only come from the auth manager in :mod:`tests.support.dag_readers`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import REPO, free_port

#: Seconds an api-server gets to answer ``/api/v2/version`` after it was started.
START_SECS = 90
#: Seconds it gets to stop after SIGTERM before its process group is killed.
STOP_GRACE_SECS = 15


def http_get(url: str, headers: Mapping[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    """GET ``url`` (redirects followed); the status, the body and the headers, for error statuses too."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.read(), dict(reply.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), dict(exc.headers)


def dag_readers_env(folder: Path, passwords: Mapping[str, str], roles: Mapping[str, str], readers: str) -> dict:
    """The settings of an api-server whose users may read only the Dags ``readers`` names.

    :param folder: where the passwords file is written.
    :param passwords: user -> password.
    :param roles: user -> role of the simple auth manager (``viewer``, ``admin``).
    :param readers: ``user=dag_id;user=dag_id`` (:mod:`tests.support.dag_readers`); an admin reads every Dag.
    """
    passwords_file = folder / "passwords.json"
    passwords_file.write_text(json.dumps(dict(passwords)))
    return {
        "AIRFLOW__CORE__AUTH_MANAGER": "tests.support.dag_readers.DagReadersAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{user}:{role}" for user, role in roles.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file),
        "AIRFLOW_TFOS_TEST_DAG_READERS": readers,
    }


def sign_in(base_url: str, user: str, password: str) -> dict[str, str]:
    """The ``Authorization`` header of ``user``, with a token from the simple auth manager's login endpoint."""
    body = json.dumps({"username": user, "password": password}).encode()
    request = urllib.request.Request(
        f"{base_url}/auth/token", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        return {"Authorization": f"Bearer {json.loads(reply.read())['access_token']}"}


@contextlib.contextmanager
def running_api_server(env: Mapping[str, str], log_path: Path) -> Iterator[SimpleNamespace]:
    """Start ``airflow api-server`` (one worker) on a free port of 127.0.0.1 with ``env``, wait until it answers,
    yield ``url``, ``env`` and ``log`` (its output); stop its process group at the end, also on a failure.

    ``env`` is the whole environment (AIRFLOW_HOME, database, JWT secret); the port and base URL are added.
    """
    port = free_port()
    env = {**env, "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}", "AIRFLOW__API__PORT": str(port)}
    with open(log_path, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(port), "-w", "1"],
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_SECS
        while True:
            assert server.poll() is None, f"the api-server exited:\n{log_path.read_text()[-3000:]}"
            with contextlib.suppress(OSError):
                if http_get(f"{base_url}/api/v2/version")[0] == 200:
                    break
            assert time.monotonic() < deadline, f"no api-server after {START_SECS} s:\n{log_path.read_text()[-3000:]}"
            time.sleep(0.5)
        yield SimpleNamespace(url=base_url, env=env, log=log_path)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=STOP_GRACE_SECS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
