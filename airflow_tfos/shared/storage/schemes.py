"""Which storage serves a URI: a registry of URI schemes, each with a factory.

Plain paths and ``file://`` are local; ``webhdfs://``, ``swebhdfs://`` and ``hdfs://`` go over WebHDFS,
whose client (and the ``hdfs`` package) is imported only when such a URI is first used.
"""

from __future__ import annotations

from collections.abc import Callable

from airflow_tfos.shared.storage.base import LocalStorage, Storage


def _webhdfs_storage(uri: str) -> Storage:
    from airflow_tfos.shared.storage.webhdfs_client import (
        storage_for_uri,  # imports the hdfs package only when HDFS is used
    )

    return storage_for_uri(uri)


_FACTORIES: dict[str, Callable[[str], Storage]] = {
    "": lambda uri: LocalStorage(),
    "file": lambda uri: LocalStorage(),
    "webhdfs": _webhdfs_storage,
    "swebhdfs": _webhdfs_storage,
    "hdfs": _webhdfs_storage,
}


def register_storage(scheme: str, factory: Callable[[str], Storage]) -> None:
    """Make URIs with ``scheme`` (e.g. ``webhdfs``) usable; ``factory(uri)`` returns their storage."""
    _FACTORIES[scheme] = factory


def join(base: str, *parts: str) -> str:
    """Join path parts onto a path or URI with ``/``."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def storage_for(uri: str) -> Storage:
    """Return the storage for ``uri``, or raise naming the schemes that are supported."""
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme not in _FACTORIES:
        known = ", ".join(f"{s}://" for s in sorted(_FACTORIES) if s) + " and plain paths"
        raise ValueError(f"no storage for {uri!r}: supported are {known}")
    return _FACTORIES[scheme](uri)
