"""WebHDFSStorage: the :class:`airflow_tfos.shared.storage.Storage` protocol over WebHDFS (settings, errors and
URIs: :mod:`airflow_tfos.shared.storage.webhdfs_config`; how a failed call is judged and told:
:mod:`airflow_tfos.shared.storage.webhdfs_errors`; the session and client classes, the RENAME call and the
file that uploads on close: :mod:`airflow_tfos.shared.storage.webhdfs_calls`).

Built on the ``hdfs`` package (HdfsCLI), one client per namenode, each with its own ``requests``
session; retries, failover and error mapping are ours, so that every failure is bounded and says
what to fix.
"""

from __future__ import annotations

import errno
import fnmatch
import logging
import os
import posixpath
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, TypeVar

from airflow_tfos.shared.errors import WebHDFSConfigError, WebHDFSError
from airflow_tfos.shared.storage.base import PRIVATE_DIR_MODE, FileInfo, is_plain_name
from airflow_tfos.shared.storage.webhdfs_calls import (
    UploadOnClose,
    kerberos_client_class,
    modified,
    renamer,
    session_class,
)
from airflow_tfos.shared.storage.webhdfs_config import WebHDFSConfig, config_for_uri, split_uri
from airflow_tfos.shared.storage.webhdfs_datanodes import (
    NAMENODE_INFO,
    DatanodeExclusions,
    failed_datanode,
    transfer_addresses,
)
from airflow_tfos.shared.storage.webhdfs_errors import (
    TRANSIENT_REMOTE,
    raise_for_server_error,
    transient_reason,
    translate,
    unavailable,
)

log = logging.getLogger(__name__)

_GLOB = set("*?[")
_T = TypeVar("_T")


