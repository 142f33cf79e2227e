"""Extra links on TFoS tasks: the application's UI, TensorBoard, the training report.

A link's target may come from a place that others can write (tensorboard.json in the run directory, an
application's tracking URL): only an ``http://`` or ``https://`` URL with a host is ever pushed or shown
(:func:`link_url`); anything else (``javascript:``, ``file:``, ``data:``...) is dropped with a warning.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperatorLink
from airflow.sdk.execution_time.xcom import XCom

from airflow_tfos.plugins.report_urls import report_link

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

#: XCom keys the operators push the links' targets under.
TRACKING_URL_KEY = "tracking_url"
TENSORBOARD_URL_KEY = "tensorboard_url"
REPORT_URL_KEY = "report_url"
#: XCom key of the resolved run directory (pushed by the train and launch operators).
RUN_DIR_KEY = "run_dir"
#: The Spark setting (or ``spark`` connection extra) that names the Spark history server (``host:port``).
HISTORY_SERVER_CONF = "spark.yarn.historyServer.address"
#: The only schemes a link may lead to.
LINK_SCHEMES = ("http", "https")

log = logging.getLogger(__name__)


def link_url(url: object, what: str = "a link", logger: Any = None) -> str | None:
    """``url`` when a link may lead there: an ``http://`` or ``https://`` URL with a host and no user or
    password in it; else None, with a warning that names ``what`` and the scheme (not the URL) unless ``url``
    is empty.

    :param url: the link's target as found (tensorboard.json, a tracking URL, an XCom).
    :param what: what the link is, for the warning.
    :param logger: where to warn (a logger; default: this module's).
    """
    if not url:
        return None
    text = str(url).strip()
    try:
        parts = urllib.parse.urlsplit(text)
        host, userinfo = parts.hostname, parts.username is not None or parts.password is not None
    except ValueError:
        parts, host, userinfo = None, None, False
    scheme = parts.scheme.lower() if parts is not None else ""
    if scheme in LINK_SCHEMES and host and not userinfo and not any(c.isspace() for c in text):
        return text
    why = "it names a user or password" if userinfo else f"scheme {scheme or 'none'!r}, not http(s) with a host"
    (logger or log).warning("not linking %s: its URL is refused (%s)", what, why)
    return None


def history_server_url(address: str, app_id: str) -> str:
    """The history server's page of application ``app_id``; ``address`` is ``host:port`` (``http://`` is
    added, as YARN does) or a URL."""
    base = address.strip().rstrip("/")
    if "://" not in base:
        base = f"http://{base}"
    return f"{base}/history/{app_id}"


class _XComLink(BaseOperatorLink):
    """A link whose target the operator pushed under ``key``.

    Airflow 3 asks for a task's links once, in the worker when the task ends, and keeps each under the
    link's own XCom key (``xcom_key``), which is what the UI reads. The operators of this package keep the
    targets they pushed in this try in ``link_targets``: the link reads them there, so a target that was
    never pushed (no TensorBoard, an application not yet submitted) is an empty link, not a failed XCom
    lookup with an error in the task's log. Other operators are looked up in XCom.
    """

    key = ""

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        targets = getattr(operator, "link_targets", None)
        known = isinstance(targets, dict)
        value = targets.get(self.key) if known else XCom.get_value(ti_key=ti_key, key=self.key)
        return link_url(value, f"the {self.name} link") or ""


class SparkApplicationLink(_XComLink):
    """The application's UI (YARN's tracking URL, or the local Spark UI) while it runs; once it ended, the
    Spark history server's page when ``spark.yarn.historyServer.address`` is named, else YARN's tracking URL
    of the ended application (empty for a local application, whose UI ended with it)."""

    name = "Spark application"
    key = TRACKING_URL_KEY


class TensorBoardLink(_XComLink):
    """TensorBoard beside the chief, while the application runs (empty once it ended: TensorBoard ends with it)."""

    name = "TensorBoard"
    key = TENSORBOARD_URL_KEY


class TrainingReportLink(BaseOperatorLink):
    """The run's training report, served by the api-server (see :mod:`airflow_tfos.plugins.reports`).

    The run directory is the one the task resolved (XCom ``run_dir``), else the operator's ``run_dir``;
    HDFS run directories are read through the operator's ``webhdfs_conn_id``. The link names the task's Dag,
    so that the api-server authorizes the reader before it reads anything of the run. It is relative to the
    api-server's base URL, as the UI resolves it.
    """

    name = "Training report"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        run_dir = XCom.get_value(ti_key=ti_key, key=RUN_DIR_KEY) or getattr(operator, "run_dir", None)
        if not run_dir or not isinstance(run_dir, str):
            return ""
        return report_link(run_dir, getattr(operator, "webhdfs_conn_id", None), dag_id=ti_key.dag_id)


def push_tensorboard_url(op: Any) -> None:
    """Push where TensorBoard serves ``op``'s run (tensorboard.json, written by the node that serves it) under the
    TensorBoard link's key while the application runs; an empty link once it stopped, or when the address is not an
    http(s) URL (dropped with a warning, once). ``op``: a training operator of
    :mod:`airflow_tfos.operators.application`, with its task instance known."""
    if not getattr(op, "tensorboard", False) or op._ti is None:
        return
    try:
        record = op.run_dir_contents.read_tensorboard()
    except Exception as exc:
        op.log.warning("cannot read where TensorBoard serves the run: %s", exc)
        return
    found = str(record.get("url") or "") if isinstance(record, dict) else ""
    if found and found == op._tensorboard_found:
        return  # unchanged since the last look (a refused one is warned about once)
    op._tensorboard_found = found
    url = link_url(found, "TensorBoard", op.log) or ""
    if url == op.link_targets.get(TENSORBOARD_URL_KEY, ""):
        return
    if url:
        op.log.info("TensorBoard serves the run at %s", url)
        op.link_targets[TENSORBOARD_URL_KEY] = url
    else:
        op.link_targets.pop(TENSORBOARD_URL_KEY, None)
    op._ti.xcom_push(key=TENSORBOARD_URL_KEY, value=url)
    op._ti.xcom_push(key=TensorBoardLink().xcom_key, value=url)  # what the UI shows while the task runs
