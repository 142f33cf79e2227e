"""Training reports served by the api-server: the "Training report" extra link's target, and a tab of the UI.

:class:`TFoSReportsPlugin` mounts a small FastAPI app on the api-server under ``/tfos``::

    GET tfos/reports/<token>/report.html    the report page (text/html; charset=utf-8)
    GET tfos/reports/<token>/<plot>.png     a plot beside it (image/png)
    GET tfos/tab/task?dag_id=&run_id=&task_id=&map_index=
                                            the report of one task instance (the "Training report" tab)
    GET tfos/tab/run?dag_id=&run_id=        the reports of one Dag run (its "Training report" tab)

``<token>`` names the run directory (see :mod:`airflow_tfos.plugins.report_urls`); the link builds it
with :func:`~airflow_tfos.plugins.report_urls.report_link`. The two tab routes find the run directory
of a task instance in its XCom ``run_dir`` and redirect to its report; the plugin's ``external_views``
(Airflow 3.1 and later) show them as a tab of the task instance and of the Dag run. Run directories on
local disk are read directly, HDFS ones through :class:`~airflow_tfos.hooks.run_dir.RunDirHook` and the
token's ``webhdfs`` connection (``webhdfs_default`` unless it names another), which must then be
defined on the api-server (else the api-server's ``AIRFLOW_TFOS_WEBHDFS`` or ``HADOOP_CONF_DIR`` must
name the namenodes).

What it serves, and to whom:

- Signed-in users only: the api-server's own authentication (a bearer token, or the UI's session
  cookie), checked as Airflow's routes check it.
- Per Dag, as Airflow's own routes authorize: a report is served to a user whom the auth manager lets
  read the task instances of the Dag that owns the run directory (``is_authorized_dag``, method GET,
  ``DagAccessEntity.TASK_INSTANCE``). The owner is what the run directory's ``owner.json`` records (the
  task instance that submitted the run writes it with ``spec.json``), never what the address says. A run
  directory without ``owner.json`` (written by an earlier version) is served only to users who may read
  every Dag.
- Authorized before anything is looked up: an address that names the owning Dag (the tabs' addresses)
  is refused, without a connection lookup or a storage call, to a user who may not read that Dag; one that
  names no Dag (links of earlier versions), to a user who may read no Dag. Only then is the address's
  ``webhdfs`` connection resolved and ``owner.json`` read; the Dag it names must be the one the address
  names, if any.
- One answer for everything not authorized: a run directory that does not exist, holds no ``spec.json``,
  belongs to a Dag the user may not read, or that cannot be reached (its connection is not defined here,
  is no ``webhdfs`` connection, its namenodes fail) is the same 404, which says nothing about which of
  these it is; the api-server's log says which. A storage failure while an authorized user's report is
  read is a 502 that names no path, host or address either.
- Storage calls wait seconds, not minutes (:data:`STORAGE_TIMEOUT_SECS`, :data:`STORAGE_DEADLINE_SECS`,
  whatever the connection says): the routes are plain functions, which FastAPI runs on its worker threads,
  off the event loop, and a namenode that does not answer must not hold those threads.
- Only ``report.html`` and ``<name>.png`` (letters, digits, ``_``, ``-``) from the ``report/`` folder;
  any other name is a 404, and a token that is not an absolute run directory (relative, with ``..``, an
  unknown scheme) a 400. A local file that resolves (through links) outside the run directory's
  ``report/`` folder is refused as well.
- The page is sent with a Content-Security-Policy that allows no scripts, only images from the
  api-server itself and inline styles, so HTML put into a run directory by hand cannot act in the
  user's session; ``X-Content-Type-Options: nosniff`` keeps browsers to the declared types.
- ``[tfos] serve_reports = False`` turns the app off (every request is then a 404 that says so).
"""

from __future__ import annotations

import html
import json
import logging
import os
import re
from dataclasses import replace
from typing import Annotated, Any

