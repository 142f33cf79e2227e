"""Kerberos for HTTP clients of Hadoop (WebHDFS, the ResourceManager): SPNEGO from a keytab or a ticket cache,
and the WebHDFS delegation token of the process.

A :class:`KerberosLogin` names who authenticates: ``principal`` and ``keytab`` (tickets are then obtained
from the keytab into a private in-memory ticket cache of this process, and obtained again when they
expire, by MIT Kerberos itself), or neither (the process's ticket cache, ``KRB5CCNAME`` or ``kinit``'s
default, optionally restricted to ``principal``). :func:`negotiate_header` makes the ``Authorization:
Negotiate`` header for ``HTTP/<host>``, the service principal Hadoop's HTTP servers use (the host as
written in the address, not canonicalized here). A failure raises :class:`KerberosAuthError`, whose
message starts with the cause and names the principal, the service and what to change; there is no
fallback to simple authentication.

Delegation tokens: processes that hold no Kerberos credentials (Spark executors, TF nodes) authenticate
to WebHDFS with a delegation token that the driver obtained; :func:`use_delegation_token` gives it to this
process (in memory only: it is never written to a file, an environment variable or a command line), and
every WebHDFS request of the process then carries ``delegation=<token>`` instead of SPNEGO. A driver on YARN,
which has no Python Kerberos login, gets the token of the hook that submitted it in its environment
(:data:`SUBMITTED_TOKEN_ENV`, set through ``spark.yarn.appMasterEnv``); :func:`take_submitted_token` moves it
from there into the process's memory before anything else starts.

Credentials in URLs: a token travels in request URLs, which ``requests``/``urllib3`` quote in their exceptions
and DEBUG logs. :func:`redact_credentials` removes ``delegation=``/``token=`` values, URL passwords and this
process's tokens from a text (every WebHDFS error is made with it), and :func:`install_log_redaction` applies
it to every log record of the process, whichever logger or handler carries it.
"""

from __future__ import annotations

import base64
import logging
import os
import re
import threading
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from airflow_tfos.shared.errors import KerberosAuthError

__all__ = [
    "KerberosAuthError",
    "KerberosLogin",
    "SpnegoAuth",
    "default_login",
    "delegation_token",
    "install_log_redaction",
    "keep_out_of_logs",
    "negotiate_header",
    "redact_credentials",
    "redacted_error",
    "set_default_login",
    "take_submitted_token",
    "use_delegation_token",
]

#: The driver's environment variable holding the WebHDFS delegation token the submitting hook obtained (its
#: name holds "token", so that Spark redacts the ``spark.yarn.appMasterEnv.`` setting in its UI and event log).
SUBMITTED_TOKEN_ENV = "AIRFLOW_TFOS_SUBMITTED_WEBHDFS_TOKEN"

#: WebHDFS operations that must be authenticated by Kerberos, never by a delegation token.
TOKEN_OPS = frozenset({"GETDELEGATIONTOKEN", "RENEWDELEGATIONTOKEN", "CANCELDELEGATIONTOKEN"})


@dataclass(frozen=True)
class KerberosLogin:
    """Who authenticates with Kerberos.

    :param principal: the client principal (``alice@REALM`` or ``svc/host@REALM``); None: whoever the
        ticket cache holds.
    :param keytab: a keytab holding ``principal``'s key; None: use the ticket cache (``kinit``).
    """

    principal: str | None = None
    keytab: str | None = None
    _ccache: str = field(default_factory=lambda: f"MEMORY:airflow-tfos-{uuid.uuid4().hex}", compare=False, repr=False)

    def __post_init__(self):
        if self.keytab and not self.principal:
            raise KerberosAuthError("a keytab was given without a principal: set the principal the keytab holds")

    def describe(self) -> str:
        """Who, and from where: ``alice@REALM (keytab /etc/k.keytab)``, or the ticket cache looked in."""
        if self.keytab:
            return f"{self.principal} (keytab {self.keytab})"
        cache = os.environ.get("KRB5CCNAME") or "the default ticket cache"
        return f"{self.principal or 'the principal of the ticket cache'} (ticket cache {cache})"

    def credentials(self, service: str | None = None):
        """``gssapi.Credentials`` for initiating (to ``service``, named in errors); raise :class:`KerberosAuthError`."""
        import gssapi

        if self.keytab and not os.access(self.keytab, os.R_OK):
            raise KerberosAuthError(
                f"the keytab given for {self.principal} cannot be read by this process (missing, or its permissions): "
                f"fix the 'keytab' setting or the file's owner/mode (authenticating {self.principal} to "
                f"{service or 'a Hadoop service'})"
            )
        name = gssapi.Name(self.principal, gssapi.NameType.kerberos_principal) if self.principal else None
        store = {"client_keytab": self.keytab, "ccache": self._ccache} if self.keytab else None
        try:
            return gssapi.Credentials(name=name, usage="initiate", store=store)
        except gssapi.exceptions.GSSError as exc:
            raise _error(self, service, exc) from exc


