"""One request to the ResourceManagers of a YARN connection, sync (requests) or async (httpx).

A request is a plan, a generator that yields what to do (:class:`Send` a request, :class:`Sleep`) and gets
back what came of it, so that one plan serves both clients. :meth:`RmTransport.exchange` is the plan of one
request over every RM of the connection: follow a standby RM's redirect to the active one (only to an RM
of the connection: a redirect elsewhere is refused, naming the address), move on from a standby or an RM
that cannot be reached, retry 5xx answers and dropped connections with backoff, and give up after
``max_retries`` rounds or ``max_retry_seconds``, naming every address tried. :meth:`RmTransport.run` and
:meth:`RmTransport.arun` carry out a plan; :class:`~airflow_tfos.hooks.yarn.YarnHook` writes the plans of
its calls on top of ``exchange``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from airflow_tfos.hooks.errors import YarnUnavailableError
from airflow_tfos.hooks.yarn_rest import Reply, RmSettings, classify_reply, foreign_redirect, negotiate_header

#: Redirects followed from one RM before it counts as failed.
MAX_REDIRECTS = 3

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Send:
    """Send one request to one RM; the plan gets back a :class:`Reply` or a :class:`Failure`."""

    method: str
    address: str
    path: str
    params: dict[str, str]
    body: dict[str, Any] | None
    timeout: float


@dataclass(frozen=True)
class Failure:
    """The request did not get an answer (refused, timed out, dropped)."""

    reason: str


@dataclass(frozen=True)
class Sleep:
    """Wait before the next round."""

    seconds: float


Steps = Generator[Any, Any, Any]


class RmTransport:
    """Send requests to the ResourceManagers of one connection, remembering which one is active.

    :param conn_id: the Airflow connection (named in errors).
    :param settings: its parsed settings.
    """

    def __init__(self, conn_id: str, settings: RmSettings) -> None:
        self.conn_id = conn_id
        self.settings = settings
        self.active: str | None = None

    @cached_property
    def _session(self) -> Any:
        import requests

        session = requests.Session()
        if self.settings.auth == "kerberos":
            session.auth = self._spnego

        return session

    def _spnego(self, request: Any) -> Any:
        """A ``requests`` auth: a fresh SPNEGO token on each request (no round trip through a 401)."""
        request.headers["Authorization"] = negotiate_header(
            urlsplit(request.url).hostname or "", self.settings.kerberos_login()
        )
        return request

    def _params(self, params: Mapping[str, str] | None) -> dict[str, str]:
        settings = self.settings
        base = {"user.name": settings.user} if settings.auth == "simple" and settings.user else {}
        return {**base, **(params or {})}

    def _send(self, step: Send) -> Reply | Failure:
        import requests

        try:
            response = self._session.request(
                step.method,
                step.address + step.path,
                params=step.params,
                json=step.body,
                headers={"Accept": "application/json"},
                timeout=step.timeout,
                allow_redirects=False,
                verify=self.settings.verify,
            )
        except requests.RequestException as exc:
            return Failure(describe(exc))
        headers = {name.lower(): value for name, value in response.headers.items()}
        return Reply(step.address, response.status_code, headers, response.text)

    async def _asend(self, client: Any, step: Send) -> Reply | Failure:
        import httpx

        headers = {"Accept": "application/json"}
        if self.settings.auth == "kerberos":
            hostname = urlsplit(step.address).hostname or ""
            headers["Authorization"] = await asyncio.to_thread(
                negotiate_header, hostname, self.settings.kerberos_login()
            )
        try:
            response = await client.request(
                step.method,
                step.address + step.path,
                params=step.params,
                json=step.body,
                headers=headers,
                timeout=step.timeout,
            )
        except httpx.TransportError as exc:
            return Failure(describe(exc))
        return Reply(step.address, response.status_code, dict(response.headers), response.text)

    def send_once(self, method: str, address: str, path: str) -> Reply | Failure:
        """One request to one RM, no redirect followed, no retry (for a connection test)."""
        return self._send(Send(method, address, path, self._params(None), None, self.settings.timeout))

    def run(self, steps: Steps) -> Any:
        """Carry out a request plan with requests."""
        try:
            step = next(steps)
            while True:
                if isinstance(step, Sleep):
                    time.sleep(step.seconds)
                    step = steps.send(None)
                else:
                    step = steps.send(self._send(step))
        except StopIteration as done:
            return done.value

    async def arun(self, steps: Steps) -> Any:
        """Carry out a request plan with httpx."""
        import httpx

        async with httpx.AsyncClient(verify=self.settings.verify, follow_redirects=False) as client:
            try:
                step = next(steps)
                while True:
                    if isinstance(step, Sleep):
                        await asyncio.sleep(step.seconds)
                        step = steps.send(None)
                    else:
                        step = steps.send(await self._asend(client, step))
            except StopIteration as done:
                return done.value

    def exchange(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None, body: dict[str, Any] | None = None
    ) -> Steps:
        """Yield the sends and sleeps of one request over every RM; return the final :class:`Reply`."""
        settings = self.settings
        started = time.monotonic()
        deadline = started + settings.max_retry_seconds
        failures: dict[str, str] = {}
        rounds = 0
        while True:
            rounds += 1
            order = [self.active] if self.active else []
            for first in dict.fromkeys([*order, *settings.addresses]):
                address = first
                for _hop in range(MAX_REDIRECTS + 1):
                    timeout = max(0.5, min(settings.timeout, deadline - time.monotonic()))
                    outcome = yield Send(method, address, path, self._params(params), body, timeout)
                    if isinstance(outcome, Failure):
                        kind, detail = "next", outcome.reason
                    else:
                        kind, detail = classify_reply(outcome)
                    if kind == "done":
                        self.active = address
                        return outcome
                    if kind == "redirect" and detail not in settings.addresses:
                        kind, detail = "next", foreign_redirect(detail, settings)
                    elif kind == "redirect":
                        log.info("ResourceManager %s is standby; following its redirect to %s", address, detail)
                        address = detail
                        continue
                    failures[address] = detail
                    log.warning("ResourceManager %s: %s (%s %s)", address, detail, method, path)
                    if self.active == address:
                        self.active = None
                    break
                else:
                    failures[address] = "too many redirects"
            remaining = deadline - time.monotonic()
            if rounds > settings.max_retries or remaining <= 0:
                break
            yield Sleep(min(settings.retry_backoff * 2 ** (rounds - 1), 30.0, remaining))
        tried = "; ".join(f"{address}: {reason}" for address, reason in failures.items())
        took = f"({rounds} round(s) in {time.monotonic() - started:.1f} s). Tried {tried}."
        origin = self.settings.origin
        if origin:
            raise YarnUnavailableError(
                f"no ResourceManager that {origin} names answered {method} {path} {took} Fix the address there "
                f"(or name the RMs in connection {self.conn_id!r}), or check that an RM is up and active"
            )
        raise YarnUnavailableError(
            f"no ResourceManager of Airflow connection {self.conn_id!r} answered {method} {path} {took} Fix the "
            f"host/port (or extra 'rm_addresses') of connection {self.conn_id!r}, or check that an RM is up and active"
        )


def describe(exc: BaseException) -> str:
    """A short reason for a transport failure, from the exception and its causes."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for error in chain:
        if isinstance(error, ConnectionRefusedError) or "Connection refused" in str(error):
            return "connection refused"
    for error in chain:
        text, name = str(error), type(error).__name__
        if "SSL" in name or "CERTIFICATE_VERIFY_FAILED" in text or "WRONG_VERSION_NUMBER" in text:
            return f"TLS error ({_tls_reason(text)})"
        if isinstance(error, TimeoutError) or "timed out" in text or "Timeout" in name:
            return "timed out"
        if isinstance(error, ConnectionResetError) or "reset" in text:
            return "connection reset"
        if "RemoteDisconnected" in name or "without sending a response" in text or "without response" in text:
            return "connection closed without an answer"
        if "Name or service not known" in text or "nodename nor servname" in text:
            return "unknown host"
    return f"{type(exc).__name__}: {str(exc)[:120]}"


def _tls_reason(text: str) -> str:
    for known in ("CERTIFICATE_VERIFY_FAILED", "WRONG_VERSION_NUMBER", "self-signed certificate", "hostname mismatch"):
        if known in text:
            start = text.find(known)
            return text[start : start + 80].split("'")[0].split(")")[0].strip()
    return text[:120]
