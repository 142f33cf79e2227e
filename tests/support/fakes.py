"""Test doubles at the hook boundary: a scripted application backend and an Airflow task context.

The operators' idempotency and failure logic is tested against these; the real hooks are tested
against the YARN and WebHDFS emulators and a real local Spark cluster elsewhere.
"""

from __future__ import annotations

import contextlib
import http.server
import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_tfos.hooks.backends.state import AppState


class FakeBackend:
    """Applications in memory, with the TFoSHook interface; ``script`` says how a submitted one evolves."""

    #: the backend's name and this worker as a lease owner, as TFoSHook says them
    backend = "local"
    lease_owner = "fake-worker"

    @property
    def master(self) -> str:
        """The spark connection's master, as TFoSHook says it: YARN for the YARN backend."""
        return "yarn" if self.backend == "yarn" else "local-cluster[2,1,1024]"

    def __init__(self) -> None:
        self.apps: dict[str, AppState] = {}
        self.submitted: list[dict[str, Any]] = []
        self.killed: list[str] = []
        #: ids of the ended applications TFoSHook.clean_up was asked about
        self.cleaned: list[str] = []
        self.polls: dict[str, int] = {}
        #: app id -> list of states returned by successive get_state calls (the last one sticks)
        self.script: dict[str, list[AppState]] = {}
        #: states the next submitted application goes through
        self.next_script: list[tuple[str, str]] = [("RUNNING", "UNDEFINED"), ("FINISHED", "SUCCEEDED")]
        #: called on submit (e.g. to write an export like a real run would)
        self.on_submit = None
        #: called with the app id when get_state first reports it succeeded (e.g. to write its export)
        self.on_success = None
        self._succeeded: set[str] = set()
        #: an application another try submitted meanwhile (appears on the next find_live)
        self.racer: AppState | None = None
        self._ids = itertools.count(100)

    def add(self, app_id: str, state: str, final_status: str = "UNDEFINED", tags=(), diagnostics: str = "") -> AppState:
        app = AppState(app_id, state, final_status, diagnostics=diagnostics, tags=tuple(tags))
        self.apps[app_id] = app
        return app

    # The driver's WebHDFS delegation token (TFoSHook on YARN with Kerberos): a fake run needs none.
    holds_driver_token = False

    def hand_off_driver_token(self) -> str | None:
        return None

    def end_driver_token(self) -> None:
        pass

    def submit(self, run_dir: str, *, tag: str, name: str, num_nodes: int, **options: Any) -> str:
        app_id = f"application_1700000000000_{next(self._ids):04d}"
        self.submitted.append({"run_dir": run_dir, "tag": tag, "name": name, "num_nodes": num_nodes, **options})
        self.script[app_id] = [AppState(app_id, s, f, tags=(tag,)) for s, f in self.next_script]
        self.apps[app_id] = AppState(app_id, "ACCEPTED", tags=(tag,))
        if self.on_submit:
            self.on_submit(app_id)
        return app_id

    def get_state(self, app_id: str) -> AppState:
        steps = self.script.get(app_id)
        if steps:
            self.apps[app_id] = steps.pop(0) if len(steps) > 1 else steps[0]
        self.polls[app_id] = self.polls.get(app_id, 0) + 1
        if self.on_success and self.apps[app_id].is_successful and app_id not in self._succeeded:
            self._succeeded.add(app_id)
            self.on_success(app_id)
        return self.apps[app_id]

    async def aget_state(self, app_id: str) -> AppState:
        return self.get_state(app_id)

    def find_by_tag(self, tag: str) -> list[AppState]:
        if self.racer is not None:
            self.apps[self.racer.app_id] = self.racer
            self.racer = None
        return [a for a in self.apps.values() if tag in a.tags]

    async def afind_by_tag(self, tag: str) -> list[AppState]:
        return self.find_by_tag(tag)

    def find_live(self, tag: str) -> list[AppState]:
        return [a for a in self.find_by_tag(tag) if not a.is_terminal]

    def clean_up(self, app: AppState) -> None:
        self.cleaned.append(app.app_id)

    def kill(self, app_id: str, grace_secs: float = 30) -> AppState:
        self.killed.append(app_id)
        self.script.pop(app_id, None)
        app = self.apps[app_id]
        if not app.is_terminal:
            app = AppState(app_id, "KILLED", "KILLED", diagnostics="killed", tags=app.tags)
            self.apps[app_id] = app
        return app

    async def akill(self, app_id: str) -> AppState:
        return self.kill(app_id)

    #: the page an ended application's UI lives on (TFoSHook.history_url); None: no history server is named
    history: str | None = None

    def history_url(self, app: AppState, conf: dict[str, str] | None = None) -> str | None:
        return self.history if app.is_terminal else None


class FakeStateStore:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any, **_: Any) -> None:
        self.values[key] = value


@dataclass
class FakeTI:
    dag_id: str = "nightly"
    task_id: str = "train"
    try_number: int = 1
    map_index: int = -1
    xcoms: dict[str, Any] = field(default_factory=dict)
    #: read by ResumableJobMixin, as on Airflow's task instance
    stats_tags: dict[str, str] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


@dataclass
class FakeDagRun:
    logical_date: datetime | None = field(default_factory=lambda: datetime(2026, 11, 21, tzinfo=UTC))
    run_id: str = "scheduled__2026-11-21T00:00:00+00:00"


def make_context(task_id: str = "train", store: FakeStateStore | None = None) -> dict[str, Any]:
    return {"ti": FakeTI(task_id=task_id), "dag_run": FakeDagRun(), "task_state_store": store or FakeStateStore()}


def use_backend(operator, backend: FakeBackend) -> None:
    """Make ``operator`` (and the application client it may build) talk to ``backend``."""
    operator.__dict__["hook"] = backend
    if "apps" in type(operator).__dict__ or hasattr(type(operator), "apps"):
        from airflow_tfos.hooks.backends.apps import ApplicationClient

        client = ApplicationClient(spark_conn_id="spark_default")
        client.__dict__["tfos_hook"] = backend
        operator.__dict__["apps"] = client


class _HistoryServer(http.server.BaseHTTPRequestHandler):
    """Stands in for Spark's history server: ``/history/<app id>`` answers with a page naming the application."""

    def do_GET(self):
        app_id = self.path.removeprefix("/history/").strip("/")
        ok = self.path.startswith("/history/application_")
        body = (f"<title>{app_id} - Spark Jobs</title>" if ok else "not found").encode()
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def history_server_stand_in() -> Iterator[str]:
    """A stand-in for Spark's history server on 127.0.0.1 (Spark's is not installed here); yields ``host:port``."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HistoryServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