_lock = threading.Lock()
_default: KerberosLogin | None = None
_token: str | None = None


def set_default_login(login: KerberosLogin | None) -> None:
    """Make ``login`` the Kerberos identity of this process's clients that were given none (None: the ticket cache)."""
    global _default
    with _lock:
        _default = login


def default_login() -> KerberosLogin:
    return _default or KerberosLogin()


#: A credential in a URL: the value of a ``delegation=`` or ``token=`` query parameter (also percent-encoded,
#: as in a URL inside another), a password in ``scheme://user:password@host``, a token in a WebHDFS answer.
#: User names (``user.name=``, ``doas=``) are kept: they say who asked, and prove nothing.
_CREDENTIAL_PATTERNS = (
    (re.compile(r"(?i)((?:[?&;]|%26|%3F)(?:delegation|token)(?:=|%3D))[^&;\s'\"<>()\[\]{},]+"), r"\1<redacted>"),
    (re.compile(r"(?i)(\b[a-z][a-z0-9+.-]*://[^/\s:@'\"<>]+:)[^/\s@'\"<>]+@"), r"\1<redacted>@"),
    (re.compile(r'(?i)("urlString"\s*:\s*")[^"]+'), r"\1<redacted>"),
)
#: The delegation tokens this process holds or handed out: replaced wherever they appear, in URLs or not.
_secrets: set[str] = set()


def redact_credentials(text: str) -> str:
    """``text`` without the credentials a URL can carry (``delegation=``, ``token=``, ``user:password@``) and
    without this process's delegation tokens (:func:`keep_out_of_logs`); the rest of the URL stays, to say
    where a request went."""
    for secret in tuple(_secrets):
        if secret in text:
            text = text.replace(secret, "<delegation token>")
    if "=" in text or "@" in text or "urlString" in text:
        for pattern, replacement in _CREDENTIAL_PATTERNS:
            text = pattern.sub(replacement, text)
    return text


