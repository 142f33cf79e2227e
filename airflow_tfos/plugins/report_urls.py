"""Addresses of training reports on the api-server, and the checks on what an address may name.

Pure Python (no Airflow, no FastAPI): the "Training report" extra link builds the address on the worker
with :func:`report_link`; the api-server's plugin app (:mod:`airflow_tfos.plugins.reports`) decodes and
checks it. The address is path-style, so that the report's relative ``<img src="metrics.png">`` resolve
to the plugin too::

    tfos/reports/<token>/report.html
    tfos/reports/<token>/<plot>.png

``<token>`` is URL-safe base64 (no padding) of JSON: a list ``[run_dir]``, or ``[run_dir, conn_id]`` for
an HDFS run directory read through a ``webhdfs`` connection other than ``webhdfs_default``; or, when the
address names the Dag that owns the run, an object ``{"run_dir", "conn_id", "dag_id"}``. It is an address,
neither a secret nor a signature: whoever may use the app can write one for any run directory and any Dag,
which is why the app itself checks every one (:func:`normalize_run_dir`, :func:`check_report_file_name`),
authorizes the Dag it names before it looks anything up, and serves the report only when the run
directory's ``owner.json`` names that same Dag.
"""

from __future__ import annotations

import base64
import binascii
import json
import posixpath
import re
from typing import NamedTuple

from airflow_tfos.hooks.errors import ReportAddressError
from airflow_tfos.hooks.webhdfs_connection import DEFAULT_CONN_ID as DEFAULT_WEBHDFS_CONN_ID
from airflow_tfos.shared.storage.webhdfs_config import HDFS_SCHEMES

#: Where the plugin app is mounted on the api-server.
URL_PREFIX = "/tfos"
#: The app's route to one file of one report.
REPORT_ROUTE = "/reports/{token}/{name}"
#: The page of a report (beside it: its PNG plots).
REPORT_PAGE = "report.html"
#: The only file names the app serves from a run directory's ``report/`` folder.
REPORT_FILE_NAME = re.compile(r"^(?:report\.html|[A-Za-z0-9][A-Za-z0-9_-]{0,99}\.png)$")
#: Schemes of run directories (as :func:`airflow_tfos.shared.storage.storage_for` knows them); the HDFS ones.
RUN_DIR_SCHEMES = frozenset({"", "file", *HDFS_SCHEMES})

MAX_TOKEN_CHARS = 4096
_TOKEN = re.compile(rf"^[A-Za-z0-9_-]{{1,{MAX_TOKEN_CHARS}}}$")
_CONN_ID = re.compile(r"^[A-Za-z0-9_.-]{1,250}$")
#: A Dag id as Airflow allows it (letters, digits, ``_``, ``.``, ``-``; at most 250 characters).
_DAG_ID = re.compile(r"^[\w.-]{1,250}$")


class ReportAddress(NamedTuple):
    """What a report token names: the run directory, its ``webhdfs`` connection (None: the default) and the
    Dag said to own the run (None: the address names none, as links of earlier versions)."""

    run_dir: str
    conn_id: str | None = None
    dag_id: str | None = None


def _scheme(run_dir: str) -> str:
    return run_dir.split("://", 1)[0].lower() if "://" in run_dir else ""


def encode_report_token(run_dir: str, webhdfs_conn_id: str | None = None, *, dag_id: str | None = None) -> str:
    """The URL-safe token naming ``run_dir`` (and its ``webhdfs`` connection, when it matters, and the Dag that
    owns the run, when given: the app then authorizes that Dag before it reads anything)."""
    run_dir = run_dir.rstrip("/") or run_dir
    conn_id = None
    if _scheme(run_dir) in HDFS_SCHEMES and webhdfs_conn_id and webhdfs_conn_id != DEFAULT_WEBHDFS_CONN_ID:
        conn_id = webhdfs_conn_id
    if dag_id is not None:
        fields: object = {"run_dir": run_dir, "conn_id": conn_id, "dag_id": dag_id}
    else:
        fields = [run_dir, conn_id] if conn_id else [run_dir]
    body = json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return base64.urlsafe_b64encode(body).rstrip(b"=").decode("ascii")


