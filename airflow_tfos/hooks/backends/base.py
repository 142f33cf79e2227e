"""Where a training run's Spark driver runs: the interface every backend implements, and the rules they share.

A backend submits a prepared :class:`Submission`, looks an application up, finds applications by the
run's tag and kills them, each also without blocking an event loop. Two exist:
:class:`~airflow_tfos.hooks.backends.yarn.YarnBackend` (cluster mode, the ResourceManager REST API) and
:class:`~airflow_tfos.hooks.backends.local.LocalSparkBackend` (a detached client-mode spark-submit on this
machine). :class:`~airflow_tfos.hooks.tfos.TFoSHook` picks one, once, from its Spark connection's master.

The tracker directory must be private to this OS user (:func:`private_dir`): what the hook reuses from it
(the launcher, the runtime zip, the GPU discovery script, the tags' locks) decides what spark-submit runs,
so a directory that another user owns or can write, or one below such a directory, is refused.

Both keep one rule: one tag, one live application. A submission holds the tag's lock (:func:`tag_lock`, an
``flock`` in the tracker directory) while it looks for a live application carrying the tag and starts
a new one, so two submissions racing for the same run cannot both start.

Pure Python: no Airflow import, so the local process tracker can use it without an Airflow installation.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import re
import stat
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.errors import LocalBackendError, UntrustedLocalDirError
from airflow_tfos.shared.lease import lease_owner

log = logging.getLogger(__name__)

#: The environment variable that names the tracker directory.
TRACKER_DIR_ENV = "AIRFLOW_TFOS_LOCAL_DIR"
#: How long a submission waits for another submission of the same tag to finish checking and starting.
TAG_LOCK_TIMEOUT_SECS = 60.0

_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.=:-]{0,99}$")


def default_tracker_dir() -> str:
    """``$AIRFLOW_TFOS_LOCAL_DIR``, else ``<$AIRFLOW_HOME or ~/airflow>/tfos-local``: where the local backend
    tracks its applications, every backend keeps the tags' locks, and the hook caches what it ships."""
    configured = os.environ.get(TRACKER_DIR_ENV)
    if configured:
        return configured
    home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return os.path.join(home, "tfos-local")


def check_tag(tag: str) -> str:
    """Return ``tag`` in lower case (YARN lower-cases application tags); raise if YARN would not take it."""
    if not isinstance(tag, str) or not _TAG.match(tag):
        raise ValueError(
            f"tag {tag!r} must be 1-100 ASCII letters, digits, '_', '.', '=', ':' or '-' (YARN application tag)"
        )
    return tag.lower()


def _refuse(path: str, why: str) -> UntrustedLocalDirError:
    return UntrustedLocalDirError(
        f"{path} {why}, so another user could change what spark-submit runs: set {TRACKER_DIR_ENV} to a "
        f"directory of your own that only you can write (e.g. mkdir -m 700 ~/tfos-local), or fix {path} "
        "(chown it to this user, chmod go-w)"
    )


def private_dir(path: str | Path) -> Path:
    """Make ``path`` (mode 0700) if it is missing, and return it resolved once it is checked private.

    Every directory of the resolved path is looked at with ``os.lstat``: ``path`` itself must belong to this
    user and be writable by no one else; each directory above it must belong to root or to this user and be
    writable by no one else but root's group (gid 0), unless it has the sticky bit (``/tmp``: others cannot rename
    or remove what is ours in it). So no other user can replace anything in ``path`` after it was checked.

    :raises UntrustedLocalDirError: naming the directory and what to change.
    """
    os.makedirs(path, mode=0o700, exist_ok=True)
    real = os.path.realpath(path)
    uid = os.getuid()
    chain = [real]
    while chain[-1] != os.path.dirname(chain[-1]):
        chain.append(os.path.dirname(chain[-1]))
    for index, folder in enumerate(chain):
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode):
            raise _refuse(folder, "is not a directory (it changed while it was checked)")
        if index == 0:
            if info.st_uid != uid:
                raise _refuse(folder, f"belongs to uid {info.st_uid}, not to this user (uid {uid})")
            if info.st_mode & 0o022:
                raise _refuse(folder, f"is writable by its group or others (mode {info.st_mode & 0o7777:o})")
            continue
        if info.st_uid not in (0, uid):
            raise _refuse(folder, f"(above the tracker directory {real}) belongs to uid {info.st_uid}")
        # group 0 is root's own: a folder it may write (Airflow's image makes $AIRFLOW_HOME so) trusts no one else
        others_write = info.st_mode & 0o002 or (info.st_mode & 0o020 and info.st_gid != 0)
        if others_write and not info.st_mode & stat.S_ISVTX:
            raise _refuse(
                folder,
                f"(above the tracker directory {real}) is writable by its group (gid {info.st_gid}) or others "
                f"without the sticky bit (mode {info.st_mode & 0o7777:o})",
            )
    return Path(real)


