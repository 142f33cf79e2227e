"""The HTTP side of the WebHDFS emulator (:mod:`airflow_tfos.testing.webhdfs`): servers, requests, answers.

The handler parses ``/webhdfs/v1/<path>?op=...`` requests, applies the emulator's fault switches, and
answers with what the emulator's file system says, as JSON or ``RemoteException`` with Hadoop's HTTP
codes. Servers listen on 127.0.0.1 only.
"""

from __future__ import annotations

import json
import logging
import posixpath
import socket
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

log = logging.getLogger(__name__)

PREFIX = "/webhdfs/v1"
HOST = "127.0.0.1"

_JAVA_CLASSES = {
    "FileNotFoundException": ("java.io.FileNotFoundException", 404),
    "AccessControlException": ("org.apache.hadoop.security.AccessControlException", 403),
    "FileAlreadyExistsException": ("org.apache.hadoop.fs.FileAlreadyExistsException", 403),
    "ParentNotDirectoryException": ("org.apache.hadoop.fs.ParentNotDirectoryException", 403),
    "PathIsNotEmptyDirectoryException": ("org.apache.hadoop.fs.PathIsNotEmptyDirectoryException", 403),
    "IOException": ("java.io.IOException", 403),
    "StandbyException": ("org.apache.hadoop.ipc.StandbyException", 403),
    "InvalidToken": ("org.apache.hadoop.security.token.SecretManager$InvalidToken", 403),
    "SecurityException": ("java.lang.SecurityException", 403),
    "IllegalArgumentException": ("java.lang.IllegalArgumentException", 400),
    "UnsupportedOperationException": ("java.lang.UnsupportedOperationException", 400),
    "RuntimeException": ("java.lang.RuntimeException", 500),
}
_OPS = {
    "GET": {"GETFILESTATUS", "LISTSTATUS", "OPEN", "GETCONTENTSUMMARY", "GETHOMEDIRECTORY", "GETDELEGATIONTOKEN"},
    "PUT": {"MKDIRS", "CREATE", "RENAME", "SETPERMISSION", "RENEWDELEGATIONTOKEN", "CANCELDELEGATIONTOKEN"},
    "POST": {"APPEND"},
    "DELETE": {"DELETE"},
}
READ_OPS = _OPS["GET"]
TOKEN_OPS = {"GETDELEGATIONTOKEN", "RENEWDELEGATIONTOKEN", "CANCELDELEGATIONTOKEN"}


#: What follows the message of an error a datanode answers, as Hadoop 3.5's datanodes send it (the namenode's
#: stack frames, which the DFSClient inside the datanode carried over).
DATANODE_STACK = (
    "\n\tat org.apache.hadoop.hdfs.server.namenode.FSNamesystem.startFileInt(FSNamesystem.java:2850)"
    "\n\tat org.apache.hadoop.hdfs.server.namenode.NameNodeRpcServer.create(NameNodeRpcServer.java:815)\n"
)


class RemoteError(Exception):
    """An error the emulator answers as ``{"RemoteException": ...}`` with the exception's HTTP code."""

    def __init__(self, exception: str, message: str):
        super().__init__(message)
        self.exception, self.message = exception, message

    def body(self) -> dict[str, Any]:
        java_class, _ = _JAVA_CLASSES[self.exception]
        return {"RemoteException": {"exception": self.exception, "javaClassName": java_class, "message": self.message}}

    @property
    def status(self) -> int:
        return _JAVA_CLASSES[self.exception][1]


@dataclass(frozen=True)
class RequestRecord:
    """One request the emulator received (for tests to check what a client did)."""

    server: str  # "namenode0", "namenode1" or "datanode"
    method: str
    op: str
    path: str
    user: str
    query: dict[str, str]
    client: str = ""  # the client's address


