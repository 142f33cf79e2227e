"""HDFS settings from an Airflow ``webhdfs`` connection, for the Airflow side and for the Spark side.

Reuses the connection type of apache-airflow-providers-apache-hdfs and its WebHDFSHook conventions:

- ``host``: the namenode, or a comma-separated list of namenodes for HA (``nn1,nn2``; an entry may
  carry its own ``:port``);
- ``port``: the WebHDFS port (default 9870, or 9871 with ``use_ssl``);
- ``login``: the HDFS user (simple auth); ``proxy_user`` overrides it;
- ``schema``: a path prefix in front of ``/webhdfs/v1`` (a gateway such as Knox), as in WebHDFSHook;
- extras ``use_ssl`` (HTTPS) and ``verify`` (certificate check: true/false or a CA bundle path;
  default true here, where WebHDFSHook defaults to false);
- Kerberos when Airflow's ``[core] security`` is ``kerberos`` (as WebHDFSHook decides), or extra
  ``auth: kerberos``; ``proxy_user`` is then impersonated with ``doas``;
- our own optional extras: ``timeout``, ``retries``, ``backoff``, ``deadline``, ``nameservice``.

The password is never put into the settings: they travel to the Spark driver and executors in the
environment (``AIRFLOW_TFOS_WEBHDFS``), which is no place for secrets. A connection with a password
gets a warning; use Kerberos on clusters that need authentication.
"""

from __future__ import annotations

import logging

from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.shared.storage.webhdfs_config import DEFAULT_PORTS, WebHDFSConfig, WebHDFSConfigError

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
    from airflow.sdk import BaseHook

    conn = BaseHook.get_connection(webhdfs_conn_id)
    extra = conn.extra_dejson or {}
    if not conn.host:
        raise WebHDFSConfigError(
            f"connection {webhdfs_conn_id!r} has no host: set it to the namenode (or 'nn1,nn2' for HA)"
        )
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
        **tuning,
    )


def storage_from_connection(webhdfs_conn_id: str = DEFAULT_CONN_ID, proxy_user: str | None = None) -> WebHDFSStorage:
    """A :class:`~airflow_tfos.shared.storage.webhdfs_client.WebHDFSStorage` for the connection (for run-directory
    hooks and sensors)."""
    return WebHDFSStorage(webhdfs_config_from_connection(webhdfs_conn_id, proxy_user))
