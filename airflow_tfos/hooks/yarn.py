"""YARN through the ResourceManager REST API: application state, tag search, kill, container limits.

Every method exists twice: ``get_application`` (requests, for operators and sensors) and
``aget_application`` (httpx, for triggers). Both run the same request plan, written here on top of
:meth:`RmTransport.exchange <airflow_tfos.hooks.yarn_transport.RmTransport.exchange>`: try each RM of
the connection, follow a standby RM's redirect to the active one, move on from a standby or an RM that
cannot be reached, retry with backoff, and give up naming every address tried.

Connection (type ``yarn``): host is one or more RM web addresses, comma-separated for HA
(``rm1.example.com,rm2.example.com`` or ``rm1:8088,rm2:8088``); port (default 8088, or 8090 for
https); schema ``http`` or ``https``; login is the ``user.name`` of simple authentication. Extras:
``auth`` (``simple`` or ``kerberos``), ``application_user`` (the user the run's applications run as,
which a search by tag must match; default with ``kerberos``: the short name of the principal, else with
``simple``: login, else ``$HADOOP_USER_NAME``, else the OS user),
``verify`` (TLS: true, false or a CA bundle path), ``timeout`` (seconds per request, default 10),
``rm_addresses`` (a list, instead of host), ``max_retries`` (default 3), ``retry_backoff`` (first wait
in seconds, default 1), ``max_retry_seconds`` (default 60).

Where the connection does not exist, or names no RM (no host, no ``rm_addresses``), the RMs come from
Hadoop's ``yarn-site.xml`` (``YARN_CONF_DIR`` or ``HADOOP_CONF_DIR``: :mod:`airflow_tfos.hooks.hadoop_conf`).
:meth:`YarnHook.test_connection` answers the connection form's Test button.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from collections.abc import Iterable
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_tfos.hooks.backends.state import TERMINAL_STATES, YARN_STATES, AppState
from airflow_tfos.hooks.errors import (
    YarnApplicationNotFound,
    YarnAuthError,
    YarnError,
    YarnProtocolError,
    YarnUnavailableError,
)
from airflow_tfos.hooks.hadoop_conf import HADOOP_CONF_ENV, YARN_CONF_ENV, hadoop_conf
from airflow_tfos.hooks.yarn_rest import (
    APP_ID_RE,
    APP_PATH,
    APP_STATE_PATH,
    APPS_PATH,
    CLUSTER_INFO_PATH,
    CONF_PATH,
    MAX_ALLOCATION_MB_KEY,
    MAX_ALLOCATION_VCORES_KEY,
    NEW_APPLICATION_PATH,
    YARN_CONNECTION_TYPE,
    ContainerLimit,
    Reply,
    RmSettings,
    app_state_from_json,
    app_states_from_json,
    classify_reply,
    conf_value,
    container_limit_from_new_application,
    decode_reply,
    foreign_redirect,
    negotiate_header,
    parse_connection,
    parse_rm_addresses,
)
from airflow_tfos.hooks.yarn_transport import Failure, RmTransport, Sleep, Steps

__all__ = [
    "YARN_CONNECTION_TYPE",
    "ContainerLimit",
    "Reply",
    "RmSettings",
    "YarnApplicationNotFound",
    "YarnAuthError",
    "YarnError",
    "YarnHook",
    "YarnProtocolError",
    "YarnUnavailableError",
    "app_state_from_json",
    "app_states_from_json",
    "classify_reply",
    "conf_value",
    "container_limit_from_new_application",
    "decode_reply",
    "foreign_redirect",
    "negotiate_header",
    "parse_connection",
    "parse_rm_addresses",
]

log = logging.getLogger(__name__)


def principal_short_name(principal: str) -> str:
    """The user a Kerberos principal stands for under Hadoop's default ``auth_to_local`` rule (a principal of
    the default realm): the part before ``/`` and ``@`` (``etl/host.example.com@EXAMPLE.COM`` -> ``etl``)."""
    return principal.split("@", 1)[0].split("/", 1)[0]


#: The properties of yarn-site.xml that name the ResourceManagers' web addresses, for errors.
RM_ADDRESS_KEYS = (
    "yarn.resourcemanager.webapp.address",
    "yarn.resourcemanager.webapp.https.address",
    "yarn.resourcemanager.hostname",
)


class YarnHook(BaseHook):
    """Read, find and kill YARN applications through the ResourceManager REST API.

    :param yarn_conn_id: the Airflow connection (type ``yarn``) of the ResourceManager(s).
    """

    conn_name_attr = "yarn_conn_id"
    default_conn_name = "yarn_default"
    conn_type = "yarn"
    hook_name = "YARN ResourceManager"

    def __init__(self, yarn_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.yarn_conn_id = yarn_conn_id
        self._settings: RmSettings | None = None
        self._transport: RmTransport | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Relabel the connection form's fields (Airflow reads the same from provider info)."""
        behaviour = YARN_CONNECTION_TYPE["ui-field-behaviour"]
        return {
            "hidden_fields": list(behaviour["hidden-fields"]),
            "relabeling": dict(behaviour["relabeling"]),
            "placeholders": dict(behaviour["placeholders"]),
        }

    # ------------------------------------------------------------------ settings and transports

    @property
    def settings(self) -> RmSettings:
        """The parsed connection (read once); without the connection, yarn-site.xml of ``YARN_CONF_DIR`` /
        ``HADOOP_CONF_DIR``."""
        if self._settings is None:
            try:
                conn = self.get_connection(self.yarn_conn_id)
            except AirflowNotFoundException:
                conn = None
            self._settings = self._parse(conn)
        return self._settings

    async def _asettings(self) -> RmSettings:
        if self._settings is None:
            try:
                conn = await self.aget_connection(self.yarn_conn_id)
            except AirflowNotFoundException:
                conn = None
            self._settings = self._parse(conn)
        return self._settings

    def _parse(self, conn: Any) -> RmSettings:
        """The connection's fields; the RMs of Hadoop's files where it names none (or does not exist)."""
        extra = dict(conn.extra_dejson or {}) if conn is not None else {}
        host = conn.host if conn is not None else None
        origin = None
        if not host and not extra.get("rm_addresses"):
            conf = hadoop_conf()
            found = conf.rm_addresses() if conf is not None else ()
            if not found:
                missing = "does not exist" if conn is None else "names no ResourceManager"
                raise YarnError(
                    f"connection {self.yarn_conn_id!r} {missing}, and no yarn-site.xml of {YARN_CONF_ENV} or "
                    f"{HADOOP_CONF_ENV} names one (yarn.resourcemanager.webapp.address): create the connection "
                    "(host rm1:8088[,rm2:8088]), or set HADOOP_CONF_DIR to the cluster's configuration folder"
                )
            log.info("ResourceManagers of connection %s from Hadoop's files: %s", self.yarn_conn_id, ", ".join(found))
            extra["rm_addresses"] = list(found)
            key = next((k for k in RM_ADDRESS_KEYS if k in conf.properties), RM_ADDRESS_KEYS[0])
            origin = f"{conf.source(key, 'yarn-site.xml')} ({key})"
            if conf is not None and conf.auth() == "kerberos":
                extra.setdefault("auth", "kerberos")
        settings = parse_connection(
            self.yarn_conn_id,
            host=host,
            port=conn.port if conn is not None else None,
            schema=conn.schema if conn is not None else None,
            login=conn.login if conn is not None else None,
            extra=extra,
        )
        if origin:
            settings = dataclasses.replace(settings, origin=origin)
        explicit = extra.get("application_user") or extra.get("extra__yarn__application_user")
        if settings.auth == "kerberos" and not explicit:  # the login is no user under Kerberos: the principal is
            settings = dataclasses.replace(settings, app_user=None)
        return settings

    @property
    def _rms(self) -> RmTransport:
        """The transport to this connection's RMs (once the settings are read); it remembers the active RM."""
        if self._transport is None:
            self._transport = RmTransport(self.yarn_conn_id, self.settings)
        return self._transport

    def _run(self, steps: Steps) -> Any:
        """Carry out a request plan with requests (the connection is read before the plan starts)."""
        return self._rms.run(steps)

    async def _arun(self, steps: Steps) -> Any:
        """Carry out a request plan with httpx (the connection is read before the plan starts)."""
        await self._asettings()
        return await self._rms.arun(steps)

    # ------------------------------------------------------------------ the request plans

    def _get_steps(self, app_id: str) -> Steps:
        _check_app_id(app_id)
        reply = yield from self._rms.exchange("GET", APP_PATH.format(app_id=app_id))
        what = f"GET application {app_id}"
        payload = decode_reply(reply, conn_id=self.yarn_conn_id, what=what, app_id=app_id)
        return app_state_from_json(payload, source=reply.address)

    def _find_steps(
        self, tag: str | None, states: Iterable[str] | None, user: str | None = None, app_type: str | None = None
    ) -> Steps:
        params: dict[str, str] = {}
        if user:
            params["user"] = user
        if app_type:
            params["applicationTypes"] = app_type
        wanted_states = {s.strip().upper() for s in states or () if s.strip()}
        unknown = sorted(wanted_states - set(YARN_STATES))
        if unknown:
            raise ValueError(f"unknown YARN application state(s) {unknown}; use some of {', '.join(YARN_STATES)}")
        if wanted_states:
            params["states"] = ",".join(sorted(wanted_states))
        wanted_tag = tag.strip().lower() if tag else None  # YARN stores and matches tags lower-cased
        if wanted_tag:
            params["applicationTags"] = wanted_tag
        reply = yield from self._rms.exchange("GET", APPS_PATH, params=params)
        payload = decode_reply(reply, conn_id=self.yarn_conn_id, what="GET applications")
        found = app_states_from_json(payload, source=reply.address)
        return [
            app
            for app in found
            if (not wanted_states or app.state in wanted_states)
            and (not wanted_tag or wanted_tag in {t.lower() for t in app.tags})
            and (not user or app.user == user)
            and (not app_type or app.application_type.upper() == app_type.upper())
        ]

    def _kill_steps(self, app_id: str, timeout: float, poll_interval: float) -> Steps:
        deadline = time.monotonic() + timeout
        current = yield from self._get_steps(app_id)
        if current.is_terminal:
            log.info("application %s has already ended (%s): nothing to kill", app_id, current)
            return current
        path = APP_STATE_PATH.format(app_id=app_id)
        what = f"PUT state KILLED of {app_id}"
        while True:
            reply = yield from self._rms.exchange("PUT", path, body={"state": "KILLED"})
            payload = decode_reply(reply, conn_id=self.yarn_conn_id, what=what, app_id=app_id)
            state = str(payload.get("state", "")).upper()
            if reply.status == 200 and state in TERMINAL_STATES:
                break
            if reply.status not in (200, 202):
                raise YarnProtocolError(f"{reply.address} answered {what} with HTTP {reply.status}: {payload}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise YarnError(
                    f"application {app_id} is not killed {timeout:g} s after the kill request (the RM still answers "
                    f"HTTP {reply.status}, state {state or 'unknown'}); raise the kill timeout, or look at the RM and "
                    "NodeManager logs"
                )
            log.info("kill of %s in progress (HTTP %s, state %s)", app_id, reply.status, state)
            yield Sleep(min(poll_interval, remaining))
        final = yield from self._get_steps(app_id)
        log.info("application %s killed: %s", app_id, final)
        return final

    def _max_allocation_steps(self) -> Steps:
        values: dict[str, str | None] = {}
        for key in (MAX_ALLOCATION_MB_KEY, MAX_ALLOCATION_VCORES_KEY):
            reply = yield from self._rms.exchange("GET", CONF_PATH, params={"name": key})
            if reply.status != 200:
                break
            try:
                values[key] = conf_value(json.loads(reply.text), key)
            except ValueError:
                break
        mb, vcores = values.get(MAX_ALLOCATION_MB_KEY), values.get(MAX_ALLOCATION_VCORES_KEY)
        if mb and vcores and mb.isdigit() and vcores.isdigit():
            return ContainerLimit(memory_mb=int(mb), vcores=int(vcores))
        log.info("the RM's /conf servlet did not give the maximum allocation; asking new-application")
        reply = yield from self._rms.exchange("POST", NEW_APPLICATION_PATH)
        payload = decode_reply(reply, conn_id=self.yarn_conn_id, what="POST new-application")
        return container_limit_from_new_application(payload, source=reply.address)

    # ------------------------------------------------------------------ public API

    def test_connection(self) -> tuple[bool, str]:
        """Ask every RM of the connection for its cluster info (the connection form's Test button).

        :return: ``(True, message naming the active RM)``, or ``(False, the reason)``: refused, HTTP 401/403,
            TLS error, or only standby RMs.
        """
        try:
            settings = self.settings
        except Exception as exc:
            return False, str(exc)
        transport = self._rms
        active, standby, failed = None, [], []
        for address in settings.addresses:
            try:
                outcome = transport.send_once("GET", address, CLUSTER_INFO_PATH)
            except YarnError as exc:  # Kerberos could not start
                failed.append(f"{address}: {exc}")
                continue
            if isinstance(outcome, Failure):
                failed.append(f"{address}: {outcome.reason}")
                continue
            if outcome.status in (401, 403):
                failed.append(
                    f"{address}: HTTP {outcome.status} (authentication refused: check the login and extra 'auth')"
                )
                continue
            try:
                info = json.loads(outcome.text).get("clusterInfo") or {}
            except (ValueError, AttributeError):
                info = {}
            if outcome.status != 200 or not info:
                failed.append(f"{address}: HTTP {outcome.status}, not the ResourceManager's cluster info")
            elif str(info.get("haState", "ACTIVE")).upper() == "ACTIVE" and active is None:
                active = (address, info)
            else:
                standby.append(address)
        others = "; ".join([*(f"{a}: standby" for a in standby), *failed])
        if active is not None:
            address, info = active
            return True, (
                f"active ResourceManager {address} (cluster {info.get('id')}, Hadoop {info.get('hadoopVersion')}, "
                f"{info.get('state')})" + (f"; {others}" if others else "")
            )
        if standby and not failed:
            return False, f"standby only: no active ResourceManager among {', '.join(standby)}"
        return False, f"no ResourceManager answered: {others}"

    def get_application(self, app_id: str) -> AppState:
        """Return one application's state.

        :param app_id: ``application_<clusterTimestamp>_<number>``.
        """
        return self._run(self._get_steps(app_id))

    @property
    def application_user(self) -> str:
        """The user this connection's applications run as, whose applications alone a search by tag finds.

        Extra ``application_user`` when given. Else with ``auth=kerberos``, the short name of the connection's
        principal (else of the ticket cache's): ``etl/host@REALM`` -> ``etl``, as Hadoop's default
        ``auth_to_local`` rule maps a principal of the cluster's realm (a cluster with other rules needs the
        extra). Else (simple authentication) the login, else ``$HADOOP_USER_NAME``, else the OS user: what
        spark-submit runs as.
        """
        import getpass

        settings = self.settings
        if settings.app_user:
            return settings.app_user
        if settings.auth == "kerberos":
            principal = settings.principal or self._ticket_cache_principal()
            if principal:
                return principal_short_name(principal)
            return getpass.getuser()
        return os.environ.get("HADOOP_USER_NAME") or getpass.getuser()

    def _ticket_cache_principal(self) -> str | None:
        """The principal of the ticket cache this connection authenticates with, or None (warned) if none."""
        from airflow_tfos.shared.errors import KerberosAuthError

        try:
            return str(self.settings.kerberos_login().credentials("the ResourceManager").name)
        except (ImportError, KerberosAuthError) as exc:
            log.warning(
                "connection %s: no principal to name the user of its applications (%s); searching for the OS "
                "user's: set extra 'application_user' or 'principal'",
                self.yarn_conn_id,
                exc,
            )
            return None

    async def aapplication_user(self) -> str:
        """:attr:`application_user`, reading the connection without blocking the event loop."""
        await self._asettings()
        return self.application_user

    def find_applications(
        self,
        tag: str | None = None,
        states: Iterable[str] | None = None,
        *,
        user: str | None = None,
        application_type: str | None = None,
    ) -> list[AppState]:
        """Return the applications carrying ``tag`` (case-insensitive, as YARN stores tags) in ``states``.

        A tag is no proof of who submitted an application (any user can set any tag): to adopt or kill
        what a search finds, give ``user`` and ``application_type`` too.

        :param tag: an application tag; None for any.
        :param states: YARN states to keep; None for all.
        :param user: keep only applications of this user (None: any).
        :param application_type: keep only applications of this type, e.g. ``SPARK`` (None: any).
        """
        return self._run(self._find_steps(tag, states, user, application_type))

    def kill_application(self, app_id: str, timeout: float = 120, poll_interval: float = 1.0) -> AppState:
        """Kill an application and return its final state; an ended application is left as it is.

        :param app_id: the application.
        :param timeout: seconds to wait for the kill to complete.
        :param poll_interval: seconds between repeated kill requests while the RM answers 202.
        """
        return self._run(self._kill_steps(app_id, timeout, poll_interval))

    def get_max_allocation(self) -> ContainerLimit:
        """Return the largest container the cluster allows (``yarn.scheduler.maximum-allocation-*``).

        Read from the RM's ``/conf`` servlet; where that is closed (admin-only), from the
        ``maximum-resource-capability`` of ``POST new-application``.
        """
        return self._run(self._max_allocation_steps())

    async def aget_application(self, app_id: str) -> AppState:
        """Return one application's state (async).

        :param app_id: ``application_<clusterTimestamp>_<number>``.
        """
        return await self._arun(self._get_steps(app_id))

    async def afind_applications(
        self,
        tag: str | None = None,
        states: Iterable[str] | None = None,
        *,
        user: str | None = None,
        application_type: str | None = None,
    ) -> list[AppState]:
        """Return the applications carrying ``tag`` in ``states`` (async); the parameters are
        :meth:`find_applications`'s."""
        return await self._arun(self._find_steps(tag, states, user, application_type))

    async def akill_application(self, app_id: str, timeout: float = 120, poll_interval: float = 1.0) -> AppState:
        """Kill an application and return its final state (async).

        :param app_id: the application.
        :param timeout: seconds to wait for the kill to complete.
        :param poll_interval: seconds between repeated kill requests while the RM answers 202.
        """
        return await self._arun(self._kill_steps(app_id, timeout, poll_interval))

    async def aget_max_allocation(self) -> ContainerLimit:
        """Return the largest container the cluster allows (async)."""
        return await self._arun(self._max_allocation_steps())


def _check_app_id(app_id: str) -> None:
    if not isinstance(app_id, str) or not APP_ID_RE.match(app_id):
        raise ValueError(f"{app_id!r} is not a YARN application id (application_<clusterTimestamp>_<number>)")