class WebHDFSStorage:
    """The :class:`airflow_tfos.shared.storage.Storage` protocol over WebHDFS, with HA failover and bounded retries.

    Paths are URIs (``webhdfs://host:port/p``, ``hdfs://ns/p``) or absolute paths; listings come back in
    the form they were asked in. :meth:`local_path` is None: TensorFlow writes locally and
    :meth:`put_dir`/:meth:`get_dir` move whole trees.

    :param config: the settings (namenodes, user, auth, TLS, retries).
    :param login: with ``auth="kerberos"``, who authenticates (default: the process's
        :func:`~airflow_tfos.shared.storage.kerberos.default_login`, else its ticket cache). A process given a
        delegation token (:func:`~airflow_tfos.shared.storage.kerberos.use_delegation_token`) uses the token.
    """

    def __init__(self, config: WebHDFSConfig, *, login: Any = None):
        if not config.namenodes:
            raise WebHDFSConfigError("WebHDFSConfig.namenodes is empty: give at least one http(s)://host:port")
        self.config = config
        self.login = login
        self._clients: list[Any] | None = None
        self._active = 0
        self._lock = threading.Lock()
        self._datanodes = DatanodeExclusions(self._transfer_addresses)

    def __repr__(self) -> str:
        return f"WebHDFSStorage(namenodes={list(self.config.namenodes)}, user={self.config.effective_user()!r})"

    # --- requests, retries, errors ---------------------------------------------------------------------

    def _make_clients(self) -> list[Any]:
        from hdfs import InsecureClient

        library_log = logging.getLogger("hdfs.client")
        if library_log.level == logging.NOTSET:  # one INFO line per request in every task's log: unless asked for
            library_log.setLevel(logging.WARNING)
        clients = []
        for url in self.config.namenodes:
            session = session_class()()
            session.verify = self.config.verify
            session.hooks["response"].append(raise_for_server_error)
            session.exclusions = self._datanodes
            if self.config.auth == "kerberos":
                from airflow_tfos.shared.storage.kerberos import SpnegoAuth, install_log_redaction

                install_log_redaction()  # request URLs now carry delegation tokens (the namenode's redirects)
                session.auth = SpnegoAuth(self.login)
                client = kerberos_client_class()(
                    url, proxy=self.config.user, timeout=self.config.timeout, session=session
                )
            else:
                client = InsecureClient(
                    url, user=self.config.effective_user(), timeout=self.config.timeout, session=session
                )
            clients.append(client)
        return clients

    def _call(self, what: str, path: str, fn: Callable[[Any], _T]) -> _T:
        """Run ``fn(client)`` on the active namenode; fail over and back off on transient failures."""
        with self._lock:
            if self._clients is None:
                self._clients = self._make_clients()
            clients, start = self._clients, self._active
        config, count = self.config, len(clients)
        deadline = time.monotonic() + config.deadline
        failures: list[tuple[str, str]] = []
        delay = config.backoff
        for attempt in range((config.retries + 1) * count):
            index = (start + attempt) % count
            url = config.namenodes[index]
            try:
                result = fn(clients[index])
            except Exception as exc:
                reason = transient_reason(exc)
                error = translate(exc, what, path, url, self.config) if reason is None else None
                datanode = failed_datanode(exc, list(config.namenodes)) if reason is not None else None
                if datanode is not None:  # the namenode's redirect led to a datanode that does not answer
                    failures.append((f"{url}'s redirect to the datanode {datanode}", reason))
                    left_out = self._datanodes.failed(datanode)
                    log.warning(
                        "WebHDFS %s %s: the datanode %s did not answer (%s); trying again without it (%s)",
                        what, path, datanode, reason, left_out,
                    )  # fmt: skip
                elif reason is not None:
                    failures.append((url, reason))
                    level = logging.INFO if reason in TRANSIENT_REMOTE else logging.WARNING  # a standby is normal
                    log.log(level, "WebHDFS %s %s on %s failed (%s); trying again", what, path, url, reason)
            else:
                if index != self._active:
                    log.info("WebHDFS: namenode %s answers; using it from now on", url)
                    self._active = index
                return result
            if error is not None:
                # Raised outside the handler: neither its cause nor its context is the request's exception,
                # whose text (and so any traceback) holds the request's URL with its delegation token.
                raise error
            last_of_round = (attempt + 1) % count == 0
            if last_of_round and attempt + 1 < (config.retries + 1) * count:
                if time.monotonic() + delay >= deadline:
                    break
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
            if time.monotonic() >= deadline:
                break
        raise unavailable(what, path, failures, self.config)

    def _transfer_addresses(self) -> dict[str, str]:
        """The datanodes' transfer addresses by HTTP address, from the active namenode's JMX."""
        clients = self._clients or []
        index = self._active if self._active < len(clients) else 0
        reply = clients[index]._session.get(
            self.config.namenodes[index].rstrip("/") + NAMENODE_INFO, timeout=self.config.timeout
        )
        reply.raise_for_status()
        return transfer_addresses(reply.json())

    # --- delegation tokens (auth="kerberos") ---------------------------------------------------------

    def _require_kerberos(self, what: str) -> None:
        if self.config.auth != "kerberos":
            raise WebHDFSConfigError(
                f"{what} needs auth='kerberos' (WebHDFS issues delegation tokens only to Kerberos)"
            )

    def get_delegation_token(self, renewer: str | None = None) -> str:
        """A new HDFS delegation token for the Kerberos user (``renewer``: who may renew it; default: that user)."""
        self._require_kerberos("GETDELEGATIONTOKEN")
        params = {"renewer": renewer} if renewer else {}
        answer = self._call("GETDELEGATIONTOKEN", "/", lambda c: c._get_delegation_token("/", **params).json())
        return answer["Token"]["urlString"]

    def renew_delegation_token(self, token: str) -> float:
        """Renew ``token``; return its new expiry (seconds since the epoch)."""
        self._require_kerberos("RENEWDELEGATIONTOKEN")
        answer = self._call("RENEWDELEGATIONTOKEN", "/", lambda c: c._renew_delegation_token("/", token=token).json())
        return int(answer["long"]) / 1000.0

    def cancel_delegation_token(self, token: str) -> None:
        """Cancel ``token`` (no process can use it afterwards)."""
        self._require_kerberos("CANCELDELEGATIONTOKEN")
        self._call("CANCELDELEGATIONTOKEN", "/", lambda c: c._cancel_delegation_token("/", token=token))

    # --- the Storage protocol --------------------------------------------------------------------------

    def local_path(self, path: str) -> str | None:
        """None: HDFS is not on this machine's file system."""
        return None

    def exists(self, path: str) -> bool:
        return self._status(path) is not None

    def _status(self, path: str) -> dict[str, Any] | None:
        _, _, hpath = split_uri(path)
        try:
            return self._call("GETFILESTATUS", hpath, lambda c: c.status(hpath))
        except FileNotFoundError:
            return None

    def _statuses(self, hpath: str, *, strict: bool = False) -> list[dict[str, Any]] | None:
        """LISTSTATUS of a directory (None if missing; a file lists as one entry with an empty suffix).

        An entry whose name is not a plain file name (``/``, ``..``, NUL: never from a real namenode) is
        skipped with a warning, or raises WebHDFSError with ``strict`` (before a download writes anything).
        """
        try:
            found = self._call(
                "LISTSTATUS", hpath, lambda c: c._list_status(hpath).json()["FileStatuses"]["FileStatus"]
            )
        except FileNotFoundError:
            return None
        entries = []
        for entry in found:
            name = entry.get("pathSuffix")
            if name == "" or is_plain_name(name):
                entries.append(entry)
            elif strict:
                raise WebHDFSError(
                    f"WebHDFS LISTSTATUS {hpath} named the entry {name!r}, which is not a plain file name: refusing "
                    "to download it (check what answers as the namenode)"
                )
            else:
                log.warning("WebHDFS LISTSTATUS %s: skipping the entry %r, which is not a plain file name", hpath, name)
        return entries

    def listdir(self, path: str) -> list[str]:
        """Names in a directory (empty if it does not exist or is a file)."""
        _, _, hpath = split_uri(path)
        statuses = self._statuses(hpath) or []
        return sorted(s["pathSuffix"] for s in statuses if s["pathSuffix"])

    def list(self, pattern: str) -> list[FileInfo]:
        """Files matching a path, a directory's files (not ``.``/``_`` ones), or a glob, sorted by path."""
        scheme, authority, hpath = split_uri(pattern)
        prefix = f"{scheme}://{authority}" if scheme else ""
        found: list[tuple[str, dict[str, Any]]] = []
        if not _GLOB & set(hpath):
            status = self._status(hpath)
            if status is not None and status["type"] == "DIRECTORY":
                for entry in self._statuses(hpath) or []:
                    name = entry["pathSuffix"]
                    if entry["type"] == "FILE" and name and not name.startswith((".", "_")):
                        found.append((posixpath.join(hpath, name), entry))
            elif status is not None:
                found.append((hpath, status))
        else:
            found = [(p, s) for p, s in self._glob(hpath) if s["type"] == "FILE"]
        infos = (FileInfo(prefix + p, int(s["length"]), modified(s)) for p, s in found)
        return sorted(infos, key=lambda f: f.path)

    def _glob(self, hpath: str) -> list[tuple[str, dict[str, Any]]]:
        parts = [p for p in hpath.split("/") if p]
        current: list[tuple[str, dict[str, Any] | None]] = [("/", None)]
        for i, part in enumerate(parts):
            last, following = i == len(parts) - 1, []
            for base, _ in current:
                if _GLOB & set(part):
                    for entry in self._statuses(base) or []:
                        name = entry["pathSuffix"]
                        if name and fnmatch.fnmatchcase(name, part) and (last or entry["type"] == "DIRECTORY"):
                            following.append((posixpath.join(base, name), entry))
                else:
                    child = posixpath.join(base, part)
                    status = self._status(child) if last else {}
                    if status is not None:
                        following.append((child, status))
            current = following
        return [(p, s) for p, s in current if s]

    def read_bytes(self, path: str) -> bytes:
        _, _, hpath = split_uri(path)

        def read(client) -> bytes:
            with client.read(hpath) as reader:
                return reader.read()

        return self._call("OPEN", hpath, read)

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """One OPEN with ``offset`` and ``length``: the datanode sends only those bytes."""
        _, _, hpath = split_uri(path)

        def read(client) -> bytes:
            with client.read(hpath, offset=offset, length=length) as reader:
                return reader.read()

        return self._call("OPEN", hpath, read)

    def open(self, path: str, mode: str = "rb") -> BinaryIO:
        """``rb``: the file, downloaded to a local temporary file (seekable, removed on close).
        ``wb``: a local temporary file uploaded atomically (:meth:`write_bytes` rules) when closed."""
        if mode == "rb":
            local = tempfile.TemporaryFile(prefix="airflow-tfos-hdfs-")  # noqa: SIM115 - the caller closes it
            try:
                self.download(path, local)
            except BaseException:
                local.close()
                raise
            local.seek(0)
            return local
        if mode == "wb":
            return UploadOnClose(self._publish, path)
        raise ValueError(f"mode must be 'rb' or 'wb', got {mode!r}")

    def download(self, path: str, local: BinaryIO) -> None:
        """Copy the file at ``path`` into the open local file ``local`` (from its current position)."""
        _, _, hpath = split_uri(path)
        start = local.tell()

        def copy(client) -> None:
            local.seek(start)
            local.truncate()
            with client.read(hpath, chunk_size=1 << 20) as chunks:
                for chunk in chunks:
                    local.write(chunk)

        self._call("OPEN", hpath, copy)

    def _create(self, hpath: str, data: bytes | None = None, *, local_file: str | None = None) -> None:
        """CREATE (overwrite) ``hpath`` from ``data`` or a local file, re-sent whole on every retry."""

        def create(client) -> None:
            if local_file is None:
                client.write(hpath, data=data, overwrite=True)
                return
            with open(local_file, "rb") as stream:
                client.write(hpath, data=stream, overwrite=True)

        self._call("CREATE", hpath, create)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Replace the file's content atomically: CREATE a temporary name, then RENAME it over the target."""
        _, _, hpath = split_uri(path)
        self._publish(hpath, bytes(data))

    def _publish(self, hpath: str, data: bytes | None = None, *, local_file: str | None = None) -> None:
        parent, name = posixpath.split(hpath)
        tmp = posixpath.join(parent, f".{name}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            self._create(tmp, data, local_file=local_file)
            self._replace(tmp, hpath)
        except BaseException as exc:
            self._discard(tmp)
            if isinstance(exc, OSError) and exc.filename == tmp:  # name the file the caller wrote
                raise type(exc)(exc.errno, exc.strerror, hpath) from exc
            raise

    def _discard(self, hpath: str) -> None:
        try:
            self._call("DELETE", hpath, lambda c: c.delete(hpath, recursive=True))
        except Exception as exc:  # the original error matters more
            log.debug("could not remove the temporary file %s: %s", hpath, exc)

    def _replace(self, tmp: str, hpath: str) -> None:
        if self._call("RENAME", tmp, renamer(tmp, hpath, "OVERWRITE")):
            return
        # The server ignored renameoptions and its plain rename refuses an existing target: delete it
        # first (the one window in which readers see no file), then rename.
        log.debug("WebHDFS server ignores renameoptions: replacing %s by delete and rename", hpath)
        self._call("DELETE", hpath, lambda c: c.delete(hpath, recursive=False))
        if not self._call("RENAME", tmp, lambda c: c._rename(tmp, destination=hpath).json()["boolean"]):
            raise WebHDFSError(f"WebHDFS RENAME {tmp} to {hpath} was refused after deleting the old {hpath}")

    def makedirs(self, path: str) -> None:
        _, _, hpath = split_uri(path)
        self._call("MKDIRS", hpath, lambda c: c.makedirs(hpath))

    def make_private_dir(self, path: str) -> None:
        """MKDIRS of the parent as usual (HDFS would give new parents the permission too), MKDIRS with
        permission 700, then SETPERMISSION 700 (MKDIRS leaves an existing directory as it is)."""
        _, _, hpath = split_uri(path)
        mode = format(PRIVATE_DIR_MODE, "o")
        parent = posixpath.dirname(hpath.rstrip("/"))
        if parent not in ("", "/"):
            self._call("MKDIRS", parent, lambda c: c.makedirs(parent))
        self._call("MKDIRS", hpath, lambda c: c.makedirs(hpath, permission=mode))
        self._call("SETPERMISSION", hpath, lambda c: c.set_permission(hpath, mode))

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst`` in one step; FileExistsError if ``dst`` exists (never into it)."""
        (_, _, hsrc), (_, _, hdst) = split_uri(src), split_uri(dst)
        if self._status(hdst) is not None:
            raise FileExistsError(errno.EEXIST, f"cannot rename {src} to {dst}: the target exists", dst)
        self.makedirs(posixpath.dirname(hdst))
        try:
            done = self._call("RENAME", hsrc, renamer(hsrc, hdst, "NONE"))
        except FileExistsError:
            raise FileExistsError(errno.EEXIST, f"cannot rename {src} to {dst}: the target exists", dst) from None
        if not done:  # a plain rename's false: say why
            if self._status(hsrc) is None:
                raise FileNotFoundError(errno.ENOENT, f"cannot rename {src}: it does not exist", src)
            raise FileExistsError(errno.EEXIST, f"cannot rename {src} to {dst}: the target exists", dst)

    def delete(self, path: str) -> None:
        """Remove a file or a directory tree; nothing if it is not there."""
        _, _, hpath = split_uri(path)
        if hpath == "/":
            raise WebHDFSError("refusing to delete the HDFS root '/'")
        self._call("DELETE", hpath, lambda c: c.delete(hpath, recursive=True))

    def put_dir(self, local_dir: str, path: str) -> None:
        """Upload the local directory tree ``local_dir`` into ``path`` (created; files there are replaced)."""
        _, _, hpath = split_uri(path)
        if not os.path.isdir(local_dir):
            raise FileNotFoundError(errno.ENOENT, "no such local directory to upload", local_dir)
        for folder, dirs, files in os.walk(local_dir):
            rel = os.path.relpath(folder, local_dir)
            target = hpath if rel == "." else posixpath.join(hpath, *rel.split(os.sep))
            if not files and not dirs:  # CREATE makes the parents of files; empty folders need MKDIRS
                self.makedirs(target)
            for name in files:
                source = os.path.join(folder, name)
                self._create(posixpath.join(target, name), local_file=source)

    def get_dir(self, path: str, local_dir: str) -> None:
        """Download the tree at ``path`` into ``local_dir`` (created); FileNotFoundError if there is none."""
        _, _, hpath = split_uri(path)
        if self._status(hpath) is None:
            raise FileNotFoundError(errno.ENOENT, "no such directory on HDFS", path)
        for rel, entry in self._walk(hpath, ""):
            local = os.path.join(local_dir, *rel.split("/")) if rel else local_dir
            if entry["type"] == "DIRECTORY":
                os.makedirs(local, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with open(local, "wb") as out:
                self.download(posixpath.join(hpath, rel), out)

    def _walk(self, hpath: str, rel: str) -> Iterator[tuple[str, dict[str, Any]]]:
        yield rel, {"type": "DIRECTORY"}
        for entry in self._statuses(posixpath.join(hpath, rel) if rel else hpath, strict=True) or []:
            child = posixpath.join(rel, entry["pathSuffix"]) if rel else entry["pathSuffix"]
            if entry["type"] == "DIRECTORY":
                yield from self._walk(hpath, child)
            else:
                yield child, entry


_STORAGES: dict[str, WebHDFSStorage] = {}
_STORAGES_LOCK = threading.Lock()


def storage_for_uri(uri: str) -> WebHDFSStorage:
    """A (shared) :class:`WebHDFSStorage` for ``uri``; what :func:`airflow_tfos.shared.storage.storage_for` calls."""
    config = config_for_uri(uri)
    key = config.to_json()
    with _STORAGES_LOCK:
        if key not in _STORAGES:
            _STORAGES[key] = WebHDFSStorage(config)
        return _STORAGES[key]


def clear_cached_storages() -> None:
    """Forget the storages made so far (tests that change ``AIRFLOW_TFOS_WEBHDFS`` call it)."""
    with _STORAGES_LOCK:
        _STORAGES.clear()
