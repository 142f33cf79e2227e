"""The user's own code: naming a training function, and shipping the package it lives in.

Airflow users keep their training modules beside their DAGs (the DAGs folder is on the task's
``sys.path``) or in a repository on ``PYTHONPATH``; neither is on the Spark driver's or the executors'
path. When the module of ``train_fn`` (or of a ``data`` function) is importable where the task runs but
is not installed in site-packages, its top-level package (or the module alone, when it is not in a
package) is zipped, content-hashed and cached like the runtime zip, and shipped with ``--py-files``.
The zip's hash goes into the spec, so a change of the code is a new request and an unchanged rerun is
not. Pure Python: no Airflow, no Spark.

What is shipped: the package's regular files, found without following links (``lstat``), read only up to
the size limit. Left out, each with a warning that names it: links that lead out of the package, to a
folder, to nothing or to something other than a regular file (a link to a file inside the package is
shipped as that file); FIFOs, sockets and devices; and files whose names look like secrets
(:data:`SECRET_PATTERNS`), unless the package's ``.tfos-include`` names them (one glob per line, relative to
the package, ``#`` comments) to ship them on purpose.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.util
import io
import logging
import os
import stat
import sys
import sysconfig
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from airflow_tfos.hooks.backends.base import own_private_file, private_dir, write_atomically
from airflow_tfos.hooks.errors import UserCodeError

#: The largest package shipped with --py-files; larger code belongs in a packed environment.
MAX_SHIPPED_MB = 50
_SKIPPED_DIRS = frozenset({"__pycache__", ".git", ".hg", ".svn", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
#: Names (matched without case) of files left out of the shipped code as likely secrets.
SECRET_PATTERNS = (
    "*.pem", "*.key", "*.p12", "*.pfx", "*.keytab", "*.jks", "*.kdbx", "*.ppk",
    "credentials*.json", "client_secret*.json", "service-account*.json", "secrets.json", "secrets.y*ml",
    "*.env", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
)  # fmt: skip
#: The file of a package that names (one glob per line, relative to the package) secrets shipped on purpose.
INCLUDE_FILE = ".tfos-include"
_MAX_INCLUDE_BYTES = 64 * 2**10

log = logging.getLogger(__name__)


def import_path_of(fn: str | Callable, what: str = "train_fn") -> str:
    """``fn`` as ``package.module:function``: a string is returned as it is, a function is named by its module
    and qualified name, which must be importable on the cluster (no lambda, nested function or ``__main__``)."""
    if isinstance(fn, str):
        return fn
    if not callable(fn):
        raise UserCodeError(f"{what} must be 'package.module:function' or a function, not {type(fn).__name__}")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not module or not qualname:
        raise UserCodeError(f"{what} {fn!r} has no module or name: pass 'package.module:function'")
    if qualname == "<lambda>" or "<lambda>" in qualname:
        raise UserCodeError(
            f"{what} is a lambda, which the cluster cannot import by name: define it with def at the top "
            f"level of a module (e.g. beside the DAG) and pass that function"
        )
    if "<locals>" in qualname:
        raise UserCodeError(
            f"{what} {qualname.replace('.<locals>', '')!r} is defined inside a function, which the cluster cannot "
            f"import by name: move it to the top level of module {module!r}"
        )
    if module == "__main__":
        raise UserCodeError(
            f"{what} {qualname!r} is defined in __main__, which the cluster cannot import: move it into a module "
            "of its own (e.g. beside the DAG) and import it from there"
        )
    return f"{module}:{qualname}"


def comma_list(value: str | Iterable[str] | None) -> str | None:
    """Paths given as a list (or already as a comma-separated string) as spark-submit's comma-separated list."""
    if value is None or isinstance(value, str):
        return value or None
    return ",".join(str(v) for v in value) or None


