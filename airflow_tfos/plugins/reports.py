"""Training reports served by the api-server: the target of the "Training report" extra link.

:class:`TFoSReportsPlugin` mounts a small FastAPI app on the api-server under ``/tfos``::

    GET tfos/reports/<token>/report.html    the report page (text/html; charset=utf-8)
    GET tfos/reports/<token>/<plot>.png     a plot beside it (image/png)

``<token>`` names the run directory (see :mod:`airflow_tfos.plugins.report_urls`); the link builds it
with :func:`~airflow_tfos.plugins.report_urls.report_link`. Run directories on local disk are read
directly, HDFS ones through :class:`~airflow_tfos.hooks.run_dir.RunDirHook` and the token's ``webhdfs``
connection (``webhdfs_default`` unless it names another), which must then be defined on the api-server
(else the api-server's ``AIRFLOW_TFOS_WEBHDFS`` or ``HADOOP_CONF_DIR`` must name the namenodes).

What it serves, and to whom:

- Signed-in users only: the api-server's own authentication (a bearer token, or the UI's session
  cookie), checked as Airflow's routes check it. There is no per-Dag authorization: a run directory is
  not bound to a Dag in a way the api-server could verify, so any signed-in user may read any report
  whose run directory they can name.
- Only ``report.html`` and ``<name>.png`` (letters, digits, ``_``, ``-``) from the ``report/`` folder
  of a directory that holds ``spec.json``; any other name is a 404, and a token that is not an
  absolute run directory (relative, with ``..``, an unknown scheme) a 400. A local file that resolves
  (through links) outside the run directory's ``report/`` folder is refused as well.
- The page is sent with a Content-Security-Policy that allows no scripts, only images from the
  api-server itself and inline styles, so HTML put into a run directory by hand cannot act in the
  user's session; ``X-Content-Type-Options: nosniff`` keeps browsers to the declared types.
- ``[tfos] serve_reports = False`` turns the app off (every request is then a 404 that says so).
"""

from __future__ import annotations

import logging
import os
from typing import Annotated, Any

from airflow.sdk.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request, Response, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from airflow_tfos.plugins.report_urls import (
    DEFAULT_WEBHDFS_CONN_ID,
    HDFS_SCHEMES,
    REPORT_PAGE,
    REPORT_ROUTE,
    URL_PREFIX,
    ReportAddressError,
    check_report_file_name,
    decode_report_token,
    normalize_run_dir,
)
from airflow_tfos.shared.rundir import REPORT_DIR, SPEC
from airflow_tfos.shared.storage import Storage, join

log = logging.getLogger(__name__)

#: The setting that turns the app off.
CONFIG_SECTION = "tfos"
CONFIG_SERVE_REPORTS = "serve_reports"

HTML_TYPE = "text/html; charset=utf-8"
PNG_TYPE = "image/png"
#: Sent with every file: no scripts, images from here only, inline styles (the report's own).
RESPONSE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}

_bearer = HTTPBearer(auto_error=False)


def serving_enabled() -> bool:
    """``[tfos] serve_reports`` (default True)."""
    from airflow.sdk.configuration import conf

    return conf.getboolean(CONFIG_SECTION, CONFIG_SERVE_REPORTS, fallback=True)


def require_serving_enabled() -> None:
    if not serving_enabled():
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"serving training reports is turned off on this api-server ([{CONFIG_SECTION}] {CONFIG_SERVE_REPORTS})",
        )


async def authenticated_user(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Any:
    """The signed-in user, found as Airflow's own routes find it (bearer token, else the UI's cookie).

    401 without credentials, 401 or 403 with bad ones.
    """
    # Imported here: plugins are loaded by workers too, which need none of the api-server's modules.
    from airflow.api_fastapi.core_api.security import get_user

    return await get_user(request, _oauth_token=None, bearer_credentials=credentials)


def run_dir_storage(run_dir: str, webhdfs_conn_id: str | None) -> Storage:
    """The storage of ``run_dir``: local, or HDFS through a ``webhdfs`` connection defined here (else the
    api-server's ``AIRFLOW_TFOS_WEBHDFS`` or Hadoop files)."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    from airflow_tfos.hooks.run_dir import RunDirHook

    conn_id = webhdfs_conn_id or DEFAULT_WEBHDFS_CONN_ID
    hook = RunDirHook(run_dir, webhdfs_conn_id=conn_id)
    if run_dir.split("://", 1)[0] in HDFS_SCHEMES:
        try:
            conn_type = hook.get_connection(conn_id).conn_type
        except AirflowNotFoundException:
            from airflow_tfos.hooks.webhdfs_connection import config_without_connection

            if config_without_connection() is not None:  # AIRFLOW_TFOS_WEBHDFS or HADOOP_CONF_DIR name the namenodes
                return hook.storage
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                f"connection {conn_id!r} (for {run_dir}) is not defined on the api-server, and neither "
                "AIRFLOW_TFOS_WEBHDFS nor HADOOP_CONF_DIR names a namenode there",
            ) from None
        if conn_type != "webhdfs":
            raise HTTPException(
                status.HTTP_400_BAD_REQUEST, f"connection {conn_id!r} is of type {conn_type!r}, not 'webhdfs'"
            )
    return hook.storage


def _check_local_file(storage: Storage, run_dir: str, path: str) -> None:
    """Refuse a local report file that resolves outside ``<run_dir>/report`` (a link planted there)."""
    local = storage.local_path(path)
    if local is None:
        return
    folder = os.path.join(os.path.realpath(storage.local_path(run_dir) or run_dir), REPORT_DIR)
    if os.path.dirname(os.path.realpath(local)) != folder:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{path} is not a file of the training report in {run_dir}")


def read_report_file(token: str, name: str) -> tuple[bytes, str]:
    """Check the address, then read one report file; return its content and content type."""
    try:
        run_dir, conn_id = decode_report_token(token)
        run_dir = normalize_run_dir(run_dir)
    except ReportAddressError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    try:
        check_report_file_name(name)
    except ReportAddressError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    storage = run_dir_storage(run_dir, conn_id)
    path = join(run_dir, REPORT_DIR, name)
    try:
        if not storage.exists(join(run_dir, SPEC)):
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"{run_dir} is not a run directory: it holds no {SPEC}")
        _check_local_file(storage, run_dir, path)
        data = storage.read_bytes(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        if name == REPORT_PAGE:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no training report yet in {run_dir}") from None
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no {name} in the training report of {run_dir}") from None
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, f"cannot read {path}: {exc}") from None
    return data, HTML_TYPE if name == REPORT_PAGE else PNG_TYPE


def serve_report_file(token: str, name: str) -> Response:
    """One file of a training report: ``report.html`` or one of its PNG plots."""
    data, content_type = read_report_file(token, name)
    return Response(content=data, media_type=content_type, headers=RESPONSE_HEADERS)


def create_app() -> FastAPI:
    """The app the plugin mounts under :data:`~airflow_tfos.plugins.report_urls.URL_PREFIX`."""
    app = FastAPI(
        title="airflow-tfos training reports",
        description="Training reports of airflow-tfos run directories (report.html and its PNG plots).",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.add_api_route(
        REPORT_ROUTE,
        serve_report_file,
        methods=["GET"],
        dependencies=[Depends(require_serving_enabled), Depends(authenticated_user)],
        response_class=Response,
    )
    return app


class TFoSReportsPlugin(AirflowPlugin):
    """Serve training reports from the api-server (the "Training report" extra link's target)."""

    name = "airflow_tfos_reports"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "airflow-tfos training reports"}]
