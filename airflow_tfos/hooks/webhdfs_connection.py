"""HDFS settings from an Airflow ``webhdfs`` connection, for the Airflow side and for the Spark side.

Reuses the connection type of apache-airflow-providers-apache-hdfs and its WebHDFSHook conventions:

- ``host``: the namenode, or a comma-separated list of namenodes for HA (``nn1,nn2``; an entry may
  carry its own ``:port``);
- ``port``: the WebHDFS port (default 9870, or 9871 with ``use_ssl``);
- ``login``: the HDFS user (simple auth); ``proxy_user`` (a hook's argument, else extra ``doas``, else extra
  ``proxy_user``) overrides it (prefer ``doas``: Airflow masks the values of extras whose name holds "proxy" in
  every log, so errors would read "impersonate ***");
- ``schema``: a path prefix in front of ``/webhdfs/v1`` (a gateway such as Knox), as in WebHDFSHook;
- extras ``use_ssl`` (HTTPS) and ``verify`` (certificate check: true/false or a CA bundle path;
  default true here, where WebHDFSHook defaults to false);
- Kerberos when Airflow's ``[core] security`` is ``kerberos`` (as WebHDFSHook decides), or extra
  ``auth: kerberos``; ``proxy_user`` is then impersonated with ``doas``; our extras ``principal`` and
  ``keytab`` log in from a keytab (else the worker's ticket cache, as ``airflow kerberos`` keeps it);
- our own optional extras: ``timeout``, ``retries``, ``backoff``, ``deadline``, ``nameservice``.

Where the connection does not exist, or has no host, the namenodes come from ``AIRFLOW_TFOS_WEBHDFS``, else
from Hadoop's configuration files (``HADOOP_CONF_DIR``: :mod:`airflow_tfos.hooks.hadoop_conf`): the
connection's fields override the variable, which overrides the files.

The password is never put into the settings: they travel to the Spark driver and executors in the
environment (``AIRFLOW_TFOS_WEBHDFS``), which is no place for secrets. A connection with a password
gets a warning; use Kerberos on clusters that need authentication.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from airflow.sdk import BaseHook

from airflow_tfos.hooks.hadoop_conf import HADOOP_CONF_ENV, hadoop_conf
from airflow_tfos.shared.errors import KerberosAuthError, WebHDFSConfigError
from airflow_tfos.shared.storage.kerberos import KerberosLogin, SpnegoAuth
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.shared.storage.webhdfs_config import DEFAULT_PORTS, WEBHDFS_ENV, WebHDFSConfig

log = logging.getLogger(__name__)

DEFAULT_CONN_ID = "webhdfs_default"
_TUNING_EXTRAS = {"timeout": float, "retries": int, "backoff": float, "deadline": float}


def _flag(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes", "on")
    return bool(value)


def _kerberos_security() -> bool:
    from airflow.configuration import conf

    return conf.get("core", "security", fallback="") == "kerberos"


def webhdfs_config_from_connection(
    webhdfs_conn_id: str = DEFAULT_CONN_ID, proxy_user: str | None = None
) -> WebHDFSConfig:
    """Build :class:`~airflow_tfos.shared.storage.webhdfs_config.WebHDFSConfig` from the Airflow connection
    ``webhdfs_conn_id``.

    :param webhdfs_conn_id: a connection of type ``webhdfs``.
    :param proxy_user: the HDFS user to act as (instead of the connection's login).
    """
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(webhdfs_conn_id)
    except AirflowNotFoundException:
        found = config_without_connection(proxy_user)
        if found is None:
            raise WebHDFSConfigError(
                f"no connection {webhdfs_conn_id!r}, no {WEBHDFS_ENV} and no {HADOOP_CONF_ENV} whose core-site.xml "
                "names an hdfs:// fs.defaultFS: create the webhdfs connection, or set HADOOP_CONF_DIR to the "
                "cluster's configuration folder"
            ) from None
        log.info("no connection %s: HDFS settings from %s", webhdfs_conn_id, _origin())
        return found
    extra = conn.extra_dejson or {}
    proxy_user = proxy_user or extra.get("doas") or extra.get("proxy_user") or None
    if not conn.host:
        found = config_without_connection(proxy_user or conn.login or None)
        if found is None:
            raise WebHDFSConfigError(
                f"connection {webhdfs_conn_id!r} has no host: set it to the namenode (or 'nn1,nn2' for HA), or "
                f"set {HADOOP_CONF_ENV} to the cluster's configuration folder"
            )
        log.info("connection %s has no host: namenodes from %s", webhdfs_conn_id, _origin())
        return found
    scheme = "https" if _flag(extra.get("use_ssl", False)) else "http"
    port = conn.port or DEFAULT_PORTS[scheme]
    prefix = f"/{conn.schema.strip('/')}" if conn.schema and conn.schema.strip("/") else ""
    namenodes = []
    for entry in conn.host.split(","):
        host = entry.strip().split("://", 1)[-1].rstrip("/")
        if host:
            namenodes.append(f"{scheme}://{host if ':' in host else f'{host}:{port}'}{prefix}")
    kerberos = extra.get("auth") == "kerberos" or _kerberos_security()
    if conn.password:
        log.warning(
            "connection %s has a password: it is not passed to the Spark side (settings travel in the "
            "environment); HDFS is reached as user %s%s",
            webhdfs_conn_id,
            proxy_user or conn.login or "(default)",
            " with Kerberos" if kerberos else "",
        )
    verify = extra.get("verify", True)
    if isinstance(verify, str) and verify.strip().lower() in ("true", "false"):
        verify = verify.strip().lower() == "true"
    tuning = {}
    for key, kind in _TUNING_EXTRAS.items():
        if key in extra:
            try:
                tuning[key] = kind(extra[key])
            except (TypeError, ValueError) as exc:
                raise WebHDFSConfigError(
                    f"connection {webhdfs_conn_id!r}: extra {key!r} must be a number, got {extra[key]!r}"
                ) from exc
    return WebHDFSConfig(
        namenodes=tuple(namenodes),
        user=proxy_user if kerberos else (proxy_user or conn.login or None),
        auth="kerberos" if kerberos else "simple",
        verify=verify,
        nameservice=extra.get("nameservice") or None,
        origin=f"the host and port of connection {webhdfs_conn_id!r}",
        **tuning,
    )


def default_conn_id() -> str | None:
    """``webhdfs_default`` when that connection exists, else None: what ``webhdfs_conn_id=None`` means."""
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        BaseHook.get_connection(DEFAULT_CONN_ID)
    except AirflowNotFoundException:
        return None
    return DEFAULT_CONN_ID


def _origin() -> str:
    return WEBHDFS_ENV if WebHDFSConfig.from_env() is not None else f"the files of {HADOOP_CONF_ENV}"


def config_without_connection(user: str | None = None) -> WebHDFSConfig | None:
    """The HDFS settings when no connection gives them: ``AIRFLOW_TFOS_WEBHDFS``, else Hadoop's files
    (``HADOOP_CONF_DIR``); None when neither names a namenode.

    :param user: the HDFS user (for the files, which name none; the variable's own user is kept unless given).
    """
    env = WebHDFSConfig.from_env()
    if env is not None and env.namenodes:
        return replace(env, user=user) if user else env
    conf = hadoop_conf()
    if conf is None:
        return None
    return conf.webhdfs_config(user=user)


_LOGINS: dict[tuple[str | None, str | None], KerberosLogin] = {}


def kerberos_login_from_connection(webhdfs_conn_id: str = DEFAULT_CONN_ID) -> KerberosLogin:
    """The Kerberos identity of the connection: extras ``principal`` and ``keytab``, else the ticket cache.

    One login per principal and keytab in a process, so tickets obtained from a keytab are reused (and
    obtained again by MIT Kerberos when they expire).
    """
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        extra = BaseHook.get_connection(webhdfs_conn_id).extra_dejson or {}
    except AirflowNotFoundException:
        extra = {}
    key = (str(extra.get("principal") or "") or None, str(extra.get("keytab") or "") or None)
    if key not in _LOGINS:
        _LOGINS[key] = KerberosLogin(*key)
    return _LOGINS[key]


def storage_from_connection(webhdfs_conn_id: str = DEFAULT_CONN_ID, proxy_user: str | None = None) -> WebHDFSStorage:
    """A :class:`~airflow_tfos.shared.storage.webhdfs_client.WebHDFSStorage` for the connection (for run-directory
    hooks and sensors)."""
    config = webhdfs_config_from_connection(webhdfs_conn_id, proxy_user)
    login = kerberos_login_from_connection(webhdfs_conn_id) if config.auth == "kerberos" else None
    return WebHDFSStorage(config, login=login)


def check_webhdfs(config: WebHDFSConfig, login: KerberosLogin | None = None) -> tuple[bool, str]:
    """List ``/`` on every namenode of ``config``, one request each (no retry), and say what came of it.

    :return: ``(True, message naming the active namenode)``, or ``(False, the reason)``: refused, HTTP 401,
        permission, TLS error, or only standby namenodes.
    """
    import requests

    from airflow_tfos.hooks.yarn_transport import describe

    auth = None
    params = {"op": "LISTSTATUS"}
    user = config.effective_user()
    if config.auth == "kerberos":
        auth = SpnegoAuth(login, use_token=False)
        if user:
            params["doas"] = user
    elif user:
        params["user.name"] = user
    standby, failed = [], []
    for namenode in config.namenodes:
        try:
            response = requests.get(
                f"{namenode}/webhdfs/v1/", params=params, auth=auth, verify=config.verify, timeout=config.timeout
            )
        except KerberosAuthError as exc:
            failed.append(f"{namenode}: {exc}")
            continue
        except requests.RequestException as exc:
            failed.append(f"{namenode}: {describe(exc)}")
            continue
        try:
            payload = response.json()
        except ValueError:
            payload = None
        remote = (payload or {}).get("RemoteException") if isinstance(payload, dict) else None
        if response.status_code == 200 and isinstance(payload, dict) and "FileStatuses" in payload:
            entries = payload["FileStatuses"].get("FileStatus") or []
            others = "; ".join([*(f"{n}: standby" for n in standby), *failed])
            return True, (
                f"active namenode {namenode}: / lists {len(entries)} entr{'y' if len(entries) == 1 else 'ies'} "
                f"as user {user or '(Kerberos)'}" + (f"; {others}" if others else "")
            )
        if remote and remote.get("exception") == "StandbyException":
            standby.append(namenode)
        elif response.status_code == 401:
            failed.append(f"{namenode}: HTTP 401 (authentication refused: Kerberos ticket or extra 'auth')")
        elif remote:
            failed.append(f"{namenode}: HTTP {response.status_code} {remote.get('exception')}: {remote.get('message')}")
        else:
            failed.append(f"{namenode}: HTTP {response.status_code}, not a WebHDFS answer")
    if standby and not failed:
        return False, f"standby only: no active namenode among {', '.join(standby)}"
    return False, "no namenode answered: " + "; ".join([*(f"{n}: standby" for n in standby), *failed])


class WebHDFSAccessHook(BaseHook):
    """The HDFS access this package uses (a ``webhdfs`` connection, else ``AIRFLOW_TFOS_WEBHDFS``, else
    Hadoop's files), with a connection test.

    :param webhdfs_conn_id: the ``webhdfs`` connection.
    """

    conn_name_attr = "webhdfs_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "webhdfs"
    hook_name = "WebHDFS (airflow-tfos)"

    def __init__(self, webhdfs_conn_id: str = DEFAULT_CONN_ID, **kwargs) -> None:
        super().__init__(**kwargs)
        self.webhdfs_conn_id = webhdfs_conn_id

    def test_connection(self) -> tuple[bool, str]:
        """List ``/`` through the namenodes the settings name (see :func:`check_webhdfs`)."""
        try:
            config = webhdfs_config_from_connection(self.webhdfs_conn_id)
            login = kerberos_login_from_connection(self.webhdfs_conn_id) if config.auth == "kerberos" else None
        except Exception as exc:
            return False, str(exc)
        return check_webhdfs(config, login)