def write_atomically(target: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``target`` under a temporary name with ``mode`` (whatever the umask), then rename it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, mode)
    os.replace(tmp, target)


def own_private_file(info: os.stat_result) -> bool:
    """Whether ``info`` (an ``lstat`` or ``fstat``) is a plain file of this user that no one else may write."""
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def _open_lock(folder: Path, name: str) -> int:
    """A descriptor of ``folder/name``, a lock file of this user: one that is not (another user's, a link) is
    replaced first, under an ``flock`` of ``folder`` so two of this user's submissions never replace each
    other's (a lock file of this user is never replaced)."""
    path = folder / name
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(folder_fd, fcntl.LOCK_EX)
        try:
            fd = os.open(path, flags, 0o600)
        except OSError:  # a symbolic link (ELOOP) or something else than a file
            fd = None
        info = os.fstat(fd) if fd is not None else None
        if info is not None and own_private_file(info):
            return fd
        if info is not None:
            log.warning("replacing %s: it is not this user's own plain file writable by no one else (owner uid %d, "
                        "mode %o)", path, info.st_uid, info.st_mode & 0o7777)  # fmt: skip
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return os.open(path, flags | os.O_EXCL, 0o600)
    finally:
        os.close(folder_fd)  # releases the folder's flock


@contextlib.contextmanager
def tag_lock(tracker_dir: str | Path, tag: str, timeout: float = TAG_LOCK_TIMEOUT_SECS) -> Iterator[None]:
    """Hold the exclusive lock of ``tag`` in ``tracker_dir`` (an ``flock``, released if the holder dies).

    The tracker directory must be private (:func:`private_dir`); a lock file there that is not this user's
    is replaced, so it blocks nothing.
    """
    folder = private_dir(private_dir(tracker_dir) / "tags")
    name = f"{check_tag(tag)}.lock"
    fd = _open_lock(folder, name)
    with os.fdopen(fd, "a+") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    lock = folder / name
                    raise LocalBackendError(
                        f"another submission for tag {tag!r} has held {lock} for more than {timeout:.0f} s"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@dataclass(frozen=True)
class Submission:
    """One training application to start, as :meth:`TFoSHook.submit` prepared it for any backend.

    What depends on where the driver runs (deploy mode, shipping the runtime and the GPU script, how the
    secrets reach the driver, the checks against the cluster) is the backend's to add.

    :param application: the launcher file spark-submit runs.
    :param args: the launcher's arguments.
    :param name: the application's name.
    :param tag: the run's tag (checked with :func:`check_tag`).
    :param run_dir: the run directory.
    :param conf: the Spark settings.
    :param spark_conn_id: the ``spark`` connection spark-submit uses.
    :param spark_binary: the spark-submit to run (None: the connection's).
    :param py_files: ``--py-files``, the user's code first.
    :param archives: ``--archives`` (comma-separated).
    :param files: the user's ``--files`` (comma-separated).
    :param properties_file: the user's Spark properties file.
    :param load_spark_defaults: add ``--load-spark-defaults`` when a properties file is used.
    :param secret_env: environment for the driver and executors that must stay off the command line.
    :param driver_secret_env: environment for the driver alone that must stay off the command line (on YARN,
        ``spark.yarn.appMasterEnv.*`` in the private properties file): the WebHDFS delegation token the hook
        obtained for a driver without a Kerberos login.
    :param env_vars: the user's environment for the driver and executors.
    :param gpu_script: a GPU discovery script this installation wrote (not the user's own), for backends
        whose executors do not share this machine's disk to ship.
    :param ship_runtime: ship the runtime zip where the driver does not run on this machine.
    :param proxy_user: the user the application runs as (``--proxy-user``), impersonated by the connection's
        principal.
    :param cache_dir: where the runtime zip is cached.
    :param num_nodes: TF nodes (one executor each).
    :param executor_cores: cores of each executor.
    :param executor_memory: heap of each executor JVM.
    """

    application: str
    args: tuple[str, ...]
    name: str
    tag: str
    run_dir: str
    conf: Mapping[str, str]
    spark_conn_id: str
    cache_dir: str
    num_nodes: int
    executor_cores: int = 1
    executor_memory: str = "2g"
    spark_binary: str | None = None
    py_files: tuple[str, ...] = ()
    archives: str | None = None
    files: str | None = None
    properties_file: str | None = None
    load_spark_defaults: bool = True
    secret_env: Mapping[str, str] = field(default_factory=dict)
    driver_secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    env_vars: Mapping[str, str] = field(default_factory=dict)
    gpu_script: str | None = None
    ship_runtime: bool = True
    proxy_user: str | None = None


class Backend(ABC):
    """Submit a training application, look it up, find it by tag and kill it, sync and async.

    A backend whose client blocks implements the sync methods only: the async ones run them in a thread.
    """

    #: The backend's name (``yarn`` or ``local``), as the pure Spark-conf functions take it.
    name: ClassVar[str]

    @abstractmethod
    def submit(self, submission: Submission) -> str:
        """Start the application; return its id. Raise :class:`ApplicationAlreadyRunningError` when a live
        application carries the submission's tag."""

    def executor_path(self, path: str) -> str:
        """Where executors find a file of this machine that :attr:`Submission.gpu_script` names."""
        return path

    @property
    def lease_owner(self) -> str:
        """This task as the owner of a run directory's lease (:mod:`airflow_tfos.shared.lease`): its host, pid and
        a random token of its process."""
        return lease_owner()

    @abstractmethod
    def get_state(self, app_id: str) -> AppState:
        """The application's state."""

    async def aget_state(self, app_id: str) -> AppState:
        """:meth:`get_state` without blocking the event loop."""
        return await asyncio.to_thread(self.get_state, app_id)

    @abstractmethod
    def find_by_tag(self, tag: str) -> list[AppState]:
        """The applications carrying ``tag`` (a checked tag), live or not, oldest first."""

    async def afind_by_tag(self, tag: str) -> list[AppState]:
        """:meth:`find_by_tag` without blocking the event loop."""
        return await asyncio.to_thread(self.find_by_tag, tag)

    def find_live(self, tag: str) -> list[AppState]:
        """The applications carrying ``tag`` that have not ended."""
        return [app for app in self.find_by_tag(tag) if not app.is_terminal]

    @abstractmethod
    def kill(self, app_id: str, grace_secs: float = 30) -> AppState:
        """Kill the application; one that has ended, or that the cluster has forgotten, is left alone."""

    async def akill(self, app_id: str, grace_secs: float = 30) -> AppState:
        """:meth:`kill` without blocking the event loop."""
        return await asyncio.to_thread(self.kill, app_id, grace_secs)

    def clean_up(self, app: AppState) -> None:  # noqa: B027 - a backend with nothing to clean up keeps this one
        """Remove what the cluster left of an application that ended without succeeding (nothing to do here)."""
