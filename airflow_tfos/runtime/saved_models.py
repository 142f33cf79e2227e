"""SavedModels on remote storage (``hdfs://``, ``webhdfs://``): fetched into a local cache, then loaded as usual.

TensorFlow 2.21 has no file system for ``hdfs://`` or ``webhdfs://`` ("File system scheme 'hdfs' not
implemented"), so a remote export is copied through :mod:`airflow_tfos.shared.storage` into a directory
on the local disk (``<tmp>/airflow-tfos-models/<uri hash>-<version>``) and loaded from there.

The version of an export is a hash of its file listing (names and sizes) and of the small files that
change whenever its weights or graph do (``fingerprint.pb``, ``variables/variables.index``, which holds a
checksum of every variable): an export that was replaced is fetched again, an unchanged one is fetched
once per machine (several processes share the cache; a fetch goes to a staging directory that is renamed
into place when complete) and loaded once per process. A fetched copy whose version differs from the one
asked for (the export was being replaced meanwhile) is refused with :class:`SavedModelChangedError`.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import shutil
import tempfile

from airflow_tfos.shared.fingerprint import files_fingerprint
from airflow_tfos.shared.storage import LocalStorage, Storage, storage_for
from airflow_tfos.shared.storage.webhdfs_config import HDFS_SCHEMES, WEBHDFS_ENV, config_for_uri

log = logging.getLogger(__name__)

#: the folder under the temporary directory that holds fetched SavedModels
CACHE_FOLDER = "airflow-tfos-models"
#: files whose content goes into an export's version, besides its listing (``saved_model.pb`` without them)
FINGERPRINT_FILES = ("fingerprint.pb", "variables/variables.index")

_FETCHED: dict[tuple[str, str], str] = {}


class SavedModelChangedError(RuntimeError):
    """The export changed between reading its version and fetching it."""


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


def cache_root() -> str:
    return os.path.join(tempfile.gettempdir(), CACHE_FOLDER)


def fetch(uri: str, version: str | None = None, webhdfs_config: str | None = None) -> str:
    """Return a local directory holding the SavedModel at ``uri`` (of ``version``, or the current one).

    :param uri: the export's ``hdfs://`` / ``webhdfs://`` URI.
    :param version: the version the caller saw (:func:`remote_version`); a copy of another version is refused.
    :param webhdfs_config: WebHDFS settings (JSON) to use where this process has none.
    """
    storage = storage_of(uri, webhdfs_config)
    version = version or version_of(storage, uri)
    known = _FETCHED.get((uri, version))
    if known and os.path.isdir(known):
        return known
    root = cache_root()
    prefix = hashlib.sha256(uri.encode()).hexdigest()[:16]
    target = os.path.join(root, f"{prefix}-{version}")
    if not os.path.isdir(target):
        os.makedirs(root, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=f".{prefix}-", dir=root)
        try:
            storage.get_dir(uri, staging)
            fetched = version_of(LocalStorage(), staging)
            if fetched != version:
                raise SavedModelChangedError(
                    f"the SavedModel at {uri} changed while it was fetched (version {fetched}, expected {version}): "
                    "run again once the export is complete"
                )
            try:
                os.rename(staging, target)
                log.info("fetched SavedModel %s into %s", uri, target)
            except OSError:  # another process put the same version in place first
                if not os.path.isdir(target):
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        _discard_other_versions(root, prefix, target)
    _FETCHED[(uri, version)] = target
    return target


def _discard_other_versions(root: str, prefix: str, keep: str) -> None:
    """Remove the cached copies of older versions of the same export (loaded models do not need their files)."""
    for name in os.listdir(root):
        path = os.path.join(root, name)
        if name.startswith(f"{prefix}-") and path != keep:
            shutil.rmtree(path, ignore_errors=True)
