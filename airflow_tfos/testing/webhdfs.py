"""A WebHDFS protocol emulator: namenode(s) and a datanode over HTTP on 127.0.0.1, backed by a temp directory.

Written from the public WebHDFS REST documentation (``/webhdfs/v1/<path>?op=...``) for tests of this
package and of users' DAGs, where no Hadoop runs, and held to Hadoop 3.5's own NameNode and DataNodes by
``tests/integration/hadoop/test_webhdfs_conformance.py``::

    with WebHDFSEmulator() as hdfs:
        storage = WebHDFSStorage(hdfs.config())
        storage.write_bytes(hdfs.uri("/runs/x/status.json"), b"{}")

What it speaks: the documented JSON shapes (``FileStatus``, ``FileStatuses``, ``ContentSummary``,
``{"boolean": ...}``, ``{"Path": ...}``) and errors as ``RemoteException`` with the documented HTTP codes;
CREATE and APPEND in two steps (the namenode answers 307 with a ``Location`` on the datanode, which
stores the data and answers 201/200), OPEN as a 307 to the datanode (``offset``/``length``); RENAME
with HDFS's two semantics (plain: ``{"boolean": false}`` when the source is missing or the destination
is a file or its parent is missing, and an existing directory as destination receives the source;
with ``renameoptions=NONE|OVERWRITE``: rename2, an empty 200 or ``FileAlreadyExistsException``);
DELETE (``recursive``), MKDIRS, GETFILESTATUS, LISTSTATUS, GETCONTENTSUMMARY, GETHOMEDIRECTORY.

Permissions: ``permission`` (octal) on MKDIRS and CREATE, and SETPERMISSION (owner or superuser only),
are kept and reported in ``FileStatus.permission``; a directory created by MKDIRS with a permission gives
its new parents that permission plus ``u+wx``, as HDFS does. Only permissions set that way are enforced:
a user who does not own such a path (and is not the superuser) needs its ``other`` bits where HDFS looks
(``x`` on the directories above; ``w`` on the parent to DELETE or RENAME away, on the nearest existing
ancestor to MKDIRS, CREATE or RENAME into; ``r-x`` on a folder to list it, ``r`` on a file to read it,
``w`` on it to APPEND), else ``AccessControlException``, worded as Hadoop words it. Groups are not
emulated (nobody but the owner is in a path's group). Owners, permissions and these rules are kept by
:mod:`airflow_tfos.testing.webhdfs_namespace`.

HA and faults, for tests of clients: ``namenodes=2`` starts an active and a standby namenode (the
standby answers every request with ``StandbyException``, HTTP 403, as Hadoop does) and
:meth:`WebHDFSEmulator.fail_over` swaps them. Each fault switch is bounded by a count: the next N
matching answers are an HTTP error (:meth:`~WebHDFSEmulator.fail_next`), a dropped connection
(:meth:`~WebHDFSEmulator.drop_next`), a slow answer (:meth:`~WebHDFSEmulator.slow_next`) or a 200 with a
body that is not JSON (:meth:`~WebHDFSEmulator.malformed_next`). :meth:`~WebHDFSEmulator.make_read_only`
makes writes under a path fail with ``AccessControlException`` (403) for one user or all.

Kerberos (``kerberos_keytab=``): SPNEGO on the namenodes, delegation tokens (``GETDELEGATIONTOKEN``,
``RENEWDELEGATIONTOKEN``, ``CANCELDELEGATIONTOKEN``, ``delegation=`` on every operation, with Hadoop's
renew interval and maximum lifetime), tokens on the datanode's side of redirects: see
:mod:`airflow_tfos.testing.webhdfs_tokens`.

Not emulated: umask, groups, ACLs, xattrs, snapshots, quotas, block locations.
"""

from __future__ import annotations

