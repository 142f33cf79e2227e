"""The pure parts of the YARN ResourceManager REST protocol: connection fields, JSON shapes, answers, errors.

No I/O here (except asking the local Kerberos library for a SPNEGO token): ``airflow_tfos.hooks.yarn``
drives the requests; these functions are tested without a server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from airflow_tfos.hooks.backends.state import FINAL_STATUSES, YARN_STATES, AppState
from airflow_tfos.hooks.errors import (
    YarnApplicationNotFound,
    YarnAuthError,
    YarnError,
    YarnProtocolError,
)

DEFAULT_PORTS = {"http": 8088, "https": 8090}
AUTH_MODES = ("simple", "kerberos")
#: The ResourceManager's REST paths and the settings this package reads (the emulator serves the same ones).
APPS_PATH = "/ws/v1/cluster/apps"
CLUSTER_INFO_PATH = "/ws/v1/cluster/info"
APP_PATH = "/ws/v1/cluster/apps/{app_id}"
APP_STATE_PATH = "/ws/v1/cluster/apps/{app_id}/state"
NEW_APPLICATION_PATH = "/ws/v1/cluster/apps/new-application"
CONF_PATH = "/conf"
MAX_ALLOCATION_MB_KEY = "yarn.scheduler.maximum-allocation-mb"
MAX_ALLOCATION_VCORES_KEY = "yarn.scheduler.maximum-allocation-vcores"
APP_ID_RE = re.compile(r"^application_\d+_\d+$")


@dataclass(frozen=True)
class ContainerLimit:
    """The largest container the cluster allows.

    :param memory_mb: ``yarn.scheduler.maximum-allocation-mb``.
    :param vcores: ``yarn.scheduler.maximum-allocation-vcores``.
    """

    memory_mb: int
    vcores: int


@dataclass(frozen=True)
class RmSettings:
    """A ``yarn`` connection, parsed.

    :param conn_id: the Airflow connection id (named in errors).
    :param addresses: base URLs of the RMs, in the order to try them.
    :param auth: ``simple`` or ``kerberos``.
    :param user: ``user.name`` for simple authentication.
    :param app_user: the user the run's applications run as (extra ``application_user``; default ``user``).
    :param verify: TLS verification (bool or CA bundle path).
    :param timeout: seconds per request.
    :param max_retries: rounds over every RM after the first one.
    :param retry_backoff: seconds before the second round, doubling after.
    :param max_retry_seconds: no new round starts after this many seconds.
    :param principal: with ``kerberos``, the client principal (extra ``principal``; default: the ticket cache's).
    :param keytab: with ``kerberos``, a keytab holding ``principal``'s key (extra ``keytab``; default: the
        ticket cache, ``kinit``). Tickets from a keytab are obtained again when they expire.
    :param origin: where ``addresses`` came from, when not from the connection (the yarn-site.xml file).
    """

    conn_id: str
    addresses: tuple[str, ...]
    auth: str = "simple"
    user: str | None = None
    app_user: str | None = None
    verify: bool | str = True
    timeout: float = 10.0
    max_retries: int = 3
    retry_backoff: float = 1.0
    max_retry_seconds: float = 60.0
    principal: str | None = None
    keytab: str | None = None
    origin: str | None = None

    def kerberos_login(self):
        """The :class:`~airflow_tfos.shared.storage.kerberos.KerberosLogin` of this connection (one per process)."""
        from airflow_tfos.shared.storage.kerberos import KerberosLogin

        key = (self.principal, self.keytab)
        if key not in _LOGINS:
            _LOGINS[key] = KerberosLogin(self.principal, self.keytab)
        return _LOGINS[key]


_LOGINS: dict[tuple[str | None, str | None], Any] = {}


# --------------------------------------------------------------------------- pure parsing


def parse_rm_addresses(raw: str | Iterable[str], *, scheme: str, port: int | None, conn_id: str) -> tuple[str, ...]:
    """Turn ``rm1,rm2:8090,https://rm3`` into base URLs.

    :param raw: a comma-separated string or a list of addresses.
    :param scheme: ``http`` or ``https`` for addresses without one.
    :param port: the port for addresses without one (default 8088/8090).
    :param conn_id: the connection, named in errors.
    """
    items = raw.split(",") if isinstance(raw, str) else list(raw)
    addresses: list[str] = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        parts = urlsplit(item if "://" in item else f"{scheme}://{item}")
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise YarnError(f"connection {conn_id!r}: {item!r} is not a ResourceManager address (host[:port])")
        try:
            item_port = parts.port or port or DEFAULT_PORTS[parts.scheme]
        except ValueError as exc:
            raise YarnError(f"connection {conn_id!r}: bad port in {item!r}") from exc
        addresses.append(f"{parts.scheme}://{parts.hostname}:{item_port}")
    if not addresses:
        raise YarnError(
            f"connection {conn_id!r} names no ResourceManager: set its host to rm1:8088[,rm2:8088] "
            "or its extra 'rm_addresses'"
        )
    return tuple(dict.fromkeys(addresses))


def _bool_or_path(value: Any) -> bool | str:
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    return {"true": True, "false": False, "": True}.get(text.lower(), text)


def parse_connection(
    conn_id: str,
    *,
    host: str | None,
    port: int | None,
    schema: str | None,
    login: str | None,
    extra: Mapping[str, Any],
) -> RmSettings:
    """Read a ``yarn`` connection's fields into :class:`RmSettings`, checking each.

    :param conn_id: the connection id.
    :param host: one or more RM addresses, comma-separated.
    :param port: the default port.
    :param schema: ``http`` or ``https``.
    :param login: the ``user.name`` for simple authentication.
    :param extra: the connection's extras.
    """

    def option(name: str, default: Any) -> Any:
        value = extra.get(name, extra.get(f"extra__yarn__{name}"))
        return default if value in (None, "") else value

    auth = str(option("auth", "simple")).lower()
    if auth not in AUTH_MODES:
        raise YarnError(f"extra 'auth' of connection {conn_id!r} must be 'simple' or 'kerberos', not {auth!r}")
    scheme = (schema or "http").lower()
    if scheme not in DEFAULT_PORTS:
        raise YarnError(f"schema of connection {conn_id!r} must be 'http' or 'https', not {schema!r}")
    addresses = parse_rm_addresses(option("rm_addresses", host or ""), scheme=scheme, port=port, conn_id=conn_id)
    try:
        settings = RmSettings(
            conn_id=conn_id,
            addresses=addresses,
            auth=auth,
            user=login or None,
            app_user=str(option("application_user", "")) or login or None,
            verify=_bool_or_path(option("verify", True)),
            timeout=float(option("timeout", 10.0)),
            max_retries=int(option("max_retries", 3)),
            retry_backoff=float(option("retry_backoff", 1.0)),
            max_retry_seconds=float(option("max_retry_seconds", 60.0)),
            principal=str(option("principal", "")) or None,
            keytab=str(option("keytab", "")) or None,
        )
    except (TypeError, ValueError) as exc:
        raise YarnError(
            f"connection {conn_id!r}: extras timeout, retry_backoff, max_retry_seconds must be numbers "
            f"and max_retries an integer ({exc})"
        ) from exc
    if settings.timeout <= 0 or settings.max_retries < 0 or settings.retry_backoff < 0:
        raise YarnError(f"connection {conn_id!r}: timeout must be > 0, max_retries and retry_backoff >= 0")
    return settings


def app_state_from_json(payload: Any, *, source: str = "the ResourceManager") -> AppState:
    """Read one application (``{"app": {...}}`` or the inner object) into an :class:`AppState`.

    :param payload: the decoded JSON.
    :param source: who sent it, named in errors.
    """
    app = payload.get("app", payload) if isinstance(payload, dict) else None
    if not isinstance(app, dict) or not app.get("id") or not app.get("state"):
        raise YarnProtocolError(f"{source} sent an application without id or state: {str(payload)[:200]!r}")
    state = str(app["state"]).upper()
    final_status = str(app.get("finalStatus") or "UNDEFINED").upper()
    if state not in YARN_STATES or final_status not in FINAL_STATUSES:
        raise YarnProtocolError(f"{source} sent unknown state {state!r} / final status {final_status!r}")
    raw_tags = app.get("applicationTags") or ""
    tags = raw_tags.split(",") if isinstance(raw_tags, str) else list(raw_tags)
    return AppState(
        app_id=str(app["id"]),
        state=state,
        final_status=final_status,
        diagnostics=str(app.get("diagnostics") or ""),
        tracking_url=app.get("trackingUrl") or None,
        tags=tuple(t.strip() for t in tags if t and t.strip()),
        name=str(app.get("name") or ""),
        user=str(app.get("user") or ""),
        application_type=str(app.get("applicationType") or ""),
    )


def app_states_from_json(payload: Any, *, source: str = "the ResourceManager") -> list[AppState]:
    """Read ``{"apps": {"app": [...]}}`` (or ``{"apps": null}``, YARN's empty answer).

    :param payload: the decoded JSON.
    :param source: who sent it, named in errors.
    """
    if not isinstance(payload, dict) or "apps" not in payload:
        raise YarnProtocolError(f"{source} sent no 'apps' object: {str(payload)[:200]!r}")
    apps = payload["apps"]
    if apps is None:
        return []
    items = apps.get("app") if isinstance(apps, dict) else None
    if items is None:
        return []
    if isinstance(items, dict):  # old Jettison JSON renders a one-element list as an object
        items = [items]
    return [app_state_from_json(item, source=source) for item in items]


def conf_value(payload: Any, key: str) -> str | None:
    """The value of ``key`` in an answer of the ``/conf`` servlet (one property, or all of them).

    :param payload: the decoded JSON.
    :param key: the configuration key.
    """
    if not isinstance(payload, dict):
        return None
    entries = payload.get("properties") or []
    if isinstance(payload.get("property"), dict):
        entries = [payload["property"]]
    for entry in entries:
        if isinstance(entry, dict) and entry.get("key") == key:
            return str(entry.get("value"))
    return None


def container_limit_from_new_application(payload: Any, *, source: str = "the ResourceManager") -> ContainerLimit:
    """Read ``maximum-resource-capability`` from a ``new-application`` answer.

    :param payload: the decoded JSON.
    :param source: who sent it, named in errors.
    """
    capability = payload.get("maximum-resource-capability") if isinstance(payload, dict) else None
    try:
        return ContainerLimit(memory_mb=int(capability["memory"]), vcores=int(capability["vCores"]))
    except (TypeError, KeyError, ValueError) as exc:
        raise YarnProtocolError(f"{source} sent no maximum-resource-capability: {str(payload)[:200]!r}") from exc


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True)
class Reply:
    """One HTTP answer.

    :param address: base URL of the RM that answered.
    :param status: HTTP status.
    :param headers: headers, lower-cased names.
    :param text: the body.
    """

    address: str
    status: int
    headers: Mapping[str, str]
    text: str


def classify_reply(reply: Reply) -> tuple[str, str]:
    """Say what to do with an answer: ``("redirect", base_url)``, ``("next", reason)`` or ``("done", "")``.

    :param reply: the answer.
    """
    if reply.status in (301, 302, 303, 307, 308):
        location = urlsplit(reply.headers.get("location", ""))
        if location.scheme in DEFAULT_PORTS and location.hostname:
            try:
                port = location.port or DEFAULT_PORTS[location.scheme]
            except ValueError:
                return "next", f"HTTP {reply.status} with a bad port in its Location"
            return "redirect", f"{location.scheme}://{location.hostname}:{port}"
        return "next", f"HTTP {reply.status} without an absolute Location"
    if "standby rm" in reply.text[:300].lower() and not reply.text.lstrip().startswith("{"):
        return "next", "standby ResourceManager (it named no active one)"
    if reply.status >= 500:
        return "next", f"HTTP {reply.status}"
    return "done", ""


def foreign_redirect(target: str, settings: RmSettings) -> str:
    """Why a redirect to ``target``, an address that is not one of the connection's RMs, is not followed.

    A standby RM names the active one; following it anywhere would send the request (and its credentials)
    to any host a proxy or a misconfigured RM names, and remember that host as the active RM.
    """
    return (
        f"redirected to {target}, which is not a ResourceManager of connection {settings.conn_id!r} "
        f"(its RMs: {', '.join(settings.addresses)}); not followed. If {target} is an RM of this cluster, "
        f"add it to the host (or extra 'rm_addresses') of connection {settings.conn_id!r}"
    )


def decode_reply(reply: Reply, *, conn_id: str, what: str, app_id: str | None = None) -> dict[str, Any]:
    """Turn a final answer into its JSON, or the error it stands for.

    :param reply: the answer.
    :param conn_id: the Airflow connection, named in errors.
    :param what: what was asked, named in errors.
    :param app_id: the application asked about, for a 404.
    """
    address = reply.address
    try:
        payload = json.loads(reply.text)
    except ValueError:
        payload = None
    remote = payload.get("RemoteException") if isinstance(payload, dict) else None
    message = (remote or {}).get("message") or reply.text[:200].strip()
    if reply.status in (401, 403):
        raise YarnAuthError(
            f"ResourceManager {address} refused {what} with HTTP {reply.status} ({message}): check the login "
            f"(user.name) and extra 'auth' of Airflow connection {conn_id!r}, and the application's ACLs"
        )
    if reply.status == 404 and app_id is not None and remote is not None:
        raise YarnApplicationNotFound(app_id, address)
    if not isinstance(payload, dict):
        raise YarnProtocolError(
            f"{address} answered {what} with HTTP {reply.status} and a body that is not the ResourceManager's "
            f"JSON ({reply.text[:80]!r}): a proxy answered instead of the ResourceManager, or the address is not "
            f"an RM web address. Check the host/port of Airflow connection {conn_id!r}"
        )
    if reply.status >= 400:
        exception = (remote or {}).get("exception", "error")
        raise YarnError(f"ResourceManager {address} rejected {what}: HTTP {reply.status} {exception}: {message}")
    return payload


def negotiate_header(hostname: str, login: Any = None) -> str:
    """A SPNEGO ``Authorization`` header for ``HTTP/<hostname>``, from ``login`` (default: the worker's ticket cache).

    :param hostname: the RM's host name.
    :param login: a :class:`~airflow_tfos.shared.storage.kerberos.KerberosLogin` (principal and keytab).
    """
    from airflow_tfos.shared.errors import KerberosAuthError
    from airflow_tfos.shared.storage.kerberos import negotiate_header as spnego_header

    try:
        return spnego_header(hostname, login)
    except KerberosAuthError as exc:
        raise YarnAuthError(
            f"{exc}. For the ResourceManager at {hostname}: set the yarn connection's extras 'principal' and "
            "'keytab', or run kinit for the Airflow worker, or set extra 'auth' to 'simple' on a cluster without "
            "Kerberos"
        ) from exc


#: The ``yarn`` connection type as listed in the provider info (form fields and their labels).
YARN_CONNECTION_TYPE: dict[str, Any] = {
    "hook-class-name": "airflow_tfos.hooks.yarn.YarnHook",
    "hook-name": "YARN ResourceManager",
    "connection-type": "yarn",
    "ui-field-behaviour": {
        "hidden-fields": ["password"],
        "relabeling": {
            "host": "ResourceManager address(es)",
            "schema": "Scheme (http or https)",
            "login": "User (user.name, simple auth)",
        },
        "placeholders": {
            "host": "rm1.example.com,rm2.example.com (empty: yarn-site.xml of HADOOP_CONF_DIR)",
            "port": "8088",
            "schema": "http",
        },
    },
    "conn-fields": {
        "auth": {
            "label": "Authentication",
            "description": "simple (user.name from Login) or kerberos (SPNEGO; extras principal, keytab)",
            "schema": {"type": ["string", "null"], "default": "simple"},
        },
        "application_user": {
            "label": "Application user",
            "description": "the user the run's applications run as; searches by tag match it (default: Login)",
            "schema": {"type": ["string", "null"]},
        },
        "verify": {
            "label": "Verify TLS",
            "description": "true, false, or the path of a CA bundle",
            "schema": {"type": ["string", "boolean", "null"], "default": True},
        },
        "timeout": {"label": "Timeout (s)", "schema": {"type": ["number", "null"], "default": 10}},
        "rm_addresses": {
            "label": "ResourceManager addresses",
            "description": "comma-separated host:port list, instead of Host",
            "schema": {"type": ["string", "null"]},
        },
        "max_retries": {"label": "Retry rounds", "schema": {"type": ["integer", "null"], "default": 3}},
        "retry_backoff": {"label": "First retry wait (s)", "schema": {"type": ["number", "null"], "default": 1}},
        "max_retry_seconds": {"label": "Give up after (s)", "schema": {"type": ["number", "null"], "default": 60}},
    },
}
