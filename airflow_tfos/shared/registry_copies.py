"""The copies in a model registry: what names a copy, what its content is, and what it must hold.

A copy of a run's export is ``versions/<version>/<spec hash>[-<fingerprint>][-<digest>]/``, named by
:func:`spec_key` (and, for a second export under the same name, the start of its :func:`content_digest`),
with its record in ``_SUCCESS``. These helpers check names before they become directories, digest an
export's files, refuse an export replaced while it was copied, and tell whether a copy holds a given export.
Pure functions of local files and records: apart from :mod:`airflow_tfos.shared.registry`, whose
:class:`~airflow_tfos.shared.registry.ModelRegistry` reads and writes the registry through its storage.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from airflow_tfos.shared.errors import RegistryError

#: A copy's record, written last beside its ``model/``; an export's own record of that name is not its content.
SUCCESS = "_SUCCESS"


def content_digest(local_dir: str) -> str:
    """The SHA-256 of an export's files under ``local_dir`` (their paths and bytes), without its ``_SUCCESS``
    record (which holds the time it was written): what names a copy's content."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(local_dir):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            relative = os.path.relpath(path, local_dir).replace(os.sep, "/")
            if relative == SUCCESS:
                continue
            file_digest = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    file_digest.update(block)
            digest.update(f"{relative}\0{file_digest.hexdigest()}\n".encode())
    return digest.hexdigest()


def check_export_record(local_dir: str, export_path: str, record: dict[str, Any]) -> None:
    """Refuse a copied export whose own ``_SUCCESS`` has other metrics or spec than ``record`` says."""
    path = os.path.join(local_dir, SUCCESS)
    if "metrics" not in record or not os.path.isfile(path):
        return
    with open(path, "rb") as f:
        try:
            own = json.loads(f.read())
        except ValueError:
            own = {}
    if own.get("metrics") != record["metrics"] or own.get("spec_hash") != record.get("spec_hash"):
        raise RegistryError(
            f"the export at {shown(export_path)} was replaced while it was published: its metrics "
            f"{own.get('metrics')} (spec {own.get('spec_hash')}) differ from the metrics judged {record['metrics']} "
            f"(spec {record.get('spec_hash')}): publish again"
        )


def holds(copy: dict[str, Any], digest: str, record: dict[str, Any]) -> bool:
    """Whether a copy is of the export with ``digest`` and the metrics in ``record``."""
    return copy.get("content_digest") == digest and copy.get("metrics") == record.get("metrics")


def names_spec(record: dict[str, Any], spec_hash: str | None, fingerprint: str | None) -> bool:
    """Whether a copy's record is of ``spec_hash`` and ``fingerprint`` (none and empty alike)."""
    return (record.get("spec_hash"), record.get("fingerprint") or None) == (spec_hash, fingerprint or None)


def spec_key(spec_hash: str | None, fingerprint: str | None = None) -> str:
    """The directory of a copy within its version: its spec hash (``unknown-spec`` when it has none), and the
    fingerprint of its input and code when the export records one."""
    key = str(spec_hash or "unknown-spec") + (f"-{fingerprint}" if fingerprint else "")
    if key.startswith(".") or any(c in key for c in "/\\ \t\n"):
        raise RegistryError(f"spec hash {key!r} cannot name a directory: it should be the export's hex spec hash")
    return key


def check_version(version: str) -> None:
    """Refuse a model version that cannot name a directory."""
    if not version or version.startswith(".") or any(c in version for c in "/\\ \t\n"):
        raise RegistryError(
            f"model version {version!r} cannot name a directory: use letters, digits, '-', '_', '.' or 'T' "
            "(e.g. the logical date as {{ ts_nodash }})"
        )


def shown(uri: str) -> str:
    """``uri`` without any user or password it carries, for messages and logs."""
    parsed = urlsplit(uri)
    if "@" not in parsed.netloc:
        return uri
    return urlunsplit(parsed._replace(netloc=parsed.netloc.rsplit("@", 1)[1]))