from airflow.sdk.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Query, Request, Response, status
from fastapi.responses import RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from airflow_tfos.hooks.errors import ReportAddressError
from airflow_tfos.plugins.report_urls import (
    DEFAULT_WEBHDFS_CONN_ID,
    REPORT_PAGE,
    REPORT_ROUTE,
    URL_PREFIX,
    check_report_file_name,
    decode_report_address,
    decode_report_token,
    encode_report_token,
    normalize_run_dir,
)
from airflow_tfos.shared.rundir import OWNER, REPORT_DIR, SPEC
from airflow_tfos.shared.storage import Storage, join
from airflow_tfos.shared.storage.webhdfs_config import HDFS_SCHEMES

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

#: The app's routes behind the tabs of the task instance and of the Dag run.
TASK_TAB = "/tab/task"
RUN_TAB = "/tab/run"
#: The tab of the task instance and of the Dag run in the Airflow UI (3.1 and later): their ``url_route``.
TASK_TAB_ROUTE = "tfos-report"
RUN_TAB_ROUTE = "tfos-run-reports"
#: XCom key of the run directory a task resolved (``airflow_tfos.links.tfos.RUN_DIR_KEY``).
RUN_DIR_XCOM_KEY = "run_dir"
#: XCom key under which Airflow keeps the "Training report" link (``TrainingReportLink().xcom_key``).
REPORT_LINK_XCOM_KEY = "_link_TrainingReportLink"
#: The answer to a report that does not exist or that the user may not read: the same for both.
NOT_FOUND = (
    "no training report here that you may read: the run directory does not exist, holds no training run, or "
    "belongs to a Dag whose task instances you may not read (ask for read access to that Dag)"
)
#: The answer to a report that an authorized user may read but whose storage failed (the log says how).
STORAGE_FAILED = "the training report cannot be read from its storage now; the api-server's log says why"
#: Seconds the api-server waits for one WebHDFS answer, and for one operation with its retries, and how many
#: more rounds a failing request gets, whatever the connection says (the connection's are for tasks).
STORAGE_TIMEOUT_SECS = 3.0
STORAGE_DEADLINE_SECS = 6.0
STORAGE_RETRIES = 1
_LINK_TOKEN = re.compile(r"reports/([A-Za-z0-9_-]+)/")

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


def _not_found() -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, NOT_FOUND)


def run_dir_storage(run_dir: str, webhdfs_conn_id: str | None) -> Storage:
    """The storage of ``run_dir``: local, or HDFS through a ``webhdfs`` connection defined here (else the
    api-server's ``AIRFLOW_TFOS_WEBHDFS`` or Hadoop files), with the api-server's short timeouts.

    404 (:data:`NOT_FOUND`) when there is none (the connection is not defined, or of another type): the log
    says which, the answer does not (call it once the user is authorized for the run's Dag).
    """
    from airflow.sdk.exceptions import AirflowNotFoundException

    from airflow_tfos.hooks.run_dir import RunDirHook
    from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage

    conn_id = webhdfs_conn_id or DEFAULT_WEBHDFS_CONN_ID
    hook = RunDirHook(run_dir, webhdfs_conn_id=conn_id)
    if run_dir.split("://", 1)[0] in HDFS_SCHEMES:
        try:
            conn_type = hook.get_connection(conn_id).conn_type
        except AirflowNotFoundException:
            from airflow_tfos.hooks.webhdfs_connection import config_without_connection

            if config_without_connection() is None:
                log.warning(
                    "report of %s refused: connection %r is not defined on the api-server, and neither "
                    "AIRFLOW_TFOS_WEBHDFS nor HADOOP_CONF_DIR names a namenode here",
                    run_dir,
                    conn_id,
                )
                raise _not_found() from None
        else:
            if conn_type != "webhdfs":
                log.warning(
                    "report of %s refused: connection %r is of type %r, not 'webhdfs'", run_dir, conn_id, conn_type
                )
                raise _not_found()
    storage = hook.storage
    if isinstance(storage, WebHDFSStorage):
        config = storage.config
        config = replace(
            config,
            timeout=min(config.timeout, STORAGE_TIMEOUT_SECS),
            deadline=min(config.deadline, STORAGE_DEADLINE_SECS),
            retries=min(config.retries, STORAGE_RETRIES),
        )
        storage = WebHDFSStorage(config, login=storage.login)
    return storage


