"""The HTTP side of :class:`~airflow_tfos.testing.yarn.ResourceManagerEmulator`: routes, shapes, errors, HA, faults.

The JSON shapes (an application, the cluster's info and metrics) are functions of the state they show, and a
:class:`Fault` is what the handler does instead of answering. Kept apart from the emulator's state
(applications, processes, switches; an application's record is :class:`~airflow_tfos.testing.yarn_apps.App`)
so that each module stays short.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import struct
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from airflow_tfos.hooks.backends.state import TERMINAL_STATES, YARN_STATES
from airflow_tfos.hooks.yarn_rest import (
    APP_ID_RE,
    APPS_PATH,
    CONF_PATH,
    MAX_ALLOCATION_MB_KEY,
    MAX_ALLOCATION_VCORES_KEY,
    NEW_APPLICATION_PATH,
)
from airflow_tfos.testing.yarn_apps import App

log = logging.getLogger(__name__)

CLUSTER_PATH = "/ws/v1/cluster"
CLUSTER_INFO_PATH = "/ws/v1/cluster/info"
CLUSTER_METRICS_PATH = "/ws/v1/cluster/metrics"
APP_PATH_RE = re.compile(r"^/ws/v1/cluster/apps/([^/]+)(/state)?/?$")
#: Paths a standby RM answers itself instead of redirecting (as RMWebAppFilter does).
STANDBY_SERVED_PATHS = frozenset({CLUSTER_PATH, CLUSTER_INFO_PATH, CONF_PATH})
_NO_USER = "Unable to obtain user name, user not authenticated"


def _remote(exception: str, message: str) -> dict[str, str]:
    authz = exception == "AuthorizationException"
    package = "org.apache.hadoop.security.authorize" if authz else "org.apache.hadoop.yarn.webapp"
    return {"exception": exception, "message": message, "javaClassName": f"{package}.{exception}"}


def _send(
    handler: _Handler,
    status: int,
    payload: dict[str, Any] | str,
    *,
    content_type: str = "application/json",
    headers: dict[str, str] | None = None,
) -> None:
    data = (json.dumps(payload) if isinstance(payload, dict) else payload).encode()
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        handler.close_connection = True


def _drop(handler: _Handler) -> None:
    """Close the connection with a reset and no answer."""
    handler.close_connection = True
    try:
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
    except OSError:
        pass


def app_json(app: App, base_url: str, cluster_timestamp: int) -> dict[str, Any]:
    """An application as ``GET /ws/v1/cluster/apps/{id}`` shows it (the inner ``app`` object), its URLs on
    ``base_url``."""
    now_ms = int(time.time() * 1000)
    launched = app.state in ("RUNNING", *TERMINAL_STATES)
    container = f"container_{cluster_timestamp}_{app.app_id.rsplit('_', 1)[1]}_01_000001"
    shown = {
        "id": app.app_id,
        "user": app.user,
        "name": app.name,
        "queue": app.queue if "." in app.queue else f"root.{app.queue}",  # the capacity scheduler's full path
        "state": app.state,
        "finalStatus": app.final_status,
        "progress": app.progress,
        "trackingUI": "History" if app.terminal else ("ApplicationMaster" if launched else "UNASSIGNED"),
        "diagnostics": app.diagnostics,
        "clusterId": cluster_timestamp,
        "applicationType": app.app_type,
        "applicationTags": ",".join(app.tags),
        "priority": 0,
        "startedTime": app.started_ms,
        "launchTime": app.started_ms if launched else 0,
        "finishedTime": app.finished_ms,
        "elapsedTime": (app.finished_ms or now_ms) - app.started_ms,
        "amContainerLogs": f"http://127.0.0.1:8042/node/containerlogs/{container}/{app.user}" if launched else "",
        "amHostHttpAddress": "127.0.0.1:8042" if launched else "",
        "allocatedMB": -1 if app.terminal else 1024,
        "allocatedVCores": -1 if app.terminal else 1,
        "runningContainers": -1 if app.terminal else 1,
        "memorySeconds": 0,
        "vcoreSeconds": 0,
        "queueUsagePercentage": 0.0,
        "clusterUsagePercentage": 0.0,
        "preemptedResourceMB": 0,
        "preemptedResourceVCores": 0,
        "numNonAMContainerPreempted": 0,
        "numAMContainerPreempted": 0,
        "logAggregationStatus": "DISABLED",
        "unmanagedApplication": False,
        "amNodeLabelExpression": "",
    }
    if app.terminal:
        shown["trackingUrl"] = f"{base_url}/cluster/app/{app.app_id}"
    elif launched:  # Hadoop gives none before the application master registered
        shown["trackingUrl"] = f"{base_url}/proxy/{app.app_id}/"
    return shown


def cluster_info(cluster_timestamp: int, ha_state: str, ha: bool) -> dict[str, Any]:
    """``GET /ws/v1/cluster/info`` of an RM in ``ha_state`` (``ACTIVE`` or ``STANDBY``); ``ha``: two RMs."""
    return {
        "clusterInfo": {
            "id": cluster_timestamp,
            "startedOn": cluster_timestamp,
            "state": "STARTED",
            "haState": ha_state,
            "rmStateStoreName": "org.apache.hadoop.yarn.server.resourcemanager.recovery.NullRMStateStore",
            "resourceManagerVersion": "3.4.1-emulated",
            "resourceManagerBuildVersion": "3.4.1-emulated from airflow-tfos",
            "resourceManagerVersionBuiltOn": "emulated",
            "hadoopVersion": "3.4.1-emulated",
            "hadoopBuildVersion": "3.4.1-emulated from airflow-tfos",
            "hadoopVersionBuiltOn": "emulated",
            "haZooKeeperConnectionState": "CONNECTED" if ha else "Could not find leader elector",
        }
    }


def cluster_metrics(states: list[str], max_allocation_mb: int, max_allocation_vcores: int) -> dict[str, Any]:
    """``GET /ws/v1/cluster/metrics`` of a cluster whose applications are in ``states``, of two nodes each as
    large as the largest container."""
    return {
        "clusterMetrics": {
            "appsSubmitted": len(states),
            "appsCompleted": states.count("FINISHED"),
            "appsPending": sum(s in ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED") for s in states),
            "appsRunning": states.count("RUNNING"),
            "appsFailed": states.count("FAILED"),
            "appsKilled": states.count("KILLED"),
            "totalMB": max_allocation_mb * 2,
            "totalVirtualCores": max_allocation_vcores * 2,
            "totalNodes": 2,
            "activeNodes": 2,
        }
    }


@dataclass
class Fault:
    """A fault switch of the emulator (``fail_next``, ``drop_next``, ``slow_next``, ``malformed_next``): what the
    handler does instead of answering, for the next ``remaining`` requests (to RM ``rm``; None: any)."""

    kind: str
    remaining: int
    rm: int | None
    status: int = 500
    seconds: float = 0.0
    body: str = "truncated"


@dataclass
class RecordedRequest:
    """One request an RM of the emulator received.

    :param rm: index of the RM that received it.
    :param method: HTTP method.
    :param path: URL path.
    :param query: query parameters (each a list, as ``parse_qs`` gives them).
    :param headers: request headers.
    """

    rm: int
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], emulator: RestApiMixin, index: int) -> None:
        super().__init__(address, _Handler)
        self.emulator = emulator
        self.index = index


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "Jetty(emulated-resourcemanager)"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("rm%d: %s", self.server.index, format % args)

    def _dispatch(self) -> None:
        self.server.emulator._handle(self, self.server.index)

    do_GET = do_PUT = do_POST = do_DELETE = _dispatch


class RestApiMixin:
    """Answers the ResourceManager's REST calls from the emulator's state (mixed into the emulator)."""

    def _handle(self, handler: _Handler, index: int) -> None:
        parts = urlsplit(handler.path)
        path = parts.path.rstrip("/") or "/"
        query = parse_qs(parts.query)
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        with self._lock:
            self.requests.append(RecordedRequest(index, handler.command, path, query, dict(handler.headers)))
        fault = self._take_fault(index)
        if fault is not None:
            if fault.kind == "drop":
                _drop(handler)
                return
            if fault.kind == "fail":
                _send(handler, fault.status, {"RemoteException": _remote("WebApplicationException", "emulated")})
                return
            if fault.kind == "malformed":
                if fault.body == "html":
                    page = "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
                    _send(handler, 200, page, content_type="text/html")
                else:
                    _send(handler, 200, '{"app": {"id": "application_', content_type="application/json")
                return
            time.sleep(fault.seconds)
        user = (query.get("user.name") or [None])[0]
        negotiate = handler.headers.get("Authorization", "").startswith("Negotiate ")
        if self.kerberos is not None:  # SPNEGO checked with the service keytab; user.name ignored
            from airflow_tfos.testing.spnego import CHALLENGE, Unauthenticated

            try:
                principal, user = self.kerberos.accept(handler.headers.get("Authorization"))
            except Unauthenticated as exc:
                _send(handler, 401, f"Authentication required: {exc}", content_type="text/plain", headers=CHALLENGE)
                return
            with self._lock:
                self.principals.append(principal)
        elif user is None and not negotiate and not self.anonymous_allowed:
            _send(
                handler,
                401,
                "Authentication required",
                content_type="text/plain",
                headers={"WWW-Authenticate": "Negotiate"},
            )
            return
        if user is not None and self.allowed_users is not None and user not in self.allowed_users:
            message = f"User {user} is not authorized to access the ResourceManager web services"
            _send(handler, 403, {"RemoteException": _remote("AuthorizationException", message)})
            return
        if index != self._active and path not in STANDBY_SERVED_PATHS:
            self._answer_standby(handler, index, parts.path, parts.query)
            return
        caller = user or ("kerberos-user" if negotiate else "dr.who")
        self._route(handler, index, handler.command, path, query, body, caller)

    def _answer_standby(self, handler: _Handler, index: int, path: str, query: str) -> None:
        active_up = self._servers[self._active] is not None
        if self.standby_mode == "redirect" and active_up:
            location = self.url() + path + (f"?{query}" if query else "")
            _send(
                handler,
                307,
                f"This is standby RM. The redirect url is: {location}\n",
                content_type="text/plain",
                headers={"Location": location},
            )
        else:
            _send(
                handler,
                503,
                "This is standby RM. Could not find the active RM; retry later.\n",
                content_type="text/plain",
                headers={"Refresh": "3"},
            )

    def _route(
        self, handler: _Handler, index: int, method: str, path: str, query: dict[str, list[str]], body: bytes, user: str
    ) -> None:
        base = self.url(index)
        if method == "GET" and path in (CLUSTER_PATH, CLUSTER_INFO_PATH):
            _send(handler, 200, cluster_info(self.cluster_timestamp, self.ha_state(index), self.num_rms > 1))
        elif method == "GET" and path == CLUSTER_METRICS_PATH:
            with self._lock:
                states = [app.state for app in self._apps.values()]
            _send(handler, 200, cluster_metrics(states, self.max_allocation_mb, self.max_allocation_vcores))
        elif method == "GET" and path == CONF_PATH:
            self._answer_conf(handler, query)
        elif method == "GET" and path == APPS_PATH:
            self._answer_apps(handler, query, base)
        elif method == "POST" and path == NEW_APPLICATION_PATH:
            if user == "dr.who":
                _send(handler, 403, {"RemoteException": _remote("AuthorizationException", _NO_USER)})
                return
            capability = {"memory": self.max_allocation_mb, "vCores": self.max_allocation_vcores}
            _send(handler, 200, {"application-id": self._new_app_id(), "maximum-resource-capability": capability})
        elif (match := APP_PATH_RE.match(path)) and (method == "GET" or (method == "PUT" and match.group(2))):
            self._answer_app(handler, method, match.group(1), bool(match.group(2)), body, user, base)
        else:
            _send(handler, 404, {"RemoteException": _remote("NotFoundException", f"Resource not found: {path}")})

    def _answer_conf(self, handler: _Handler, query: dict[str, list[str]]) -> None:
        if self.conf_forbidden:
            _send(handler, 403, "User is unauthorized to access this page.", content_type="text/plain")
            return
        conf = {
            MAX_ALLOCATION_MB_KEY: str(self.max_allocation_mb),
            MAX_ALLOCATION_VCORES_KEY: str(self.max_allocation_vcores),
            "yarn.scheduler.minimum-allocation-mb": "1024",
            "yarn.scheduler.minimum-allocation-vcores": "1",
            "yarn.resourcemanager.ha.enabled": "true" if self.num_rms > 1 else "false",
        }
        json_wanted = "json" in handler.headers.get("Accept", "")
        name = (query.get("name") or [None])[0]
        if name is not None and name not in conf:
            _send(handler, 404, f"Property {name} not found", content_type="text/plain")
            return
        chosen = {name: conf[name]} if name is not None else conf
        entries = [{"key": k, "value": v, "isFinal": False, "resource": "yarn-site.xml"} for k, v in chosen.items()]
        if json_wanted:
            payload = {"property": entries[0]} if name is not None else {"properties": entries}
            _send(handler, 200, payload)
            return
        xml = "".join(
            f"<property><name>{e['key']}</name><value>{e['value']}</value><final>false</final>"
            f"<source>yarn-site.xml</source></property>"
            for e in entries
        )
        _send(
            handler,
            200,
            f'<?xml version="1.0" encoding="UTF-8"?><configuration>{xml}</configuration>',
            content_type="text/xml",
        )

    def _answer_apps(self, handler: _Handler, query: dict[str, list[str]], base: str) -> None:
        def values(name: str) -> set[str]:
            return {v.strip().lower() for raw in query.get(name, []) for v in raw.split(",") if v.strip()}

        states = values("states") | values("state")
        bad = sorted(s for s in states if s.upper() not in YARN_STATES)
        if bad:
            message = (
                f"Invalid application-state {bad[0].upper()} specified. It should be one of [{', '.join(YARN_STATES)}]"
            )
            _send(handler, 400, {"RemoteException": _remote("BadRequestException", message)})
            return
        tags, users, queues = values("applicationTags"), values("user"), values("queue")
        types = values("applicationTypes")
        limit = int((query.get("limit") or ["0"])[0] or 0)
        with self._lock:
            for app in self._apps.values():
                self._refresh(app)
            apps = [
                app_json(app, base, self.cluster_timestamp)
                for app in sorted(self._apps.values(), key=lambda a: a.app_id)
                if (not states or app.state.lower() in states)
                and (not tags or tags & set(app.tags))
                and (not users or app.user.lower() in users)
                and (not queues or {app.queue.lower(), f"root.{app.queue.lower()}"} & queues)
                and (not types or app.app_type.lower() in types)
            ]
        if limit > 0:
            apps = apps[:limit]
        _send(handler, 200, {"apps": {"app": apps} if apps else {}})  # Hadoop 3.5: {} (its docs say null)

    def _answer_app(
        self, handler: _Handler, method: str, app_id: str, state_only: bool, body: bytes, user: str, base: str
    ) -> None:
        if not APP_ID_RE.match(app_id):
            message = (
                f"Invalid ApplicationId prefix: {app_id}. The valid ApplicationId should start with prefix application"
                if not app_id.startswith("application_")
                else f"Invalid ApplicationId: {app_id}"
            )
            _send(handler, 400, {"RemoteException": _remote("BadRequestException", message)})
            return
        with self._lock:
            app = self._apps.get(app_id)
            if app is None:
                message = f"app with id: {app_id} not found"
                _send(handler, 404, {"RemoteException": _remote("NotFoundException", message)})
                return
            self._refresh(app)
            if method == "GET":
                shown = {"state": app.state} if state_only else {"app": app_json(app, base, self.cluster_timestamp)}
                _send(handler, 200, shown)
                return
            if user == "dr.who":
                _send(handler, 403, {"RemoteException": _remote("AuthorizationException", _NO_USER)})
                return
            try:
                target = json.loads(body or b"{}").get("state")
            except (ValueError, AttributeError):
                target = None
            if target == app.state:
                _send(handler, 200, {"state": app.state})
                return
            if target != "KILLED":
                message = "Only 'KILLED' is allowed as a target state."
                _send(handler, 400, {"RemoteException": _remote("BadRequestException", message)})
                return
            if not app.terminal:
                self._request_kill(app)
            if app.terminal:
                _send(handler, 200, {"state": app.state})
            else:
                # the RM's own state of the application while it saves the kill (not one of the REST API's)
                _send(handler, 202, {"state": "FINAL_SAVING"}, headers={"Location": f"{base}{APPS_PATH}/{app_id}"})
