"""SavedModels on remote storage (``hdfs://``, ``webhdfs://``): fetched into a local cache, then loaded as usual.

TensorFlow 2.21 has no file system for ``hdfs://`` or ``webhdfs://`` ("File system scheme 'hdfs' not
implemented"), so a remote export is copied through :mod:`airflow_tfos.shared.storage` into a directory
on the local disk (``<tmp>/airflow-tfos-models-<uid>/<uri hash>-<version>``) and loaded from there.

The version of an export is a hash of its file listing (names and sizes) and of the small files that
change whenever its weights or graph do (``fingerprint.pb``, ``variables/variables.index``, which holds a
checksum of every variable): an export that was replaced is fetched again, an unchanged one is fetched
once per machine and user (several processes share the cache; a fetch goes to a staging directory that is
renamed into place when complete) and loaded once per process. A fetched copy whose version differs from
the one asked for (the export was being replaced meanwhile) is refused with :class:`SavedModelChangedError`.

A SavedModel is a TensorFlow graph, which can read and write files: what is loaded must be what the export
holds. The version is computable by anyone who can list the export, so the cache is trusted only as far as
it is this user's alone:

- Its directory is created with mode 0700 and checked on every use (a directory, not a link, owned by this
  user, writable by nobody else, in a temporary directory that others cannot rename entries of). One that
  fails the check is left alone and the process uses a fresh private directory of its own instead.
- Each copy holds a manifest (:data:`MANIFEST`) that the fetching process writes once the download matched
  the version: the URI, the version, and every file's size and SHA-256. A copy found in the cache is used
  only if it is this user's, writable by nobody else, and holds exactly the files of its manifest with
  those digests; any other copy is discarded and fetched again.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import posixpath
import shutil
import stat
import tempfile
import uuid

from airflow_tfos.runtime.errors import SavedModelChangedError
from airflow_tfos.shared.fingerprint import files_fingerprint
from airflow_tfos.shared.storage import LocalStorage, Storage, storage_for
from airflow_tfos.shared.storage.webhdfs_config import HDFS_SCHEMES, WEBHDFS_ENV, config_for_uri

log = logging.getLogger(__name__)

#: the folder under the temporary directory that holds fetched SavedModels (``-<uid>`` appended: one per user)
CACHE_FOLDER = "airflow-tfos-models"
#: a fetched copy's manifest, inside it (a dot name: not part of the export's listing, not read by TensorFlow)
MANIFEST = ".airflow-tfos-manifest.json"
#: files whose content goes into an export's version, besides its listing (``saved_model.pb`` without them)
FINGERPRINT_FILES = ("fingerprint.pb", "variables/variables.index")

_FETCHED: dict[tuple[str, str], str] = {}
_PRIVATE_ROOT: list[str] = []  # the private cache of this process, where the shared one cannot be used


def is_remote(path: str) -> bool:
    """Whether ``path`` is a URI that TensorFlow cannot open itself (anything but a local path or ``file://``)."""
    return "://" in path and not path.startswith("file://")


def storage_of(uri: str, webhdfs_config: str | None = None) -> Storage:
    """The storage for ``uri``; for HDFS URIs, with ``webhdfs_config`` (a WebHDFSConfig JSON, as the driver
    had it) when this process has no ``AIRFLOW_TFOS_WEBHDFS`` of its own (an executor)."""
    scheme = uri.split("://", 1)[0]
    if scheme in HDFS_SCHEMES and webhdfs_config and not os.environ.get(WEBHDFS_ENV, "").strip():
        from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage

        return WebHDFSStorage(config_for_uri(uri, {WEBHDFS_ENV: webhdfs_config}))
    return storage_for(uri)


def list_tree(storage: Storage, path: str) -> list[tuple[str, int]]:
    """``(relative path, size)`` of every file under ``path``, sorted: the listing of the input fingerprint."""
    return sorted((rel, size) for rel, (size, _) in files_fingerprint(path, storage).get("files", {}).items())


def version_of(storage: Storage, path: str) -> str:
    """The version of the SavedModel at ``path`` (hex); FileNotFoundError if there is no SavedModel there."""
    files = list_tree(storage, path)
    names = {name for name, _ in files}
    if "saved_model.pb" not in names:
        raise FileNotFoundError(
            f"no SavedModel at {path}: {posixpath.join(path, 'saved_model.pb')} is missing (give the export "
            "directory itself, e.g. <run_dir>/export)"
        )
    digest = hashlib.sha256(repr(files).encode())
    wanted = [n for n in FINGERPRINT_FILES if n in names] or ["saved_model.pb"]
    for name in wanted:
        digest.update(name.encode() + b"\0" + storage.read_bytes(posixpath.join(path, name)))
    return digest.hexdigest()[:24]


def remote_version(uri: str, webhdfs_config: str | None = None) -> str:
    """The version of the SavedModel at the remote ``uri``."""
    return version_of(storage_of(uri, webhdfs_config), uri)


def shared_cache_root() -> str:
    """Where this user's cache is: ``<tmp>/airflow-tfos-models-<uid>`` (neither created nor checked here)."""
    return os.path.join(tempfile.gettempdir(), f"{CACHE_FOLDER}-{os.geteuid()}")


def cache_root() -> str:
    """This user's cache directory, created with mode 0700 and checked on every call (:func:`private_dir_problem`).

    Where the shared one cannot be trusted (another user created it first, or others may write in it), a fresh
    private directory of this process's (removed when it exits) is used instead, with a warning.
    """
    shared = shared_cache_root()
    try:
        os.mkdir(shared, 0o700)
    except OSError:  # there already (checked below), or cannot be made (the check says why)
        pass
    problem = private_dir_problem(shared)
    if problem is None:
        return shared
    if _PRIVATE_ROOT and private_dir_problem(_PRIVATE_ROOT[0]) is None:
        return _PRIVATE_ROOT[0]
    private = tempfile.mkdtemp(prefix=f"{CACHE_FOLDER}-{os.geteuid()}-")
    atexit.register(shutil.rmtree, private, True)
    _PRIVATE_ROOT[:] = [private]
    log.warning(
        "not caching SavedModels in %s: %s; this process uses %s instead (remove %s, or make it a directory of "
        "this user with mode 0700, to share fetched models between processes again)",
        shared,
        problem,
        private,
        shared,
    )
    return private


def private_dir_problem(path: str) -> str | None:
    """Why the directory ``path`` is not this user's alone (None: it is).

    It must be a directory (not a link) owned by this user that neither group nor others may write, in a
    directory of root's or this user's where others cannot rename or remove it (writable by no one else, or
    sticky like ``/tmp``).
    Read and search permission for others is taken away (a model's weights are not theirs to read).
    """
    problem = _owner_problem(path)
    if problem is not None:
        return problem
    st = os.lstat(path)
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    parent = os.stat(os.path.dirname(os.path.abspath(path)))
    if parent.st_uid not in (0, os.geteuid()) or (parent.st_mode & 0o022 and not parent.st_mode & stat.S_ISVTX):
        return "other users may rename it (its parent directory is another user's, or others may write it unsticky)"
    return None


def fetch(uri: str, version: str | None = None, webhdfs_config: str | None = None) -> str:
    """Return a local directory holding the SavedModel at ``uri`` (of ``version``, or the current one).

    A copy already in the cache is returned only if its manifest says it is this export's ``version`` and its
    files still have the manifest's digests (:func:`copy_problem`); otherwise the export is fetched anew.

    :param uri: the export's ``hdfs://`` / ``webhdfs://`` URI.
    :param version: the version the caller saw (:func:`remote_version`); a copy of another version is refused.
    :param webhdfs_config: WebHDFS settings (JSON) to use where this process has none.
    """
    storage = storage_of(uri, webhdfs_config)
    version = version or version_of(storage, uri)
    root = cache_root()
    prefix = hashlib.sha256(uri.encode()).hexdigest()[:16]
    target = os.path.join(root, f"{prefix}-{version}")
    if _FETCHED.get((uri, version)) == target and _owner_problem(target) is None:
        return target  # its content was checked by this process
    problem = copy_problem(target, uri, version) if os.path.lexists(target) else "not fetched yet"
    if problem is not None:
        if os.path.lexists(target):
            log.warning("discarding the cached copy %s of %s: %s", target, uri, problem)
            _discard(target, root, prefix)
        _download(storage, uri, version, root, prefix, target)
        _discard_other_versions(root, prefix, target)
    _FETCHED[(uri, version)] = target
    return target


def _download(storage: Storage, uri: str, version: str, root: str, prefix: str, target: str) -> None:
    """Copy the export into a staging directory, check its version, write its manifest, rename it to ``target``."""
    staging = tempfile.mkdtemp(prefix=f".{prefix}-", dir=root)
    try:
        storage.get_dir(uri, staging)
        fetched = version_of(LocalStorage(), staging)
        if fetched != version:
            raise SavedModelChangedError(
                f"the SavedModel at {uri} changed while it was fetched (version {fetched}, expected {version}): "
                "run again once the export is complete"
            )
        manifest = {"uri": uri, "version": version, "files": _digests(staging)}
        with open(os.path.join(staging, MANIFEST), "x", encoding="utf-8") as out:
            json.dump(manifest, out, sort_keys=True)
        try:
            os.rename(staging, target)
        except OSError:  # another process put a copy there first: used if it is sound
            if copy_problem(target, uri, version) is None:
                return
            _discard(target, root, prefix)
            os.rename(staging, target)
        log.info("fetched SavedModel %s into %s", uri, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def copy_problem(path: str, uri: str, version: str) -> str | None:
    """Why the cached copy at ``path`` is not the one this user fetched of ``uri`` at ``version`` (None: it is)."""
    problem = _owner_problem(path)
    if problem is not None:
        return problem
    manifest_path = os.path.join(path, MANIFEST)
    try:
        if not stat.S_ISREG(os.lstat(manifest_path).st_mode):
            return f"its {MANIFEST} is not a file"
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as exc:
        return f"its manifest cannot be read ({exc})"
    if not isinstance(manifest, dict) or manifest.get("uri") != uri or manifest.get("version") != version:
        return f"its manifest is not that of {uri} at version {version}"
    try:
        files = _digests(path)
    except (OSError, ValueError) as exc:
        return f"its files cannot be read ({exc})"
    if files != manifest.get("files"):
        changed = sorted(set(files) ^ set(manifest.get("files") or {})) or sorted(
            name for name in files if files[name] != manifest["files"].get(name)
        )
        return f"its files differ from those fetched ({', '.join(changed[:3])})"
    return None


def _owner_problem(path: str) -> str | None:
    """Why the directory ``path`` is not this user's own, writable by no one else (None: it is)."""
    uid = os.geteuid()
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"it cannot be examined ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory (a link or a file stands there)"
    if st.st_uid != uid:
        return f"it belongs to uid {st.st_uid}, not to this user (uid {uid})"
    if st.st_mode & 0o022:
        return f"its group or other users may write in it (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _digests(directory: str) -> dict[str, list]:
    """``{relative path: [size, sha256]}`` of every file under ``directory`` but the manifest; ValueError on a
    link or anything else that is not a plain file or directory."""
    found: dict[str, list] = {}
    for folder, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            rel = os.path.relpath(path, directory).replace(os.sep, "/")
            if stat.S_ISDIR(mode) or rel == MANIFEST:
                continue
            if not stat.S_ISREG(mode):
                raise ValueError(f"{rel} is not a plain file")
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
            found[rel] = [os.path.getsize(path), digest.hexdigest()]
    return found


def _discard(path: str, root: str, prefix: str) -> None:
    """Move ``path`` out of the way in one step (renaming needs no rights on it), then remove what can be."""
    aside = os.path.join(root, f"{prefix}-discarded-{uuid.uuid4().hex[:8]}")
    os.rename(path, aside)
    if os.path.islink(aside) or not os.path.isdir(aside):
        os.remove(aside)
    else:
        shutil.rmtree(aside, ignore_errors=True)


def _discard_other_versions(root: str, prefix: str, keep: str) -> None:
    """Remove the cached copies of older versions of the same export (loaded models do not need their files)."""
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name.startswith(f"{prefix}-") and path != keep:
            if os.path.islink(path) or not os.path.isdir(path):
                os.remove(path)
            else:
                shutil.rmtree(path, ignore_errors=True)