def decode_report_address(token: str) -> ReportAddress:
    """The run directory, ``webhdfs`` connection id and owning Dag a token names; ReportAddressError when it
    is not a token (its characters, its encoding, its fields)."""
    if not _TOKEN.match(token):
        raise ReportAddressError(
            f"not a training report address: the token must be 1 to {MAX_TOKEN_CHARS} URL-safe base64 characters"
        )
    try:
        fields = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ReportAddressError("not a training report address: the token does not decode") from None
    if isinstance(fields, dict) and set(fields) == {"run_dir", "conn_id", "dag_id"}:
        address = ReportAddress(fields["run_dir"], fields["conn_id"], fields["dag_id"])
        if not isinstance(address.dag_id, str) or not _DAG_ID.match(address.dag_id):
            raise ReportAddressError("not a training report address: the token names no valid Dag id")
    elif isinstance(fields, list) and 1 <= len(fields) <= 2:
        address = ReportAddress(*fields)
    else:
        raise ReportAddressError("not a training report address: the token names no run directory")
    if not isinstance(address.run_dir, str) or not address.run_dir:
        raise ReportAddressError("not a training report address: the token names no run directory")
    conn_id = address.conn_id
    if conn_id is not None and not (isinstance(conn_id, str) and _CONN_ID.match(conn_id)):
        raise ReportAddressError(f"{conn_id!r} is not a connection id")
    return address


def decode_report_token(token: str) -> tuple[str, str | None]:
    """The run directory and ``webhdfs`` connection id (None: the default) a token names."""
    address = decode_report_address(token)
    return address.run_dir, address.conn_id


def normalize_run_dir(run_dir: str) -> str:
    """``run_dir`` with repeated and trailing slashes and ``.`` segments removed.

    Refused: unknown schemes, relative paths, ``..`` segments, control characters and the root.
    """
    if any(ord(c) < 32 or ord(c) == 127 for c in run_dir):
        raise ReportAddressError("the run directory contains control characters")
    scheme = _scheme(run_dir)
    if scheme not in RUN_DIR_SCHEMES:
        known = ", ".join(sorted(f"{s}://" for s in RUN_DIR_SCHEMES if s))
        raise ReportAddressError(f"{run_dir!r} is no run directory: use an absolute path or {known}")
    rest = run_dir.split("://", 1)[1] if scheme else run_dir
    authority = ""
    if scheme in HDFS_SCHEMES and not rest.startswith("/"):
        authority, _, path = rest.partition("/")
        path = "/" + path
    else:
        path = rest
    if not path.startswith("/"):
        raise ReportAddressError(f"{run_dir!r} is a relative path: run directories are absolute")
    if ".." in path.split("/"):
        raise ReportAddressError(f"{run_dir!r} contains '..': give the run directory itself")
    path = posixpath.normpath(re.sub("/+", "/", path))
    if path == "/":
        raise ReportAddressError("the root of a file system is no run directory")
    return f"{scheme}://{authority}{path}" if scheme else path


def check_report_file_name(name: str) -> str:
    """``name`` if it is ``report.html`` or a plain ``<name>.png``, else raise."""
    if not REPORT_FILE_NAME.match(name):
        raise ReportAddressError(
            f"{name!r} is not served: only {REPORT_PAGE} and the PNG plots beside it (letters, digits, '_', '-')"
        )
    return name


def report_path(token: str, name: str = REPORT_PAGE) -> str:
    """The path of one report file, relative to the api-server's base URL (no leading slash)."""
    return f"{URL_PREFIX.strip('/')}/reports/{token}/{name}"


def report_link(run_dir: str, webhdfs_conn_id: str | None = None, *, dag_id: str | None = None) -> str:
    """The training report of ``run_dir`` as served by the api-server, relative to its base URL.

    No leading slash: the Airflow UI's pages carry ``<base href>`` set to the api-server's base URL, so
    the link also works where Airflow is served under a path prefix. ``dag_id``, the Dag that owns the run,
    lets the app authorize the user before it reads anything of the run directory.
    """
    return report_path(encode_report_token(run_dir, webhdfs_conn_id, dag_id=dag_id))