def _check_local_file(storage: Storage, run_dir: str, path: str) -> None:
    """Refuse a local report file that resolves outside ``<run_dir>/report`` (a link planted there)."""
    local = storage.local_path(path)
    if local is None:
        return
    folder = os.path.join(os.path.realpath(storage.local_path(run_dir) or run_dir), REPORT_DIR)
    if os.path.dirname(os.path.realpath(local)) != folder:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{path} is not a file of the training report in {run_dir}")


def may_read_dag(user: Any, dag_id: str | None) -> bool:
    """Whether the auth manager lets ``user`` read the task instances of ``dag_id`` (None: of every Dag)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    details = None
    if dag_id is not None:
        from airflow.models.dag import DagModel

        details = DagDetails(id=dag_id, team_name=DagModel.get_team_name(dag_id))
    return get_auth_manager().is_authorized_dag(
        method="GET", access_entity=DagAccessEntity.TASK_INSTANCE, details=details, user=user
    )


def may_read_some_dag(user: Any) -> bool:
    """Whether the auth manager lets ``user`` read any Dag at all (every Dag, or some)."""
    if may_read_dag(user, None):
        return True
    from airflow.api_fastapi.app import get_auth_manager

    return bool(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))


def require_dag_reader(user: Any, dag_id: str) -> None:
    """404 (:data:`NOT_FOUND`) unless ``user`` may read the task instances of ``dag_id``."""
    if not may_read_dag(user, dag_id):
        raise _not_found()


def run_dir_owner(storage: Storage, run_dir: str) -> dict[str, Any] | None:
    """The run directory's owner.json; None when it has none. 404 (:data:`NOT_FOUND`) when it holds no spec.json."""
    if not storage.exists(join(run_dir, SPEC)):
        raise _not_found()
    try:
        owner = json.loads(storage.read_bytes(join(run_dir, OWNER)))
    except FileNotFoundError:
        return None
    except ValueError:
        owner = None  # not written by airflow-tfos: no Dag is named, so it is served to readers of every Dag
        log.warning("%s is not JSON: the report of %s is served to readers of every Dag only", OWNER, run_dir)
    if not isinstance(owner, dict) or not isinstance(owner.get("dag_id"), str):
        return None
    return owner


def authorize_run_dir(storage: Storage, run_dir: str, user: Any, dag_id: str | None = None) -> None:
    """404 (:data:`NOT_FOUND`) unless ``run_dir`` is a run directory whose owning Dag ``user`` may read (and,
    when the address names a Dag, ``dag_id``, is that Dag); a storage failure is that same 404, logged."""
    try:
        owner = run_dir_owner(storage, run_dir)
    except HTTPException:
        raise
    except Exception as exc:  # the storage failed: told in the log only, before the user is authorized
        log.warning("report of %s refused: its owner.json cannot be read (%s: %s)", run_dir, type(exc).__name__, exc)
        raise _not_found() from None
    owner_dag = owner["dag_id"] if owner else None
    if dag_id is not None and owner_dag is not None and owner_dag != dag_id:
        log.info("report of %s refused: its address names Dag %s, its owner.json Dag %s", run_dir, dag_id, owner_dag)
        raise _not_found()
    if not may_read_dag(user, owner_dag):
        log.info("report of %s refused: the user may not read Dag %s", run_dir, owner_dag)
        raise _not_found()


