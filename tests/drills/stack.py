"""A real Airflow stack for the drills: api-server, scheduler, dag-processor and triggerer.

Each component runs as its own process group with its output in ``<AIRFLOW_HOME>/stack/<name>.log``,
the metadata database is SQLite and the executor is the LocalExecutor. The drills speak to it the way
users do, through the REST API (``/api/v2``) with a token from the simple auth manager.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.conftest import REPO, free_port

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
#: Their command lines. The scheduler and triggerer serve no logs over HTTP (that server would listen on
#: every interface at a fixed port): the api-server reads the task logs from AIRFLOW_HOME/logs itself.
COMMANDS = {
    "api-server": ["api-server", "--host", "127.0.0.1"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}
#: Seconds each component gets to stop after SIGTERM before its process group is killed.
STOP_GRACE_SECS = 20.0


class StackError(RuntimeError):
    """The Airflow stack did not do what a drill waited for; the message says what and in which state."""


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file, or a note that it cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"({path.name}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


def wait_for(
    check: Callable[[], Any], *, timeout: float, what: str, state: Callable[[], str] | None = None, every: float = 1.0
) -> Any:
    """Call ``check`` until it returns something truthy; raise :class:`StackError` after ``timeout`` seconds.

    :param check: returns the awaited value, or something falsy while it is not there yet.
    :param timeout: seconds to wait at most.
    :param what: what is awaited, for the error message.
    :param state: describes the current state, for the error message.
    :param every: seconds between checks.
    """
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            described = state() if state else ""
            raise StackError(
                f"timed out after {timeout:.0f} s waiting for {what}" + (f"; {described}" if described else "")
            )
        time.sleep(every)


class AirflowStack:
    """Airflow 3 as users run it, in ``home``, with ``env`` added to every component's environment.

    :param home: AIRFLOW_HOME (the SQLite database, logs and component output go there).
    :param dags_folder: the DAG folder.
    :param env: extra environment for every component (connections, test settings).
    """

    def __init__(self, home: Path, dags_folder: Path, env: Mapping[str, str]) -> None:
        self.home = home
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.out_dir = home / "stack"
        self.processes: dict[str, subprocess.Popen] = {}
        self._token: str | None = None
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__API__BASE_URL": self.base_url,
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
            "AIRFLOW__CORE__FERNET_KEY": "",
            # runs start fast: the DAG folder is read at once, the scheduler and triggerer poll often
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            **env,
        }

    # --- processes --------------------------------------------------------------------------------

    def airflow(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """Run one ``airflow`` CLI command to its end."""
        return subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self) -> None:
        """Migrate the database, then start the four components in their own process groups."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        done = self.airflow("db", "migrate")
        if done.returncode != 0:
            raise StackError(f"airflow db migrate failed: {(done.stdout + done.stderr)[-3000:]}")
        for name in COMPONENTS:
            args = COMMANDS[name] + (["--port", str(self.port)] if name == "api-server" else [])
            with open(self.out_dir / f"{name}.log", "ab") as out:
                self.processes[name] = subprocess.Popen(
                    [sys.executable, "-m", "airflow", *args],
                    env=self.env,
                    cwd=REPO,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )

    def check_alive(self) -> None:
        """Raise if a component has exited."""
        for name, process in self.processes.items():
            if process.poll() is not None:
                raise StackError(
                    f"the {name} exited with code {process.returncode}:\n{tail(self.out_dir / f'{name}.log')}"
                )

    def wait_ready(self, dag_ids: list[str], timeout: float = 180) -> None:
        """Wait until the API answers, the other components report healthy and the DAGs are parsed."""

        def ready() -> bool:
            self.check_alive()
            try:
                health = self.get("/api/v2/monitor/health")
            except (OSError, StackError):
                return False
            healthy = all(
                (health.get(part) or {}).get("status") == "healthy"
                for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
            )
            return healthy and all(self.dag_exists(dag_id) for dag_id in dag_ids)

        wait_for(
            ready, timeout=timeout, what="the Airflow stack to be healthy with the drill DAGs parsed", state=self.tails
        )

    def stop(self) -> None:
        """SIGTERM every component's process group, then SIGKILL what is left after the grace period."""
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECS
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
        for process in self.processes.values():
            # the group may hold LocalExecutor workers and task processes even after its leader left
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)

    def tails(self, lines: int = 30) -> str:
        """The end of every component's output, for failure messages."""
        return "\n".join(f"--- {name} ---\n{tail(self.out_dir / f'{name}.log', lines)}" for name in self.processes)

    # --- REST API ---------------------------------------------------------------------------------

    def token(self) -> str:
        """A JWT from the simple auth manager (every user is an admin in this stack)."""
        if self._token is None:
            with urllib.request.urlopen(f"{self.base_url}/auth/token", timeout=30) as reply:
                self._token = json.loads(reply.read())["access_token"]
        return self._token

    def request(self, method: str, path: str, body: Any = None, *, params: Mapping[str, Any] | None = None) -> Any:
        """Call the REST API; return the decoded JSON answer; raise :class:`StackError` on an HTTP error."""
        url = self.base_url + path + (f"?{urllib.parse.urlencode(params, doseq=True)}" if params else "")
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token()}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=60) as reply:
                text = reply.read().decode()
        except urllib.error.HTTPError as exc:
            raise StackError(
                f"{method} {path} answered {exc.code}: {exc.read().decode(errors='replace')[:2000]}"
            ) from exc
        if not text:
            return None
        return json.loads(text) if text.lstrip()[:1] in "[{" else text

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params=params or None)

    def dag_exists(self, dag_id: str) -> bool:
        try:
            self.get(f"/api/v2/dags/{dag_id}")
        except StackError:
            return False
        return True

    def trigger(self, dag_id: str, logical_date: str, run_id: str) -> dict[str, Any]:
        """Start a DAG run for ``logical_date`` (ISO 8601, with time zone)."""
        return self.request(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"dag_run_id": run_id, "logical_date": logical_date}
        )

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}")

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}")

    def tries(self, dag_id: str, run_id: str, task_id: str) -> list[dict[str, Any]]:
        """Every try of a task instance so far (its history and the current one)."""
        found = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}/tries")
        return found["task_instances"]

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str) -> Any:
        found = self.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}/xcomEntries/{key}",
            deserialize="true",
        )
        return found["value"]

    def links(self, dag_id: str, run_id: str, task_id: str) -> dict[str, str | None]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}/links")

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
        """The text of one try's task log, as the UI shows it."""
        found = self.get(
            f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}/logs/{try_number}",
            full_content="true",
        )
        content = found.get("content") if isinstance(found, dict) else found
        if not isinstance(content, list):
            return str(content)
        lines = []
        for item in content:
            if isinstance(item, dict):  # a structured message: the event, then its other fields (errors...)
                rest = {k: v for k, v in item.items() if k not in ("event", "timestamp", "level", "logger")}
                lines.append(f"{item.get('event', '')} {json.dumps(rest, default=str) if rest else ''}".rstrip())
            else:
                lines.append(str(item))
        return "\n".join(lines)

    def mark(self, dag_id: str, run_id: str, task_id: str, state: str) -> Any:
        """Set a task instance's state, as the UI's "Mark as ..." does."""
        return self.request(
            "PATCH",
            f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task_id}",
            {"new_state": state},
        )

    def clear(self, dag_id: str, run_id: str, task_ids: list[str]) -> Any:
        """Clear task instances of one DAG run, with the body the UI's "Clear" dialog sends."""
        return self.request(
            "POST",
            f"/api/v2/dags/{dag_id}/clearTaskInstances",
            {
                "dag_run_id": run_id,
                "dry_run": False,
                "task_ids": task_ids,
                "only_failed": False,
                "include_downstream": True,
                "include_upstream": False,
                "include_future": False,
                "include_past": False,
            },
        )

    def wait_deferral_processed(self, dag_id: str, run_id: str, task_id: str, timeout: float = 120) -> None:
        """Wait until the scheduler has processed the executor's event of a task's exit on deferring.

        Airflow 3.3's scheduler fails a task whose trigger fired and which resumed before it saw that event
        ("state mismatch", apache/airflow#72716): a drill that makes a trigger fire waits for this first."""
        finished = f"TaskInstance Finished: dag_id={dag_id}, task_id={task_id}, run_id={run_id},"

        def seen() -> bool:
            text = (self.out_dir / "scheduler.log").read_text(errors="replace")
            return any(finished in line and "state=deferred" in line for line in text.splitlines())

        wait_for(seen, timeout=timeout, what=f"the scheduler to process {task_id}'s deferral", state=self.tails)

    def wait_run_ended(self, dag_id: str, run_id: str, timeout: float) -> dict[str, Any]:
        """Wait for a DAG run to reach success or failed; return it."""

        def ended() -> dict[str, Any] | None:
            self.check_alive()
            run = self.dag_run(dag_id, run_id)
            return run if run["state"] in ("success", "failed") else None

        def state() -> str:
            with contextlib.suppress(Exception):
                tis = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances")
                parts = [f"{ti['task_id']}={ti['state']} (try {ti['try_number']})" for ti in tis["task_instances"]]
                return f"run {run_id}: {', '.join(parts)}\n{self.tails()}"
            return self.tails()

        return wait_for(ended, timeout=timeout, what=f"DAG run {dag_id}/{run_id} to end", state=state, every=2.0)
