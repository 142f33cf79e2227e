"""The one seam through which the runtime lists and opens files: local paths and ``file://`` URIs now.

A storage is chosen by the URI's scheme (:func:`storage_for`). Other schemes (``hdfs://`` and
``webhdfs://`` over WebHDFS) plug in with :func:`register_storage` and are then usable everywhere the
runtime takes a path: InputMode.TENSORFLOW file shards and the readers in
:mod:`airflow_tfos.runtime.feed.files`.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, Protocol


@dataclass(frozen=True)
class FileInfo:
    """A file and its size in bytes."""

    path: str
    size: int


class Storage(Protocol):
    """What the runtime needs from a file system."""

    def list(self, pattern: str) -> list[FileInfo]:
        """Files matching ``pattern`` (a path, a directory's files, or a glob), sorted by path."""

    def open(self, path: str, mode: str = "rb") -> BinaryIO:
        """Open a file for reading (``rb``) or writing (``wb``)."""

    def local_path(self, path: str) -> str | None:
        """The path on this machine's file system, when there is one (TF and Arrow then read it directly)."""


class LocalStorage:
    """Local files, given as plain paths or ``file://`` URIs."""

    @staticmethod
    def _strip(path: str) -> str:
        return path[len("file://") :] if path.startswith("file://") else path

    def list(self, pattern: str) -> list[FileInfo]:
        path = self._strip(pattern)
        if os.path.isdir(path):
            names = [os.path.join(path, n) for n in os.listdir(path)]
            matches = [n for n in names if os.path.isfile(n) and not os.path.basename(n).startswith((".", "_"))]
        else:
            matches = [m for m in glob.glob(path) if os.path.isfile(m)]
        return [FileInfo(m, os.path.getsize(m)) for m in sorted(matches)]

    def open(self, path: str, mode: str = "rb") -> BinaryIO:
        return open(self._strip(path), mode)

    def local_path(self, path: str) -> str | None:
        return self._strip(path)


_FACTORIES: dict[str, Callable[[str], Storage]] = {"": lambda uri: LocalStorage(), "file": lambda uri: LocalStorage()}


def register_storage(scheme: str, factory: Callable[[str], Storage]) -> None:
    """Make URIs with ``scheme`` (e.g. ``webhdfs``) usable; ``factory(uri)`` returns their storage."""
    _FACTORIES[scheme] = factory


def storage_for(uri: str) -> Storage:
    """Return the storage for ``uri``, or raise naming the schemes that are supported."""
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme not in _FACTORIES:
        known = ", ".join(f"{s}://" for s in sorted(_FACTORIES) if s) + " and plain paths"
        raise ValueError(f"no storage for {uri!r}: supported are {known}")
    return _FACTORIES[scheme](uri)