class Server(ThreadingHTTPServer):
    """A threaded HTTP server on ``host`` (127.0.0.1 by default; ephemeral port) answering for one emulated server."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, emulator: Any, name: str, host: str = HOST):  # a WebHDFSEmulator; not imported here
        """One emulated server (``namenode0``, ``namenode1`` or ``datanode``) of ``emulator``, listening on ``host``."""
        super().__init__((host, 0), _Handler)
        self.emulator, self.name = emulator, name
        self.scheme = "http"
        context = getattr(emulator, "ssl_context", None)
        if context is not None:  # HTTPS: the handshake runs as a connection is accepted
            self.socket = context.wrap_socket(self.socket, server_side=True)
            self.scheme = "https"
        self.sockets: set[socket.socket] = set()

    def handle_error(self, request, client_address) -> None:
        """Log at debug level: clients that give up (timeouts, dropped connections) are part of the tests."""
        log.debug("WebHDFS emulator %s: request from %s ended with an error", self.name, client_address, exc_info=True)

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.server_address[0]}:{self.server_address[1]}"


def shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def normalize(path: str) -> str:
    return posixpath.normpath("/" + unquote(path).lstrip("/")) if path else "/"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "Jetty(9.4.emulated)"
    timeout = 60
    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read :attr:`WebHDFSEmulator.requests` instead."""

    def setup(self) -> None:
        super().setup()
        self.server.sockets.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.sockets.discard(self.connection)

    def do_GET(self) -> None:
        self._handle(self.command)

    do_PUT = do_POST = do_DELETE = do_GET

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", content_type: str = "application/json", headers=None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_json(self, status: int, value: Any, headers=None) -> None:
        body = b"" if value is None else json.dumps(value).encode()
        self._send(status, body, "application/json" if value is not None else "application/octet-stream", headers)

    def _drop(self) -> None:
        self.close_connection = True
        shut(self.connection)

    def _handle(self, method: str) -> None:
        emulator, name = self.server.emulator, self.server.name
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        op = query.get("op", "").upper()
        user = query.get("doas") or query.get("user.name") or "dr.who"
        if not split.path.startswith(PREFIX):
            self.close_connection = True
            self._send(404, b"<html><body>Not Found</body></html>", "text/html")
            return
        path = normalize(split.path[len(PREFIX) :])
        emulator.requests.append(RequestRecord(name, method, op, path, user, query, self.client_address[0]))
        fault = emulator._take_fault(name, op)
        if fault is not None and fault.kind == "slow":
            emulator._stopping.wait(fault.delay)
        elif fault is not None and fault.kind == "drop":
            if name == "datanode" and op == "CREATE":
                try:
                    emulator.datanode_write(op, path, user, query, self._read_body(), drop_half=True)
                except RemoteError:
                    pass
            self._drop()
            return
        elif fault is not None:
            self._read_body()
            if fault.kind == "malformed":
                self._send(200, b'{"FileStatus": {"length": 1, ')
            elif fault.status == 500:
                self._send_json(500, RemoteError("RuntimeException", "emulated server error").body())
            else:
                page = f"<html><body><h2>HTTP ERROR {fault.status}</h2></body></html>".encode()
                self._send(fault.status, page, "text/html")
            return
        try:
            if op not in _OPS.get(method, ()):
                raise RemoteError(
                    "IllegalArgumentException",
                    'Invalid value for webhdfs parameter "op": java.lang.IllegalArgumentException: '
                    f"{op or '(none)'} is not a valid {method} operation.",
                )
            data = self._read_body() if method in ("PUT", "POST") else b""
            gate = getattr(emulator, "kerberos", None)
            if gate is not None:
                user, query = self._authenticate(gate, name, op, path, query)
                if user is None:
                    return
                if op in TOKEN_OPS:
                    status, value = gate.token_op(op, user, query.pop("_by_kerberos", False), query)
                    self._send_json(status, value)
                    return
            if name.startswith("namenode"):  # a client may send data along with the first step: ignored
                status, value, headers = emulator.namenode_op(method, op, path, user, query, self.server)
                self._send_json(status, value, headers)
            elif op == "OPEN":
                self._send(200, emulator.datanode_read(path, user, query), "application/octet-stream")
            else:
                emulator.datanode_write(op, path, user, query, data, drop_half=False)
                location = {"Location": f"hdfs://{emulator.url.split('://', 1)[1]}{quote(path)}"}
                self._send(201 if op == "CREATE" else 200, b"", "application/octet-stream", location)
        except RemoteError as exc:
            body = exc.body()
            if name == "datanode":  # Hadoop's datanodes send the namenode's stack trace along in the message
                body["RemoteException"]["message"] += DATANODE_STACK
            self._send_json(exc.status, body)

    def _authenticate(self, gate: Any, name: str, op: str, path: str, query: dict[str, str]):
        """``(user, query)`` of a request to a Kerberized emulator, or ``(None, query)`` once it was answered 401."""
        from airflow_tfos.testing.spnego import CHALLENGE, Unauthenticated

        if not name.startswith("namenode"):
            user = gate.datanode_user(query)
            gate.authenticated.append((name, op, path, user, "token"))
            return user, query
        try:
            user, by_kerberos = gate.namenode_user(self.headers.get("Authorization"), query)
        except Unauthenticated as exc:
            page = f"<html><body><h2>HTTP ERROR 401</h2><p>{exc}</p></body></html>".encode()
            self._send(401, page, "text/html", CHALLENGE)
            return None, query
        gate.authenticated.append((name, op, path, user, "kerberos" if by_kerberos else "token"))
        query = {k: v for k, v in query.items() if k != "user.name"}
        if op in TOKEN_OPS:
            query["_by_kerberos"] = by_kerberos
        elif by_kerberos and op in ("CREATE", "APPEND", "OPEN"):  # the datanode's step needs a token
            query["delegation"] = gate.tokens.issue(user, user)
        return user, query