def read_report_file(token: str, name: str, user: Any = None) -> tuple[bytes, str]:
    """Check the address, authorize the user for the Dag it names (before any lookup), then for the Dag of the
    run directory's owner.json, then read one report file; return its content and content type."""
    try:
        address = decode_report_address(token)
        run_dir = normalize_run_dir(address.run_dir)
    except ReportAddressError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
    try:
        check_report_file_name(name)
    except ReportAddressError as exc:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
    if not (may_read_dag(user, address.dag_id) if address.dag_id is not None else may_read_some_dag(user)):
        raise _not_found()  # no connection is resolved, no storage is asked
    try:
        storage = run_dir_storage(run_dir, address.conn_id)
    except HTTPException:
        raise
    except Exception as exc:  # a connection that cannot be used (its extras): the log says why
        log.warning("report of %s refused: its storage cannot be set up (%s: %s)", run_dir, type(exc).__name__, exc)
        raise _not_found() from None
    authorize_run_dir(storage, run_dir, user, address.dag_id)
    path = join(run_dir, REPORT_DIR, name)
    try:
        _check_local_file(storage, run_dir, path)
        data = storage.read_bytes(path)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        if name == REPORT_PAGE:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no training report yet in {run_dir}") from None
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no {name} in the training report of {run_dir}") from None
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s: %s: %s", path, type(exc).__name__, exc)
        raise HTTPException(status.HTTP_502_BAD_GATEWAY, STORAGE_FAILED) from None
    return data, HTML_TYPE if name == REPORT_PAGE else PNG_TYPE


def serve_report_file(token: str, name: str, user: Annotated[Any, Depends(authenticated_user)]) -> Response:
    """One file of a training report: ``report.html`` or one of its PNG plots."""
    data, content_type = read_report_file(token, name, user)
    return Response(content=data, media_type=content_type, headers=RESPONSE_HEADERS)


def task_report_tokens(
    dag_id: str, run_id: str, task_id: str | None = None, map_index: int | None = None
) -> list[tuple[str, int, str]]:
    """``(task_id, map_index, token)`` of each task instance of a Dag run that recorded a run directory (XCom
    ``run_dir``); the token carries the ``webhdfs`` connection that the task's report link names."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(
            XComModel.get_many(
                run_id=run_id,
                dag_ids=dag_id,
                key=None,
                task_ids=task_id,
                map_indexes=map_index,
            ).where(XComModel.key.in_((RUN_DIR_XCOM_KEY, REPORT_LINK_XCOM_KEY)))
        ).all()
        found: dict[tuple[str, int], dict[str, Any]] = {}
        for row in rows:
            found.setdefault((row.task_id, row.map_index), {})[row.key] = XComModel.deserialize_value(row)
    tokens = []
    for (task, index), values in sorted(found.items()):
        run_dir = values.get(RUN_DIR_XCOM_KEY)
        if not isinstance(run_dir, str) or not run_dir:
            continue
        token = encode_report_token(run_dir, dag_id=dag_id)
        link = values.get(REPORT_LINK_XCOM_KEY)
        linked = _LINK_TOKEN.search(link) if isinstance(link, str) else None
        if linked:
            try:
                if normalize_run_dir(decode_report_token(linked.group(1))[0]) == normalize_run_dir(run_dir):
                    token = linked.group(1)  # the same run directory, with the link's webhdfs connection
            except ReportAddressError:
                pass
        tokens.append((task, index, token))
    return tokens


def _tab_page(title: str, body: str) -> Response:
    page = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:1.5em;color:#222}li{margin:.3em 0}</style></head>"
        f"<body><h2>{html.escape(title)}</h2>{body}</body></html>"
    )
    return Response(content=page, media_type=HTML_TYPE, headers=RESPONSE_HEADERS)


def _report_redirect(token: str) -> RedirectResponse:
    # relative to tfos/tab/...: the report's own relative <img src> then resolve to the report route
    return RedirectResponse(f"../reports/{token}/{REPORT_PAGE}", status_code=status.HTTP_307_TEMPORARY_REDIRECT)


def _map_index(value: str | None) -> int:
    """The UI's ``{MAP_INDEX}``: a number for a mapped task instance, else left as written (unmapped: -1)."""
    try:
        return int(value) if value not in (None, "") else -1
    except ValueError:
        return -1