@dataclass(frozen=True)
class CodePackage:
    """The code to ship for one top-level module or package.

    :param name: the top-level module or package name.
    :param root: the file (a module) or directory (a package).
    """

    name: str
    root: Path

    def files(self) -> list[tuple[str, Path]]:
        """``(name in the zip, file)`` for every regular file of the module or package, in a stable order;
        what is left out (see the module's docstring) is named in a warning."""
        if self.root.is_file():  # the module Python imports, wherever a link to it leads
            return [(self.root.name, self.root.resolve())]
        real_root = self.root.resolve()
        included = self._included()
        found = []
        for folder, dirs, names in os.walk(self.root):  # links to folders are listed in dirs, never entered
            dirs[:] = [d for d in sorted(dirs) if self._enters(Path(folder, d), real_root)]
            for name in sorted(names):
                if name.endswith(_SKIPPED_SUFFIXES) or name.startswith("."):
                    continue
                path = Path(folder, name)
                arcname = self._arcname(path)
                target, why = _regular_file(path, real_root)
                if target is None:
                    _left_out(arcname, why)
                elif _looks_secret(name) and not _matches(arcname.partition("/")[2], included):
                    _left_out(
                        arcname, f"its name looks like a secret: name it in {self.name}/{INCLUDE_FILE} to ship it"
                    )
                else:
                    found.append((arcname, target))
        return found

    def _enters(self, folder: Path, real_root: Path) -> bool:
        """Whether the walk enters ``folder``: not a cache or hidden folder, not a link (named in a warning)."""
        if folder.name in _SKIPPED_DIRS or folder.name.startswith("."):
            return False
        if not folder.is_symlink():
            return True
        where = "inside" if _inside(folder.resolve(), real_root) else "outside the package"
        _left_out(self._arcname(folder), f"a link to a folder {where}: links to folders are not followed")
        return False

    def _arcname(self, path: Path) -> str:
        return f"{self.name}/{path.relative_to(self.root).as_posix()}"

    def _included(self) -> list[str]:
        """The globs of the package's :data:`INCLUDE_FILE` (none when it is not a small regular file)."""
        path = self.root / INCLUDE_FILE
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return []
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_INCLUDE_BYTES:
            _left_out(f"{self.name}/{INCLUDE_FILE}", f"not a regular file of at most {_MAX_INCLUDE_BYTES} bytes")
            return []
        lines = (line.strip() for line in path.read_text(errors="replace").splitlines())
        return [line for line in lines if line and not line.startswith("#")]


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _matches(relative: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in patterns)


def _looks_secret(name: str) -> bool:
    return _matches(name.lower(), SECRET_PATTERNS)


def _left_out(arcname: str, why: str) -> None:
    log.warning("left out of the shipped code: %s (%s)", arcname, why)


def _regular_file(path: Path, real_root: Path) -> tuple[Path | None, str]:
    """``path`` when it is a regular file (``lstat``: links are not followed), the file a link leads to when
    that is a regular file inside the package, else None and why it is not shipped."""
    info = os.lstat(path)
    if stat.S_ISREG(info.st_mode):
        return path, ""
    if not stat.S_ISLNK(info.st_mode):
        return None, f"{_kind(info.st_mode)}, not a regular file"
    target = Path(os.path.realpath(path))
    try:
        info = os.lstat(target)
    except OSError:
        return None, "a link that leads nowhere"
    if not stat.S_ISREG(info.st_mode):
        return None, f"a link to {_kind(info.st_mode)}, not a regular file"
    if not _inside(target, real_root):
        return None, "a link to a file outside the package"
    return target, ""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a folder" if stat.S_ISDIR(mode) else "something"


def _installed_roots() -> list[Path]:
    paths = sysconfig.get_paths()
    roots = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return [Path(p).resolve() for p in roots if p]