import collections
import os
import posixpath
import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from airflow_tfos.testing.webhdfs_http import (
    HOST,
    PREFIX,
    READ_OPS,
    RemoteError,
    RequestRecord,
    Server,
    normalize,
    shut,
)
from airflow_tfos.testing.webhdfs_namespace import NAMENODE_ACCESS, Namespace, requested_mode
from airflow_tfos.testing.webhdfs_tokens import DelegationTokens, KerberosGate

__all__ = ["HOST", "PREFIX", "RemoteError", "RequestRecord", "WebHDFSEmulator"]


@dataclass
class _Fault:
    kind: str  # "status", "drop", "slow", "malformed"
    count: int
    server: str  # "namenode", "datanode" or "any"
    op: str | None
    status: int = 503
    delay: float = 0.0

    def matches(self, server: str, op: str) -> bool:
        where = self.server == "any" or server.startswith(self.server)
        return self.count > 0 and where and self.op in (None, op)


class WebHDFSEmulator:
    """Namenode(s) and one datanode speaking WebHDFS on ephemeral ports (of 127.0.0.1 unless told otherwise).

    :param namenodes: 1, or 2 for HA (the first active, the second standby).
    :param root: directory holding the file system's content (default: a fresh temporary directory,
        removed by :meth:`stop`).
    :param rename_options: honour ``renameoptions`` on RENAME (rename2, as Hadoop's namenode does); False
        answers every RENAME with the plain rename's ``{"boolean": ...}``, as a server that ignores it.
    :param superuser: owner of ``/`` and of paths nobody created.
    :param ssl_context: a server-side :class:`ssl.SSLContext` to serve HTTPS with (default: HTTP).
    :param kerberos_keytab: the ``HTTP/127.0.0.1`` service keytab: the namenodes then require SPNEGO or a
        delegation token (default: simple authentication, ``user.name``).
    :param token_renew_interval: seconds a delegation token lives after it was issued or renewed.
    :param token_max_lifetime: seconds after issue past which a delegation token cannot be renewed.
    :param namenode_host: the address the namenodes listen on.
    :param datanode_host: the address the datanode listens on (another host's address makes every CREATE,
        APPEND and OPEN redirect cross hosts).
    :param bind: ``bind(address, make)`` calls ``make()``, which opens a listening socket on ``address``, where
        that address lives (e.g. inside a network namespace: :meth:`airflow_tfos.testing.hosts.HostCluster.bind`).
    """

    def __init__(
        self,
        *,
        namenodes: int = 1,
        root: str | None = None,
        rename_options: bool = True,
        superuser: str = "hdfs",
        ssl_context: Any = None,
        kerberos_keytab: str | None = None,
        token_renew_interval: float = 86400.0,
        token_max_lifetime: float = 7 * 86400.0,
        namenode_host: str = HOST,
        datanode_host: str = HOST,
        bind: Callable[[str, Callable[[], Any]], Any] | None = None,
    ):
        if namenodes not in (1, 2):
            raise ValueError(f"namenodes must be 1 or 2 (active and standby), got {namenodes}")
        self.num_namenodes = namenodes
        self._own_root = root is None
        self.root = root or tempfile.mkdtemp(prefix="webhdfs-emulator-")
        self.rename_options = rename_options
        self.superuser = superuser
        self.ssl_context = ssl_context
        self.tokens = DelegationTokens(renew_interval=token_renew_interval, max_lifetime=token_max_lifetime)
        self.kerberos = KerberosGate(kerberos_keytab, self.tokens) if kerberos_keytab else None
        self.namenode_host, self.datanode_host = namenode_host, datanode_host
        self._bind = bind
        self.active = 0
        self.requests: collections.deque[RequestRecord] = collections.deque(maxlen=10000)
        self._lock = threading.RLock()
        self._faults: list[_Fault] = []
        self._namespace = Namespace(self)  # owners, permissions and the rules of paths
        self._stopping = threading.Event()
        self._servers: list[Server] = []
        self._threads: list[threading.Thread] = []

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> WebHDFSEmulator:
        """Start the servers (idempotent); return self."""
        if self._servers:
            return self
        self._stopping.clear()
        os.makedirs(self.root, exist_ok=True)
        names = [f"namenode{i}" for i in range(self.num_namenodes)] + ["datanode"]
        self._servers = [self._server(name) for name in names]
        for server in self._servers:
            thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
            thread.name = f"webhdfs-emulator-{server.name}"
            thread.start()
            self._threads.append(thread)
        return self

    def _server(self, name: str) -> Server:
        host = self.datanode_host if name == "datanode" else self.namenode_host
        if self._bind is None:
            return Server(self, name, host)
        return self._bind(host, lambda: Server(self, name, host))

    def stop(self) -> None:
        """Stop the servers, close open connections, and remove the temporary root (if it made one)."""
        self._stopping.set()
        for server in self._servers:
            server.shutdown()
            for sock in list(server.sockets):
                shut(sock)
            server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._servers, self._threads = [], []
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> WebHDFSEmulator:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # --- addresses -----------------------------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        """The namenodes' ``http(s)://host:port`` URLs, in order (the first is active at start)."""
        self._require_started()
        return [s.url for s in self._servers[: self.num_namenodes]]

    @property
    def url(self) -> str:
        """The active namenode's URL."""
        return self.urls[self.active]

    @property
    def datanode_url(self) -> str:
        self._require_started()
        return self._servers[-1].url

    def uri(self, path: str = "/", *, scheme: str = "webhdfs") -> str:
        """``webhdfs://<host>:<active port>/path`` (the URI naming the active namenode)."""
        return f"{scheme}://{self.url.split('://', 1)[1]}/{path.lstrip('/')}"

    def config(self, user: str = "tester", **settings: Any):
        """A :class:`~airflow_tfos.shared.storage.webhdfs_config.WebHDFSConfig` naming every namenode of this
        emulator."""
        from airflow_tfos.shared.storage.webhdfs_config import WebHDFSConfig

        return WebHDFSConfig(namenodes=self.urls, user=user, **settings)

    def local_path(self, path: str) -> str:
        """Where the HDFS path's content lies on this machine (for tests to look behind the protocol)."""
        return os.path.join(self.root, normalize(path).lstrip("/"))

    def _require_started(self) -> None:
        if not self._servers:
            raise RuntimeError("the WebHDFS emulator is not started: call start() or use it as a context manager")

    # --- switches ------------------------------------------------------------------------------------

    def fail_over(self) -> None:
        """Make the standby namenode active and the active one standby."""
        if self.num_namenodes < 2:
            raise RuntimeError("fail_over needs WebHDFSEmulator(namenodes=2)")
        with self._lock:
            self.active = 1 - self.active

    def fail_next(self, count: int, *, status: int = 503, server: str = "namenode", op: str | None = None) -> None:
        """Answer the next ``count`` requests (to ``server``, of ``op`` if given) with HTTP ``status``.

        500 comes as a ``RemoteException`` (``RuntimeException``); other codes as a short HTML page, as a
        proxy or an overloaded Jetty would send.
        """
        self._add(_Fault("status", count, server, op, status=status))

    def drop_next(self, count: int, *, server: str = "namenode", op: str | None = None) -> None:
        """Close the connection of the next ``count`` requests without answering.

        On the datanode a dropped CREATE first writes half of the uploaded data, as an upload cut midway.
        """
        self._add(_Fault("drop", count, server, op))

    def slow_next(self, count: int, delay: float, *, server: str = "namenode", op: str | None = None) -> None:
        """Answer the next ``count`` requests only after ``delay`` seconds (cut short by :meth:`stop`)."""
        self._add(_Fault("slow", count, server, op, delay=delay))

    def malformed_next(self, count: int, *, server: str = "namenode", op: str | None = None) -> None:
        """Answer the next ``count`` requests with HTTP 200 and a body that is not JSON."""
        self._add(_Fault("malformed", count, server, op))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def make_read_only(self, path: str, user: str | None = None, *, unreadable: bool = False) -> None:
        """Refuse writes (and reads too when ``unreadable``) under ``path`` to ``user`` (None: everyone)."""
        with self._lock:
            self._namespace.read_only.append((normalize(path), user, unreadable))

    def _add(self, fault: _Fault) -> None:
        if fault.count < 1:
            raise ValueError(f"a fault's count must be at least 1, got {fault.count}")
        if fault.server not in ("namenode", "datanode", "any"):
            raise ValueError(f"server must be 'namenode', 'datanode' or 'any', got {fault.server!r}")
        with self._lock:
            self._faults.append(fault)

    def _take_fault(self, server: str, op: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(server, op):
                    fault.count -= 1
                    taken = _Fault(**fault.__dict__)
                    self._faults = [f for f in self._faults if f.count > 0]
                    return taken
        return None

    # --- the file system (owners, permissions and the rules of paths: webhdfs_namespace) ----------------

    def permission(self, path: str) -> str:
        """The octal permission that GETFILESTATUS reports for ``path`` (for tests)."""
        with self._lock:
            return self._namespace.status(normalize(path))["permission"]

    def namenode_op(self, method: str, op: str, path: str, user: str, query: dict[str, str], server: Server):
        """Answer one namenode request: ``(status, body_or_None, headers)``; raises :class:`RemoteError`."""
        if server.name != f"namenode{self.active}":
            category = "READ" if op in READ_OPS else "WRITE"
            raise RemoteError(
                "StandbyException",
                f"Operation category {category} is not supported in state standby. Visit https://s.apache.org/sbnn-error",
            )
        with self._lock:
            if op not in ("CREATE", "APPEND", "RENAME"):  # as in Hadoop, the datanode's step checks those
                self._namespace.check_access(path, user, NAMENODE_ACCESS.get(op, "write"))
            if op == "GETFILESTATUS":
                self._namespace.require(path, f"File does not exist: {path}")
                return 200, {"FileStatus": self._namespace.status(path)}, {}
            if op == "LISTSTATUS":
                local = self._namespace.require(path, f"File {path} does not exist.")
                if not os.path.isdir(local):
                    return 200, {"FileStatuses": {"FileStatus": [self._namespace.status(path)]}}, {}
                names = sorted(os.listdir(local))
                statuses = [self._namespace.status(posixpath.join(path, n), n) for n in names]
                return 200, {"FileStatuses": {"FileStatus": statuses}}, {}
            if op == "GETCONTENTSUMMARY":
                return 200, self._namespace.summary(path), {}
            if op == "GETHOMEDIRECTORY":
                return 200, {"Path": f"/user/{user}"}, {}
            if op == "MKDIRS":
                local = self.local_path(path)
                if os.path.isfile(local):
                    raise RemoteError("FileAlreadyExistsException", f"Path is not a directory: {path}")
                self._namespace.parent_dirs(path + "/x", user, requested_mode(query))
                return 200, {"boolean": True}, {}
            if op == "SETPERMISSION":
                self._namespace.require(path, f"File does not exist: {path}")
                mode = requested_mode(query)
                owner = self._namespace.owners.get(path, self.superuser)
                if user not in (owner, self.superuser):
                    raise RemoteError(
                        "AccessControlException", f"Permission denied. user={user} is not the owner of inode={path}"
                    )
                if mode is not None:
                    self._namespace.modes[path] = mode
                return 200, None, {}
            if op == "DELETE":
                local = self.local_path(path)
                if path == "/" or not os.path.exists(local):
                    return 200, {"boolean": False}, {}
                if os.path.isdir(local):
                    if os.listdir(local) and query.get("recursive", "false").lower() != "true":
                        raise RemoteError(
                            "PathIsNotEmptyDirectoryException", f"`{path} is non empty': Directory is not empty"
                        )
                    shutil.rmtree(local)
                else:
                    os.remove(local)
                self._namespace.forget(path)
                return 200, {"boolean": True}, {}
            if op == "RENAME":
                if "destination" not in query:
                    raise RemoteError(
                        "IllegalArgumentException", "Required param destination for op: RENAME is null or empty"
                    )
                dst = normalize(query["destination"])
                self._namespace.check_access(path, user, "delete")  # out of the source's folder
                self._namespace.check_access(dst, user, "create")  # into the destination's
                options = {o.strip().upper() for o in query.get("renameoptions", "").split(",") if o.strip()}
                return 200, self._namespace.rename(path, dst, options), {}
            if op == "OPEN":  # a folder is redirected too: the datanode's step finds it is no file
                self._namespace.require(path, f"File {path} not found.")
            if op == "APPEND":
                self._namespace.require(path, f"File does not exist: {path}")
        # CREATE, APPEND, OPEN: the data goes through the datanode.
        forwarded = {k: v for k, v in query.items() if k not in ("op",)}
        forwarded.update({"op": op, "user.name": user, "namenoderpcaddress": server.url.split("://", 1)[1]})
        location = f"{self.datanode_url}{PREFIX}{quote(path)}?" + "&".join(
            f"{quote(k)}={quote(str(v), safe='')}" for k, v in forwarded.items()
        )
        return 307, None, {"Location": location}

    def datanode_write(
        self, op: str, path: str, user: str, query: dict[str, str], data: bytes, drop_half: bool
    ) -> None:
        """Store an upload (CREATE or APPEND); raises :class:`RemoteError`."""
        with self._lock:
            exists = os.path.exists(self.local_path(path))
            self._namespace.check_access(path, user, "create" if op == "CREATE" and not exists else "write")
            local = self.local_path(path)
            if op == "CREATE":
                if os.path.isdir(local):
                    raise RemoteError("FileAlreadyExistsException", f"{path} already exists as a directory")
                if os.path.exists(local) and query.get("overwrite", "false").lower() != "true":
                    raise RemoteError("FileAlreadyExistsException", f"{path} for client 127.0.0.1 already exists")
                self._namespace.parent_dirs(path, user)
                self._namespace.owners[path] = user
                mode = requested_mode(query)
                if mode is not None:
                    self._namespace.modes[path] = mode
                else:
                    self._namespace.modes.pop(path, None)
            elif not os.path.isfile(local):
                raise RemoteError("FileNotFoundException", f"File does not exist: {path}")
            stream = open(local, "wb" if op == "CREATE" else "ab")  # noqa: SIM115 - closed below
        with stream:
            stream.write(data[: len(data) // 2] if drop_half else data)

    def datanode_read(self, path: str, user: str, query: dict[str, str]) -> bytes:
        """The bytes an OPEN asks for (``offset``, ``length``); raises :class:`RemoteError`."""
        with self._lock:
            self._namespace.check_access(path, user, "read")
            local = self.local_path(path)
            if os.path.isdir(local):
                raise RemoteError("FileNotFoundException", f"Path is not a file: {path}")
            if not os.path.isfile(local):
                raise RemoteError("FileNotFoundException", f"File {path} not found.")
            offset, length = int(query.get("offset") or 0), query.get("length")
            if offset < 0 or (length is not None and int(length) < 0):
                bad = "offset" if offset < 0 else "length"
                raise RemoteError(
                    "IllegalArgumentException",
                    f'Invalid value for webhdfs parameter "{bad}": java.lang.IllegalArgumentException: Invalid '
                    f"parameter range: {bad} = {query.get(bad)} < 0",
                )
            with open(local, "rb") as f:
                f.seek(offset)
                return f.read() if length is None else f.read(int(length))
