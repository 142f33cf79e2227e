"""An emulator of YARN's ResourceManager REST API, for tests of this package and of users' DAGs.

Written from Hadoop's ``ResourceManagerRest.md`` and held to Hadoop 3.5's own ResourceManager by
``tests/integration/hadoop/test_yarn_conformance.py``: it answers the JSON shapes (``{"apps": {"app": [...]}}``,
``{"apps": {}}`` when none matches, ``{"app": {...}}`` with no ``trackingUrl`` before the master registered,
queues by their full path, ``{"state": ...}``),
the 202-then-200 kill, ``RemoteException`` errors, and, with ``ha=True``, a standby RM that redirects
REST calls to the active one (HTTP 307 with ``Location``, as ``RMWebAppFilter`` does). It also serves
the RM's ``/conf`` servlet (``yarn.scheduler.maximum-allocation-*``) and ``new-application`` (whose
``maximum-resource-capability`` is the largest container the cluster allows).

Applications are either plain records whose state a test sets, or backed by a real local process
(``add_process_application``): RUNNING while it lives, FINISHED/SUCCEEDED on exit 0, FAILED/FAILED on
any other exit, KILLED/KILLED when killed through the API, which signals the process group
(SIGTERM, then SIGKILL after ``kill_grace`` seconds), as a NodeManager kills a container. An application's
record, YARN's state machine and the process helpers are in :mod:`airflow_tfos.testing.yarn_apps`; the REST
side (routes, JSON shapes, errors) in :mod:`airflow_tfos.testing.yarn_http`.

Fault switches, each for the next N requests: ``fail_next`` (5xx), ``drop_next`` (connection closed
without an answer), ``slow_next`` (answer after a delay), ``malformed_next`` (a broken proxy's JSON).

Example::

    with ResourceManagerEmulator(ha=True) as rm:
        app_id = rm.add_application("train", tags=["run-1"])
        conn = {"conn_type": "yarn", "host": ",".join(rm.addresses)}
        ...
        rm.failover()
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from airflow_tfos.hooks.backends.state import YARN_STATES
from airflow_tfos.testing.spnego import SpnegoAcceptor
from airflow_tfos.testing.yarn_apps import UNKNOWN_EXIT, App, exit_code, signal_group
from airflow_tfos.testing.yarn_http import Fault, RecordedRequest, RestApiMixin, _Server, app_json

__all__ = ["RecordedRequest", "ResourceManagerEmulator"]

log = logging.getLogger(__name__)

#: What the RM says of an application killed through its API (Hadoop 3.5's words), by the application's user.
KILLED_DIAGNOSTICS = "Application {app_id} was killed by user {user}"
STANDBY_MODES = ("redirect", "error")


class ResourceManagerEmulator(RestApiMixin):
    """YARN ResourceManager(s) speaking the REST API on 127.0.0.1 ephemeral ports.

    :param ha: run two RMs, the first active and the second standby.
    :param standby_mode: what a standby RM answers to REST calls: ``"redirect"`` (307 to the active
        RM, as Hadoop does) or ``"error"`` (503 "This is standby RM", as when it knows no active RM).
    :param cluster_timestamp: the cluster id in application ids (``application_<ts>_<NNNN>``).
    :param max_allocation_mb: ``yarn.scheduler.maximum-allocation-mb``.
    :param max_allocation_vcores: ``yarn.scheduler.maximum-allocation-vcores``.
    :param kill_delay: seconds a kill of a plain application takes (202 answers until then).
    :param kill_grace: seconds between SIGTERM and SIGKILL for process-backed applications.
    :param allowed_users: users (``user.name``) allowed; others get 403. None: everyone.
    :param anonymous_allowed: requests without ``user.name`` are allowed to read (else 401).
    :param conf_forbidden: the ``/conf`` servlet answers 403 (admin-only instrumentation).
    :param poll_interval: seconds between looks at process-backed applications.
    :param ssl_context: a server-side :class:`ssl.SSLContext` to serve HTTPS with (default: HTTP).
    :param kerberos_keytab: the ``HTTP/127.0.0.1`` keytab: requests need SPNEGO (else 401 ``Negotiate``);
        the caller is the principal's short name (:mod:`airflow_tfos.testing.spnego`), not ``user.name``.
    :param host: the address the RMs listen on.
    :param bind: ``bind(address, make)`` calls ``make()``, which opens a listening socket on ``address``, where
        that address lives (e.g. inside a network namespace: :meth:`airflow_tfos.testing.hosts.HostCluster.bind`).
    """

    def __init__(
        self,
        *,
        ha: bool = False,
        standby_mode: str = "redirect",
        cluster_timestamp: int | None = None,
        max_allocation_mb: int = 8192,
        max_allocation_vcores: int = 4,
        kill_delay: float = 0.2,
        kill_grace: float = 5.0,
        allowed_users: Iterable[str] | None = None,
        anonymous_allowed: bool = True,
        conf_forbidden: bool = False,
        poll_interval: float = 0.05,
        ssl_context: Any = None,
        kerberos_keytab: str | None = None,
        host: str = "127.0.0.1",
        bind: Callable[[str, Callable[[], Any]], Any] | None = None,
    ) -> None:
        if standby_mode not in STANDBY_MODES:
            raise ValueError(f"standby_mode must be one of {STANDBY_MODES}, not {standby_mode!r}")
        self.num_rms = 2 if ha else 1
        self.standby_mode = standby_mode
        self.cluster_timestamp = cluster_timestamp or int(time.time() * 1000)
        self.max_allocation_mb = max_allocation_mb
        self.max_allocation_vcores = max_allocation_vcores
        self.kill_delay = kill_delay
        self.kill_grace = kill_grace
        self.allowed_users = set(allowed_users) if allowed_users is not None else None
        self.anonymous_allowed = anonymous_allowed
        self.conf_forbidden = conf_forbidden
        self.poll_interval = poll_interval
        self.ssl_context = ssl_context
        self.kerberos = SpnegoAcceptor(kerberos_keytab) if kerberos_keytab else None
        self.principals: list[str] = []  # every principal that authenticated (kerberos_keytab given)
        self.host, self._bind = host, bind
        self.requests: list[RecordedRequest] = []
        self._lock = threading.RLock()
        self._apps: dict[str, App] = {}
        self._next_app = 1
        self._faults: list[Fault] = []
        self._active = 0
        self._ports: list[int] = [0] * self.num_rms
        self._servers: list[_Server | None] = [None] * self.num_rms
        self._threads: list[threading.Thread | None] = [None] * self.num_rms
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> ResourceManagerEmulator:
        """Start every RM and the process monitor; returns self."""
        self._stop.clear()
        for index in range(self.num_rms):
            self.start_rm(index)
        self._monitor = threading.Thread(target=self._watch_processes, name="rm-emulator-monitor", daemon=True)
        self._monitor.start()
        return self

    def stop(self) -> None:
        """Stop every RM and the monitor. Processes of applications are left alone."""
        self._stop.set()
        for index in range(self.num_rms):
            self.stop_rm(index)
        if self._monitor is not None:
            self._monitor.join(timeout=5)
            self._monitor = None

    def __enter__(self) -> ResourceManagerEmulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start_rm(self, index: int) -> None:
        """Start (or restart, on its former port) the RM number ``index``.

        :param index: 0 or, with ``ha=True``, 1.
        """
        if self._servers[index] is not None:
            return

        def make() -> _Server:
            return _Server((self.host, self._ports[index]), self, index)

        server = make() if self._bind is None else self._bind(self.host, make)
        if self.ssl_context is not None:  # HTTPS: the handshake runs as a connection is accepted
            server.socket = self.ssl_context.wrap_socket(server.socket, server_side=True)
        self._ports[index] = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        thread.start()
        self._servers[index], self._threads[index] = server, thread

    def stop_rm(self, index: int) -> None:
        """Take the RM number ``index`` down: its port refuses connections until ``start_rm``.

        :param index: 0 or, with ``ha=True``, 1.
        """
        server, thread = self._servers[index], self._threads[index]
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._servers[index] = self._threads[index] = None

    # ----------------------------------------------------------------- addresses and HA

    @property
    def addresses(self) -> list[str]:
        """``host:port`` of every RM, in order (for a connection's host field)."""
        return [f"{self.host}:{port}" for port in self._ports]

    def url(self, index: int | None = None) -> str:
        """Base URL of one RM (the active one by default).

        :param index: which RM; None for the active one.
        """
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{self.addresses[self._active if index is None else index]}"

    @property
    def active_index(self) -> int:
        return self._active

    def failover(self, to: int | None = None) -> None:
        """Make another RM active (the standby one by default); the former active becomes standby.

        :param to: index of the RM to make active.
        """
        with self._lock:
            self._active = (self._active + 1) % self.num_rms if to is None else to

    def ha_state(self, index: int) -> str:
        return "ACTIVE" if index == self._active else "STANDBY"

    # ----------------------------------------------------------------- faults

    def _add_fault(self, fault: Fault) -> None:
        if fault.remaining < 1:
            raise ValueError("a fault needs a count of at least 1")
        with self._lock:
            self._faults.append(fault)

    def fail_next(self, count: int = 1, *, status: int = 500, rm: int | None = None) -> None:
        """Answer the next ``count`` requests with HTTP ``status`` (a 5xx).

        :param count: how many requests.
        :param status: the status to answer.
        :param rm: only requests to this RM; None: any.
        """
        self._add_fault(Fault("fail", count, rm, status=status))

    def drop_next(self, count: int = 1, *, rm: int | None = None) -> None:
        """Close the connection of the next ``count`` requests without answering (a reset).

        :param count: how many requests.
        :param rm: only requests to this RM; None: any.
        """
        self._add_fault(Fault("drop", count, rm))

    def slow_next(self, count: int = 1, *, seconds: float = 1.0, rm: int | None = None) -> None:
        """Answer the next ``count`` requests only after ``seconds``.

        :param count: how many requests.
        :param seconds: the delay (at most 30 s).
        :param rm: only requests to this RM; None: any.
        """
        self._add_fault(Fault("slow", count, rm, seconds=min(seconds, 30.0)))

    def malformed_next(self, count: int = 1, *, body: str = "truncated", rm: int | None = None) -> None:
        """Answer the next ``count`` requests with 200 and a body that is not the RM's JSON.

        :param count: how many requests.
        :param body: ``"truncated"`` (cut-off JSON) or ``"html"`` (a proxy's error page).
        :param rm: only requests to this RM; None: any.
        """
        self._add_fault(Fault("malformed", count, rm, body=body))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def _take_fault(self, rm: int) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.remaining > 0 and fault.rm in (None, rm):
                    fault.remaining -= 1
                    return fault
        return None

    # ----------------------------------------------------------------- applications

    def _new_app_id(self) -> str:
        with self._lock:
            number = self._next_app
            self._next_app += 1
        return f"application_{self.cluster_timestamp}_{number:04d}"

    def add_application(
        self,
        name: str,
        *,
        tags: Iterable[str] = (),
        state: str = "RUNNING",
        final_status: str | None = None,
        user: str = "airflow",
        queue: str = "default",
        application_type: str = "SPARK",
        diagnostics: str = "",
        progress: float | None = None,
    ) -> str:
        """Register an application and return its id (``application_<clusterTimestamp>_<NNNN>``).

        :param name: the application's name.
        :param tags: its tags; YARN stores them lower-cased.
        :param state: one of YARN's application states.
        :param final_status: UNDEFINED for a live application; defaults from ``state`` for ended ones.
        :param user: its user.
        :param queue: its queue.
        :param application_type: e.g. ``SPARK``.
        :param diagnostics: the RM's diagnostics text.
        :param progress: 0-100; defaults from the state.
        """
        app_id = self._new_app_id()
        app = App(
            app_id=app_id,
            name=name,
            user=user,
            queue=queue,
            app_type=application_type,
            tags=tuple(sorted({tag.strip().lower() for tag in tags if tag.strip()})),
            state="NEW",
            final_status="UNDEFINED",
            diagnostics="",
            started_ms=int(time.time() * 1000),
        )
        with self._lock:
            self._apps[app_id] = app
        self.set_state(app_id, state, final_status, diagnostics)
        if progress is not None:
            app.progress = float(progress)
        return app_id

    def add_process_application(
        self,
        process: subprocess.Popen | int,
        name: str,
        *,
        tags: Iterable[str] = (),
        user: str = "airflow",
        queue: str = "default",
        application_type: str = "SPARK",
    ) -> str:
        """Register an application whose state follows a real local process; return its id.

        Pass the ``Popen`` (or the pid of a child of this process) so that its exit code can be read;
        start it in its own session (``start_new_session=True``) so that a kill reaches its children.

        :param process: the process, as a ``Popen`` or a pid.
        :param name: the application's name.
        :param tags: its tags (lower-cased, as YARN stores them).
        :param user: its user.
        :param queue: its queue.
        :param application_type: e.g. ``SPARK``.
        """
        pid = process if isinstance(process, int) else process.pid
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            pgid = None
        app_id = self.add_application(
            name, tags=tags, state="RUNNING", user=user, queue=queue, application_type=application_type
        )
        with self._lock:
            app = self._apps[app_id]
            app.process = None if isinstance(process, int) else process
            app.pid, app.pgid = pid, pgid
        self._poll_process(app)
        return app_id

    def set_state(
        self, app_id: str, state: str, final_status: str | None = None, diagnostics: str | None = None
    ) -> None:
        """Move an application along YARN's state machine.

        :param app_id: the application.
        :param state: its new state; an ended application cannot change any more.
        :param final_status: for an ended state (default: SUCCEEDED, FAILED or KILLED to match).
        :param diagnostics: new diagnostics text; None keeps the old one.
        """
        if state not in YARN_STATES:
            raise ValueError(f"unknown application state {state!r}; one of {', '.join(YARN_STATES)}")
        with self._lock:
            self._app(app_id).move(state, final_status, diagnostics)

    def application(self, app_id: str) -> dict[str, Any]:
        """The application as ``GET /ws/v1/cluster/apps/{id}`` shows it (the inner ``app`` object).

        :param app_id: the application.
        """
        with self._lock:
            app = self._app(app_id)
            self._refresh(app)
            return app_json(app, self.url(), self.cluster_timestamp)

    def _app(self, app_id: str) -> App:
        try:
            return self._apps[app_id]
        except KeyError:
            raise KeyError(f"no application {app_id} in this emulator") from None

    # ----------------------------------------------------------------- kills and processes

    def _request_kill(self, app: App) -> None:
        if app.kill_requested_at is not None:
            return
        app.kill_requested_at = time.monotonic()
        if app.pid is not None:
            signal_group(app.pid, app.pgid, 15)
        self._refresh(app)

    def _refresh(self, app: App) -> None:
        """Bring an application's state up to date (kill delays, process exits)."""
        if app.terminal:
            return
        if app.pid is not None:
            self._poll_process(app)
        elif app.kill_requested_at is not None and time.monotonic() - app.kill_requested_at >= self.kill_delay:
            self.set_state(app.app_id, "KILLED", "KILLED", KILLED_DIAGNOSTICS.format(app_id=app.app_id, user=app.user))

    def _poll_process(self, app: App) -> None:
        with self._lock:
            if app.terminal or app.pid is None:
                return
            code = exit_code(app.process, app.pid)
            if code is None:
                if (
                    app.kill_requested_at is not None
                    and not app.sigkill_sent
                    and time.monotonic() - app.kill_requested_at >= self.kill_grace
                ):
                    app.sigkill_sent = True
                    signal_group(app.pid, app.pgid, 9)
                return
            if app.kill_requested_at is not None:
                signal_group(app.pid, app.pgid, 9)  # leftovers of the group go with it, as with a container
                killed = KILLED_DIAGNOSTICS.format(app_id=app.app_id, user=app.user)
                self.set_state(app.app_id, "KILLED", "KILLED", killed)
            elif code == 0:
                self.set_state(app.app_id, "FINISHED", "SUCCEEDED", "")
            elif code == UNKNOWN_EXIT:
                self.set_state(
                    app.app_id, "FAILED", "FAILED", f"process {app.pid} exited; its exit code could not be read"
                )
            else:
                self.set_state(app.app_id, "FAILED", "FAILED", f"process {app.pid} exited with code {code}")

    def _watch_processes(self) -> None:
        while not self._stop.wait(self.poll_interval):
            with self._lock:
                apps = [app for app in self._apps.values() if not app.terminal]
            for app in apps:
                try:
                    self._refresh(app)
                except Exception:
                    log.exception("could not look at application %s", app.app_id)