def code_package(import_path: str, what: str = "train_fn") -> CodePackage | None:
    """The top-level module or package that holds ``import_path``'s module when it must be shipped, else None.

    None for modules installed in site-packages (or the standard library) and for airflow-tfos itself: the
    cluster's Python environment has those, or the runtime zip brings them.
    """
    module = import_path.partition(":")[0]
    top = module.split(".")[0]
    if top == "airflow_tfos":
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        raise UserCodeError(f"cannot find {what}'s module {module!r} where this task runs: {exc}") from exc
    if spec is None:
        raise UserCodeError(
            f"{what} {import_path!r}: module {top!r} is not importable where this task runs, so it cannot be "
            "shipped to the cluster. Put it beside the DAG (in the DAGs folder) or on PYTHONPATH, or, if the "
            "cluster already has it, pass py_files= or packed_env= (or ship_code=False)"
        )
    if spec.origin in (None, "built-in", "frozen") and not spec.submodule_search_locations:
        return None
    locations = list(spec.submodule_search_locations or [])
    root = Path(locations[0]) if locations else Path(spec.origin)
    resolved = root.resolve()
    if any(resolved == base or base in resolved.parents for base in _installed_roots()):
        return None
    return CodePackage(top, root)


@dataclass(frozen=True)
class ShippedCode:
    """A zip of the user's code, ready for ``--py-files``.

    :param path: the zip, named by its content hash.
    :param digest: the content hash (part of the spec).
    :param packages: the top-level modules and packages in it.
    :param size: its size in bytes.
    """

    path: Path
    digest: str
    packages: tuple[str, ...]
    size: int

    def describe(self) -> str:
        return f"{', '.join(self.packages)} ({self.size / 2**10:.1f} KiB, {self.path.name})"


def code_zip(
    packages: Iterable[CodePackage], cache_dir: str | Path, max_mb: float = MAX_SHIPPED_MB
) -> ShippedCode | None:
    """Zip ``packages`` once per content into ``cache_dir``; None when there is nothing to ship.

    The zip's name holds the hash of its content, and a cached zip is used only when its own content
    still has that hash. Raises :class:`UserCodeError` when the code is larger than ``max_mb``.
    """
    unique = {p.name: p for p in packages}
    if not unique:
        return None
    entries: list[tuple[str, bytes]] = []
    limit = int(max_mb * 2**20)
    total = 0
    for name in sorted(unique):
        for arcname, path in unique[name].files():
            data = _read_at_most(path, limit - total)
            if data is None:
                raise UserCodeError(
                    f"the code to ship ({', '.join(sorted(unique))}, from {unique[name].root.parent}) is larger "
                    f"than {max_mb:g} MB (at {arcname}): ship large code and data as a packed environment "
                    "(packed_env=) or as files (files=), or keep only the training code beside the DAG"
                )
            total += len(data)
            entries.append((arcname, data))
    digest = _digest(entries)
    target = private_dir(cache_dir) / f"user-code-{digest}.zip"
    if not _own_file(target) or _zip_digest(target, limit) != digest:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for arcname, data in entries:
                archive.writestr(zipfile.ZipInfo(arcname, date_time=(1980, 1, 1, 0, 0, 0)), data)
        write_atomically(target, buffer.getvalue())
    return ShippedCode(target, digest, tuple(sorted(unique)), target.stat().st_size)


def _own_file(path: Path) -> bool:
    """Whether ``path`` is a plain file of this user that no one else may write (not a link)."""
    try:
        return own_private_file(os.lstat(path))
    except FileNotFoundError:
        return False


def _digest(entries: Iterable[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, data in entries:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()[:16]


def _read_at_most(path: Path, limit: int) -> bytes | None:
    """The content of the regular file ``path``, or None when it holds more than ``limit`` bytes: its size is
    checked before a byte is read, and no more than ``limit + 1`` bytes are read if it grows meanwhile."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # a FIFO put in its place does not block
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UserCodeError(f"{path} was replaced by {_kind(info.st_mode)} while the code was zipped: try again")
        if info.st_size > limit:
            return None
        data = file.read(limit + 1)
    return None if len(data) > limit else data


def _zip_digest(path: Path, limit: int) -> str | None:
    """The content hash of a cached zip; None when it cannot be read or unpacks to more than ``limit`` bytes."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if sum(info.file_size for info in infos) > limit:
                return None
            return _digest((info.filename, archive.read(info)) for info in infos)
    except (OSError, zipfile.BadZipFile):
        return None
