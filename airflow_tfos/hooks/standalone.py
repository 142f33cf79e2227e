"""A Spark standalone master seen through its web UI: find a run's applications by tag and kill them.

Every Airflow worker can reach the master, while the local tracker only knows the applications started on
its own machine. So for ``spark://`` masters the application's name carries the run's tag
(:func:`name_with_tag`), and the master's JSON page (``http://<host>:<web UI port>/json/``) lists the
applications with their names. A kill goes through the master's UI (``POST /app/kill/`` with
``id=<app id>&terminate=true``; the master must run with ``spark.ui.killEnabled=true``, Spark's default),
which removes the application and its executors; the driver, a client-mode process on another worker,
sees its executors go and its application end.

The web UI port is 8080 unless the master was started with another ``--webui-port`` /
``spark.master.ui.port``: then set ``AIRFLOW_TFOS_MASTER_WEBUI`` (e.g. ``http://master-host:18080``) on
the Airflow workers. Pure Python: no Airflow import.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.parse
import urllib.request
from typing import Any

from airflow_tfos.hooks.errors import ApplicationNotFoundError, LocalBackendError
from airflow_tfos.hooks.state import AppState

#: The environment variable naming a standalone master's web UI when it is not on port 8080 of its host.
MASTER_WEBUI_ENV = "AIRFLOW_TFOS_MASTER_WEBUI"
#: Spark's default port of a standalone master's web UI.
DEFAULT_WEBUI_PORT = 8080
#: The master's JSON page and its kill endpoint.
JSON_PATH = "/json/"
KILL_PATH = "/app/kill/"

#: A standalone application's state (Spark's ``ApplicationState``) in YARN's vocabulary.
_STATES = {
    "WAITING": ("ACCEPTED", "UNDEFINED"),
    "RUNNING": ("RUNNING", "UNDEFINED"),
    "FINISHED": ("FINISHED", "SUCCEEDED"),
    "FAILED": ("FAILED", "FAILED"),
    "KILLED": ("KILLED", "KILLED"),
    "UNKNOWN": ("FAILED", "FAILED"),
}

log = logging.getLogger(__name__)


def name_with_tag(name: str, tag: str) -> str:
    """The application's name with the run's tag in it (how a standalone master knows the tag)."""
    mark = f"[{tag}]"
    return name if mark in name else f"{name} {mark}".strip()


def carries_tag(name: str, tag: str) -> bool:
    """Whether an application's name carries ``tag`` (as :func:`name_with_tag` put it)."""
    return f"[{tag}]" in (name or "")


def master_webui_url(master: str, port: int | None = None) -> str | None:
    """The web UI of a standalone master (``spark://h:7077`` -> ``http://h:8080``); None for other masters.

    ``$AIRFLOW_TFOS_MASTER_WEBUI`` wins when set; ``port`` replaces 8080.
    """
    if not master.startswith("spark://") or "," in master:
        return None
    configured = os.environ.get(MASTER_WEBUI_ENV)
    if configured:
        return configured.rstrip("/")
    host = master[len("spark://") :].rsplit(":", 1)[0]
    return f"http://{host}:{port or DEFAULT_WEBUI_PORT}"


def map_master_app(app: dict[str, Any], *, active: bool, webui_url: str) -> AppState:
    """One application of the master's JSON page as an :class:`AppState`."""
    state, final = _STATES.get(str(app.get("state")), ("RUNNING", "UNDEFINED") if active else ("FAILED", "FAILED"))
    if active and state in ("FINISHED", "FAILED", "KILLED"):
        state, final = "RUNNING", "UNDEFINED"  # listed as active: it has not ended yet
    return AppState(
        app_id=app["id"],
        state=state,
        final_status=final,
        diagnostics=f"standalone master: {app.get('state')}",
        tracking_url=f"{webui_url}/app/?appId={app['id']}",
        name=app.get("name", ""),
        user=app.get("user", ""),
        application_type="SPARK",
    )


class StandaloneMaster:
    """Ask a standalone master's web UI for applications, and kill them through it.

    :param webui_url: the master's web UI (:func:`master_webui_url`).
    :param timeout: seconds to wait for an answer.
    """

    def __init__(self, webui_url: str, *, timeout: float = 5.0) -> None:
        self.webui_url = webui_url.rstrip("/")
        self.timeout = timeout

    def applications(self) -> list[AppState]:
        """Every application the master knows (active, then completed), oldest first."""
        url = self.webui_url + JSON_PATH
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as reply:
                data = json.loads(reply.read())
        except (OSError, ValueError) as exc:
            raise LocalBackendError(
                f"cannot read the standalone master's applications from {url}: {exc}; the Airflow worker must reach "
                f"the master's web UI (set {MASTER_WEBUI_ENV} when it is not on port {DEFAULT_WEBUI_PORT})"
            ) from exc
        found = [map_master_app(app, active=True, webui_url=self.webui_url) for app in data.get("activeapps", [])]
        found += [map_master_app(app, active=False, webui_url=self.webui_url) for app in data.get("completedapps", [])]
        return sorted(found, key=lambda app: app.app_id)

    def find_by_tag(self, tag: str) -> list[AppState]:
        """The applications whose name carries ``tag``, live or not, oldest first."""
        return [app for app in self.applications() if carries_tag(app.name, tag)]

    def get_state(self, app_id: str) -> AppState:
        """The application's state; :class:`ApplicationNotFoundError` when the master does not know it."""
        for app in self.applications():
            if app.app_id == app_id:
                return app
        raise ApplicationNotFoundError(f"the standalone master at {self.webui_url} does not know application {app_id}")

    def kill(self, app_id: str, grace_secs: float = 30) -> AppState:
        """Ask the master to kill the application, and wait up to ``grace_secs`` for it to leave the active list.

        An application that has ended, or that the master has forgotten, is left alone.
        """
        try:
            state = self.get_state(app_id)
        except ApplicationNotFoundError:
            return AppState(app_id=app_id, state="KILLED", final_status="KILLED", diagnostics="not known to the master")
        if state.is_terminal:
            return state
        body = urllib.parse.urlencode({"id": app_id, "terminate": "true"}).encode()
        request = urllib.request.Request(self.webui_url + KILL_PATH, data=body, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout):
                pass
        except OSError as exc:
            raise LocalBackendError(
                f"the standalone master at {self.webui_url} refused to kill {app_id}: {exc}; "
                "it must run with spark.ui.killEnabled=true"
            ) from exc
        log.info("asked the standalone master at %s to kill %s", self.webui_url, app_id)
        deadline = time.monotonic() + max(grace_secs, 1.0)
        while True:
            state = self.get_state(app_id)
            if state.is_terminal or time.monotonic() >= deadline:
                return state
            time.sleep(0.5)