def redacted_error(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` with :func:`redact_credentials` applied (what an error we raise may quote)."""
    return redact_credentials(f"{type(exc).__name__}: {exc}")


_installed_factory: Any = None


def _redacting_factory(previous: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: logging reports it when the record is handled
            return record
        clean = redact_credentials(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_info[1] is not None:
            text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            clean = redact_credentials(text)
            if clean != text:  # handlers print the redacted traceback text, not the exception again
                record.exc_text, record.exc_info = clean, None
        return record

    return make_record


def install_log_redaction() -> None:
    """Redact :func:`redact_credentials`'s credentials from every log record this process makes, whatever its
    logger or handler (``urllib3`` logs request URLs at DEBUG, exceptions quote them): the record factory
    rewrites a record's message, and its traceback, when they hold one. Installed once per process."""
    global _installed_factory
    with _lock:
        current = logging.getLogRecordFactory()
        if current is _installed_factory:
            return
        _installed_factory = _redacting_factory(current)
        logging.setLogRecordFactory(_installed_factory)


def keep_out_of_logs(token: str) -> None:
    """Never let ``token`` reach a log record or an error of this process (:func:`redact_credentials`)."""
    with _lock:
        _secrets.add(token)
    install_log_redaction()


def use_delegation_token(token: str | None) -> None:
    """Authenticate every WebHDFS request of this process with ``token`` (None: with Kerberos again)."""
    global _token
    if token:
        keep_out_of_logs(token)
    with _lock:
        _token = token


def take_submitted_token(environ=None) -> bool:
    """Move the token of :data:`SUBMITTED_TOKEN_ENV` out of the environment (``os.environ``) into this process's
    memory (:func:`use_delegation_token`), so that no process started later inherits it; False when there is none.
    """
    token = (os.environ if environ is None else environ).pop(SUBMITTED_TOKEN_ENV, "").strip()
    if not token:
        return False
    use_delegation_token(token)
    return True


def delegation_token() -> str | None:
    """The delegation token of this process, if it was given one."""
    return _token


def _classify(message: str, login: KerberosLogin) -> str:
    lower = message.lower()
    if "clock skew" in lower:
        return (
            "clock skew too great: this machine's clock differs from the KDC's (or the server's) by more than the "
            "realm allows (clockskew, 300 s by default); synchronize the clocks (NTP)"
        )
    no_ticket = ("no kerberos credentials", "no credentials cache", "credentials cache file", "can't find client")
    if login.keytab and any(s in lower for s in no_ticket):  # MIT found no key of the principal in the keytab
        return (
            f"the keytab does not hold the current key of {login.describe()} (it holds another principal's, or an "
            "older key version): export a fresh keytab for this principal (kadmin ktadd; klist -kt shows what it "
            "holds) and point 'keytab' at it, or fix 'principal'"
        )
    if any(s in lower for s in no_ticket):
        return (
            f"no Kerberos ticket for {login.describe()}: run kinit {login.principal or '<principal>'}, or give a "
            "principal and keytab (connection extras 'principal' and 'keytab')"
        )
    if any(
        s in lower
        for s in (
            "preauthentication failed",
            "key table entry not found",
            "password incorrect",
            "key version number",
            "decrypt integrity check failed",
            "no key table entry",
        )
    ):
        return (
            f"the keytab does not hold the current key of {login.describe()} (it is from an older key version, "
            "or of another principal): export a fresh keytab for this principal (kadmin ktadd) and point "
            "'keytab' at it"
        )
    if "not found in kerberos database" in lower and "client" in lower:
        return f"principal {login.describe()} is not known to the KDC: fix the principal's name or realm"
    if "server not found in kerberos database" in lower:
        return (
            "the service's principal is not known to the KDC: use the host name the service's principal was "
            "made for (HTTP/<host>) in the address, or ask the realm's admin to create it"
        )
    if "expired" in lower:
        return f"the ticket of {login.describe()} has expired: run kinit again, or give a keytab so tickets renew"
    if "cannot contact any kdc" in lower or "cannot find kdc" in lower:
        return "no KDC of the realm answered: check krb5.conf's [realms] kdc entries (KRB5_CONFIG) and the network"
    return f"Kerberos failed for {login.describe()}: check the ticket (klist) or the keytab"


def _error(login: KerberosLogin, service: str | None, exc: Exception) -> KerberosAuthError:
    message = exc.gen_message() if hasattr(exc, "gen_message") else str(exc)
    where = f" to {service}" if service else ""
    return KerberosAuthError(
        f"{_classify(message, login)} (authenticating {login.describe()}{where}; Kerberos said: {message})"
    )


def negotiate_header(host: str, login: KerberosLogin | None = None) -> str:
    """``Negotiate <token>`` authenticating ``login`` (default: :func:`default_login`) to ``HTTP/<host>``."""
    import gssapi

    login = login or default_login()
    service = f"HTTP/{host}"
    creds = login.credentials(service)
    try:
        context = gssapi.SecurityContext(
            name=gssapi.Name(f"HTTP@{host}", gssapi.NameType.hostbased_service),
            creds=creds,
            usage="initiate",
            mech=gssapi.MechType.kerberos,
            flags=gssapi.RequirementFlag.out_of_sequence_detection,
        )
        token = context.step()
    except gssapi.exceptions.GSSError as exc:
        raise _error(login, service, exc) from exc
    return "Negotiate " + base64.b64encode(token or b"").decode()


class SpnegoAuth:
    """A ``requests`` auth for WebHDFS: the process's delegation token when it has one, else SPNEGO.

    Requests that already carry ``delegation=`` (the datanode's side of a redirect) are left alone; the
    token operations always use SPNEGO.

    :param login: who authenticates (default: :func:`default_login` at each request).
    :param use_token: whether the process's delegation token (:func:`use_delegation_token`) is used.
    """

    def __init__(self, login: KerberosLogin | None = None, *, use_token: bool = True):
        self.login = login
        self.use_token = use_token

    def __call__(self, request):
        parts = urlsplit(request.url)
        query = parse_qs(parts.query)
        if "delegation" in query:
            return request
        op = (query.get("op") or [""])[-1].upper()
        token = delegation_token() if self.use_token and op not in TOKEN_OPS else None
        if token:
            request.prepare_url(request.url, {"delegation": token})
        else:
            request.headers["Authorization"] = negotiate_header(parts.hostname or "", self.login)
        return request
