"""Delegation tokens and Kerberos for the WebHDFS emulator (:mod:`airflow_tfos.testing.webhdfs`).

As WebHDFS.md documents: ``GETDELEGATIONTOKEN`` (``renewer``), ``RENEWDELEGATIONTOKEN`` and
``CANCELDELEGATIONTOKEN`` (``token``), and ``delegation=<token>`` accepted on every operation. A token
expires ``renew_interval`` seconds after it was issued or last renewed, and cannot be renewed past
``max_lifetime`` seconds after it was issued (Hadoop's ``dfs.namenode.delegation.token.renew-interval``
and ``max-lifetime``, one day and seven days by default). Only a Kerberos-authenticated caller gets, renews
(as the renewer) or cancels (as owner or renewer) a token; a token cannot get another.

The token string is opaque to clients: Hadoop's is the URL-safe base64 of a serialized identifier and
password; the emulator's is 32 random bytes in URL-safe base64 (unguessable, not Hadoop's layout).

On a Kerberized emulator, the namenode authenticates each request by its ``delegation`` token, else by
SPNEGO (``Authorization: Negotiate``), else answers 401 ``WWW-Authenticate: Negotiate``; ``user.name`` is
ignored. The namenode's redirects to the datanode carry a delegation token (the caller's, or one issued
for the redirect), and the datanode accepts only that, as Hadoop's datanodes do.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass

from airflow_tfos.testing.spnego import SpnegoAcceptor, Unauthenticated
from airflow_tfos.testing.webhdfs_http import RemoteError

__all__ = ["DelegationTokens", "KerberosGate", "TokenInfo", "Unauthenticated"]

TOKEN_OPS = {"GETDELEGATIONTOKEN", "RENEWDELEGATIONTOKEN", "CANCELDELEGATIONTOKEN"}


@dataclass
class TokenInfo:
    sequence: int
    owner: str
    renewer: str
    issued: float
    expires: float
    max_date: float

    def describe(self) -> str:
        return f"HDFS_DELEGATION_TOKEN token {self.sequence} for {self.owner}"


class DelegationTokens:
    """The tokens one emulated namenode issued.

    :param renew_interval: seconds a token lives after it was issued or renewed.
    :param max_lifetime: seconds after issue past which no renewal extends it.
    """

    def __init__(self, *, renew_interval: float = 86400.0, max_lifetime: float = 7 * 86400.0):
        self.renew_interval = renew_interval
        self.max_lifetime = max_lifetime
        self._tokens: dict[str, TokenInfo] = {}
        self._lock = threading.Lock()
        self._sequence = 0
        self.issued: list[str] = []  # for tests: every token ever issued (also those of redirects)
        self.requested: list[str] = []  # for tests: the tokens clients asked for (GETDELEGATIONTOKEN)
        self.renewals: dict[str, int] = {}  # for tests: how often each token was renewed

    def issue(self, owner: str, renewer: str | None) -> str:
        now = time.time()
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._sequence += 1
            self._tokens[token] = TokenInfo(
                self._sequence, owner, renewer or owner, now, now + self.renew_interval, now + self.max_lifetime
            )
            self.issued.append(token)
        return token

    def _get(self, token: str) -> TokenInfo:
        info = self._tokens.get(token)
        if info is None:
            raise RemoteError("InvalidToken", "token is not known to this namenode (cancelled, or never issued)")
        return info

    def verify(self, token: str) -> str:
        """The owner of a valid token; raise ``RemoteError("InvalidToken")`` for an unknown or expired one."""
        with self._lock:
            info = self._get(token)
            now = time.time()
            if now > info.expires:
                raise RemoteError(
                    "InvalidToken",
                    f"token ({info.describe()}) is expired, current time: {int(now * 1000)} "
                    f"expected renewal time: {int(info.expires * 1000)}",
                )
            return info.owner

    def renew(self, token: str, caller: str) -> int:
        """Extend a token; return its new expiry in milliseconds since the epoch."""
        with self._lock:
            info = self._get(token)
            now = time.time()
            if caller != info.renewer:
                raise RemoteError(
                    "AccessControlException",
                    f"{caller} tries to renew a token ({info.describe()}) with non-matching renewer {info.renewer}",
                )
            if now > info.max_date:
                raise RemoteError(
                    "InvalidToken",
                    f"{caller} tried to renew an expired token ({info.describe()}) max expiration date: "
                    f"{int(info.max_date * 1000)} currentTime: {int(now * 1000)}",
                )
            if now > info.expires:
                raise RemoteError("InvalidToken", f"{caller} tried to renew an expired token ({info.describe()})")
            info.expires = min(now + self.renew_interval, info.max_date)
            self.renewals[token] = self.renewals.get(token, 0) + 1
            return int(info.expires * 1000)

    def cancel(self, token: str, caller: str) -> None:
        with self._lock:
            info = self._get(token)
            if caller not in (info.owner, info.renewer):
                raise RemoteError("AccessControlException", f"{caller} is not authorized to cancel the token")
            del self._tokens[token]

    def is_live(self, token: str) -> bool:
        """Whether ``token`` is issued, not cancelled and not expired (for tests)."""
        with self._lock:
            info = self._tokens.get(token)
            return info is not None and info.expires >= time.time()

    def live(self) -> int:
        """How many tokens are neither cancelled nor expired (for tests)."""
        now = time.time()
        with self._lock:
            return sum(1 for info in self._tokens.values() if info.expires >= now)


class KerberosGate:
    """Who a request to a Kerberized emulator comes from.

    :param keytab: the namenode's ``HTTP/<host>`` keytab.
    :param tokens: the namenode's delegation tokens.
    """

    def __init__(self, keytab: str, tokens: DelegationTokens):
        self.acceptor = SpnegoAcceptor(keytab)
        self.tokens = tokens
        self.principals: list[str] = []  # for tests: every principal that authenticated
        #: for tests: ``(server, op, path, user, "kerberos" or "token")`` of every authenticated request
        self.authenticated: list[tuple[str, str, str, str, str]] = []

    def namenode_user(self, authorization: str | None, query: dict[str, str]) -> tuple[str, bool]:
        """``(user, by_kerberos)``: the token's owner, or the SPNEGO principal's short name (``doas`` applied);
        raise :class:`Unauthenticated` or ``RemoteError``."""
        if query.get("delegation"):
            return self.tokens.verify(query["delegation"]), False
        principal, user = self.acceptor.accept(authorization)
        self.principals.append(principal)
        return query.get("doas") or user, True

    def datanode_user(self, query: dict[str, str]) -> str:
        token = query.get("delegation")
        if not token:
            raise RemoteError("SecurityException", "Security enabled but user not authenticated by filter")
        return self.tokens.verify(token)

    def token_op(self, op: str, user: str, by_kerberos: bool, query: dict[str, str]):
        """Answer a delegation-token operation: ``(status, body)``."""
        if not by_kerberos:
            raise RemoteError("IOException", "Delegation Token can be issued only with kerberos or web authentication")
        if op == "GETDELEGATIONTOKEN":
            token = self.tokens.issue(user, query.get("renewer"))
            self.tokens.requested.append(token)
            return 200, {"Token": {"urlString": token}}
        token = query.get("token") or ""
        if op == "RENEWDELEGATIONTOKEN":
            return 200, {"long": self.tokens.renew(token, user)}
        self.tokens.cancel(token, user)
        return 200, None
