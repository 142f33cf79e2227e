"""The storage interface, and local files.

Pure Python (no Airflow, no Spark, no TensorFlow). Writes that others may watch are atomic:
:meth:`Storage.write_bytes` writes a temporary name, then renames it into place, so a reader sees the old
content or the new, never half of it.
"""

from __future__ import annotations

import glob
import os
import shutil
import uuid
from dataclasses import dataclass, field
from typing import BinaryIO, Protocol

#: The mode of a run directory: its owner's alone.
PRIVATE_DIR_MODE = 0o700


def is_plain_name(name: object) -> bool:
    """Whether ``name`` is one plain file name: a non-empty string without ``/`` or NUL, not ``.`` or ``..``."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


@dataclass(frozen=True)
class FileInfo:
    """A file, its size in bytes and when it was last modified (seconds since the epoch; None: not known)."""

    path: str
    size: int
    modified: float | None = field(default=None, compare=False)


class Storage(Protocol):
    """What the runtime needs from a file system."""

    def list(self, pattern: str) -> list[FileInfo]:
        """Files matching ``pattern`` (a path, a directory's files, or a glob), sorted by path."""

    def open(self, path: str, mode: str = "rb") -> BinaryIO:
        """Open a file for reading (``rb``) or writing (``wb``)."""

    def local_path(self, path: str) -> str | None:
        """The path on this machine's file system, when there is one (TF and Arrow then read it directly)."""

    def read_bytes(self, path: str) -> bytes:
        """The file's content; FileNotFoundError if there is none."""

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes of the file from ``offset`` (fewer at its end), in one request."""

    def write_bytes(self, path: str, data: bytes) -> None:
        """Replace the file's content atomically (temporary name, then rename), creating parents."""

    def exists(self, path: str) -> bool: ...

    def makedirs(self, path: str) -> None: ...

    def make_private_dir(self, path: str) -> None:
        """Create the directory ``path`` (if missing) and make it readable and writable by its owner only."""

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst`` (which must not exist) in one step."""

    def delete(self, path: str) -> None:
        """Remove a file or a directory tree; nothing if it is not there."""

    def listdir(self, path: str) -> list[str]:
        """Names in a directory (empty if it does not exist)."""

    def put_dir(self, local_dir: str, path: str) -> None:
        """Upload the local directory tree ``local_dir`` into ``path`` (created if missing)."""

    def get_dir(self, path: str, local_dir: str) -> None:
        """Download the directory tree at ``path`` into ``local_dir``; FileNotFoundError if there is none."""


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
        return [FileInfo(m, (st := os.stat(m)).st_size, st.st_mtime) for m in sorted(matches)]

    def open(self, path: str, mode: str = "rb") -> BinaryIO:
        return open(self._strip(path), mode)

    def local_path(self, path: str) -> str | None:
        return self._strip(path)

    def read_bytes(self, path: str) -> bytes:
        with open(self._strip(path), "rb") as f:
            return f.read()

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        with open(self._strip(path), "rb") as f:
            f.seek(offset)
            return f.read(length)

    def write_bytes(self, path: str, data: bytes) -> None:
        target = self._strip(path)
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        tmp = f"{target}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    def exists(self, path: str) -> bool:
        return os.path.exists(self._strip(path))

    def makedirs(self, path: str) -> None:
        os.makedirs(self._strip(path), exist_ok=True)

    def make_private_dir(self, path: str) -> None:
        """Create the directory with mode 0700 (parents as usual), and set 0700 on it if it existed."""
        target = self._strip(path)
        os.makedirs(target, mode=PRIVATE_DIR_MODE, exist_ok=True)
        if os.stat(target).st_mode & 0o777 != PRIVATE_DIR_MODE:
            os.chmod(target, PRIVATE_DIR_MODE)

    def rename(self, src: str, dst: str) -> None:
        source, target = self._strip(src), self._strip(dst)
        if os.path.exists(target):
            raise FileExistsError(f"cannot rename {src} to {dst}: the target exists")
        os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
        if os.path.isfile(source) and not os.path.islink(source):
            try:  # a hard link fails if the target exists, in one step: two racing renames cannot both win
                os.link(source, target)
            except FileExistsError:
                raise FileExistsError(f"cannot rename {src} to {dst}: the target exists") from None
            except OSError:  # a file system without hard links
                os.rename(source, target)
                return
            os.remove(source)
            return
        os.rename(source, target)

    def delete(self, path: str) -> None:
        target = self._strip(path)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target, ignore_errors=True)
        elif os.path.lexists(target):
            os.remove(target)

    def listdir(self, path: str) -> list[str]:
        target = self._strip(path)
        return sorted(os.listdir(target)) if os.path.isdir(target) else []

    def put_dir(self, local_dir: str, path: str) -> None:
        shutil.copytree(local_dir, self._strip(path), dirs_exist_ok=True)

    def get_dir(self, path: str, local_dir: str) -> None:
        source = self._strip(path)
        if not os.path.isdir(source):
            raise FileNotFoundError(f"no directory {path} to copy")
        shutil.copytree(source, local_dir, dirs_exist_ok=True)