def serve_task_tab(
    user: Annotated[Any, Depends(authenticated_user)],
    dag_id: Annotated[str, Query(min_length=1, max_length=250)],
    run_id: Annotated[str, Query(min_length=1, max_length=250)],
    task_id: Annotated[str, Query(min_length=1, max_length=250)],
    map_index: Annotated[str | None, Query(max_length=20)] = None,
) -> Response:
    """The training report of one task instance (its tab in the UI): a redirect to the report route."""
    require_dag_reader(user, dag_id)
    found = task_report_tokens(dag_id, run_id, task_id, _map_index(map_index))
    if not found:
        return _tab_page(
            "No training report",
            f"<p>Task {html.escape(task_id)} of run {html.escape(run_id)} has recorded no run directory: it is not "
            "an airflow-tfos task, or it has not started yet.</p>",
        )
    return _report_redirect(found[0][2])


def serve_run_tab(
    user: Annotated[Any, Depends(authenticated_user)],
    dag_id: Annotated[str, Query(min_length=1, max_length=250)],
    run_id: Annotated[str, Query(min_length=1, max_length=250)],
) -> Response:
    """The training reports of one Dag run (its tab in the UI): the report itself when there is one, else a list."""
    require_dag_reader(user, dag_id)
    found = task_report_tokens(dag_id, run_id)
    if len(found) == 1:
        return _report_redirect(found[0][2])
    if not found:
        return _tab_page(
            "No training report", f"<p>No task of run {html.escape(run_id)} has recorded a run directory.</p>"
        )
    items = "".join(
        f"<li><a href='../reports/{token}/{REPORT_PAGE}'>{html.escape(task)}"
        f"{f' [{index}]' if index >= 0 else ''}</a></li>"
        for task, index, token in found
    )
    return _tab_page(f"Training reports of {run_id}", f"<ul>{items}</ul>")


def create_app() -> FastAPI:
    """The app the plugin mounts under :data:`~airflow_tfos.plugins.report_urls.URL_PREFIX`."""
    app = FastAPI(
        title="airflow-tfos training reports",
        description="Training reports of airflow-tfos run directories (report.html and its PNG plots).",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    for route, endpoint in ((REPORT_ROUTE, serve_report_file), (TASK_TAB, serve_task_tab), (RUN_TAB, serve_run_tab)):
        app.add_api_route(
            route, endpoint, methods=["GET"], dependencies=[Depends(require_serving_enabled)], response_class=Response
        )
    return app


#: The tabs, as the UI shows them: it fills in ``{DAG_ID}``, ``{RUN_ID}``, ``{TASK_ID}`` (URL-encoded) and
#: ``{MAP_INDEX}`` (left as written for an unmapped task instance), and resolves the href against its base URL.
EXTERNAL_VIEWS = [
    {
        "name": "Training report",
        "href": f"{URL_PREFIX.strip('/')}{TASK_TAB}?dag_id={{DAG_ID}}&run_id={{RUN_ID}}&task_id={{TASK_ID}}"
        "&map_index={MAP_INDEX}",
        "destination": "task_instance",
        "url_route": TASK_TAB_ROUTE,
    },
    {
        "name": "Training reports",
        "href": f"{URL_PREFIX.strip('/')}{RUN_TAB}?dag_id={{DAG_ID}}&run_id={{RUN_ID}}",
        "destination": "dag_run",
        "url_route": RUN_TAB_ROUTE,
    },
]


class TFoSReportsPlugin(AirflowPlugin):
    """Serve training reports from the api-server: the "Training report" extra link's target, and a tab of the
    task instance and of the Dag run in the UI (Airflow 3.1 and later)."""

    name = "airflow_tfos_reports"
    fastapi_apps = [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "airflow-tfos training reports"}]
    external_views = EXTERNAL_VIEWS
