"""A Spark standalone master seen through its web UI: find a run's applications by tag and kill them.

Every Airflow worker can reach the master, while the local tracker only knows the applications started on
its own machine. So for ``spark://`` masters the application's name carries the run's tag
(:func:`name_with_tag`), and the master's JSON page (``http://<host>:<web UI port>/json/``) lists the
applications with their names. A kill goes through the master's UI (``POST /app/kill/`` with
``id=<app id>&terminate=true``; the master must run with ``spark.ui.killEnabled=true``, Spark's default),
which removes the application and its executors; the driver, a client-mode process on another worker,
sees its executors go and its application end.

A name is no proof of who submitted an application: any user of the master can put any tag in a name (and
two teams with the same default run directories have the same tags). So a search by tag keeps only the
applications of one user (the ``user`` the master lists: :func:`spark_user`), and a kill refuses an
application of another user. That field is what the driver says of itself: it tells teams apart, not a user
who means to pass for another (the master's web UI, which kills, has no authentication of its own either).

The web UI port is 8080 unless the master was started with another ``--webui-port`` /
``spark.master.ui.port``: then set ``AIRFLOW_TFOS_MASTER_WEBUI`` (e.g. ``http://master-host:18080``) on
the Airflow workers. Pure Python: no Airflow import.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import pwd
import shlex
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable
from typing import Any

from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.errors import ApplicationNotFoundError, LocalBackendError

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


def spark_user(driver_java_options: str | None = None) -> str:
    """The user a standalone master lists for an application whose driver starts from this process.

    The master lists the driver JVM's ``user.name``: the OS user the driver runs as, unless its Java options
    (``spark.driver.extraJavaOptions``) set ``-Duser.name=...`` (``SPARK_USER`` and ``HADOOP_USER_NAME`` do
    not change it).

    :param driver_java_options: the driver's ``spark.driver.extraJavaOptions``, if any.
    """
    try:
        options = shlex.split(driver_java_options or "")
    except ValueError:  # unbalanced quotes: the JVM would not start with them either
        options = []
    for option in options:
        if option.startswith("-Duser.name="):
            return option.removeprefix("-Duser.name=")
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a passwd entry
        return getpass.getuser()


def owned_with_tag(apps: Iterable[AppState], tag: str, user: str | None) -> list[AppState]:
    """The applications of ``apps`` whose name carries ``tag`` and that run as ``user`` (None: any user)."""
    return [app for app in apps if carries_tag(app.name, tag) and (user is None or app.user == user)]


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
    :param user: the user whose applications a search finds and a kill may end (:func:`spark_user`); None:
        any user's (for reading states only).
    :param timeout: seconds to wait for an answer.
    """

    def __init__(self, webui_url: str, *, user: str | None = None, timeout: float = 5.0) -> None:
        self.webui_url = webui_url.rstrip("/")
        self.user = user
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
        """The applications of :attr:`user` whose name carries ``tag``, live or not, oldest first."""
        return owned_with_tag(self.applications(), tag, self.user)

    def get_state(self, app_id: str) -> AppState:
        """The application's state; :class:`ApplicationNotFoundError` when the master does not know it."""
        for app in self.applications():
            if app.app_id == app_id:
                return app
        raise ApplicationNotFoundError(f"the standalone master at {self.webui_url} does not know application {app_id}")

    def kill(self, app_id: str, grace_secs: float = 30) -> AppState:
        """Ask the master to kill the application, and wait up to ``grace_secs`` for it to leave the active list.

        An application that has ended, or that the master has forgotten, is left alone; one of another user
        than :attr:`user` is refused (:class:`LocalBackendError`).
        """
        try:
            state = self.get_state(app_id)
        except ApplicationNotFoundError:
            return AppState(app_id=app_id, state="KILLED", final_status="KILLED", diagnostics="not known to the master")
        if state.is_terminal:
            return state
        if self.user is not None and state.user != self.user:
            raise LocalBackendError(
                f"application {app_id} on the standalone master at {self.webui_url} runs as user {state.user!r}, "
                f"not as {self.user!r}: it is not this run's to kill (if the run's drivers report another user, set "
                "-Duser.name=<that user> in spark.driver.extraJavaOptions)"
            )
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
