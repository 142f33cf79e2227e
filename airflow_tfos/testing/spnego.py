"""SPNEGO for the emulators (:mod:`airflow_tfos.testing.webhdfs`, :mod:`airflow_tfos.testing.yarn`).

An :class:`SpnegoAcceptor` checks an ``Authorization: Negotiate <token>`` header with the service's keytab
through ``gssapi`` (MIT Kerberos does the cryptography: nothing is faked), and maps the client's principal to
a short user name as Hadoop's ``hadoop.security.auth_to_local`` ``DEFAULT`` rule does: the first component
of a principal of the default realm (``alice@REALM`` and ``alice/host@REALM`` are ``alice``); a principal
of another realm matches no rule and is refused.
"""

from __future__ import annotations

import base64
import threading

__all__ = ["SpnegoAcceptor", "Unauthenticated", "short_name"]

#: The header a Hadoop server answers an unauthenticated request with.
CHALLENGE = {"WWW-Authenticate": "Negotiate"}


class Unauthenticated(Exception):
    """The request carries no valid SPNEGO token (answered 401 with ``WWW-Authenticate: Negotiate``)."""


def short_name(principal: str, default_realm: str) -> str:
    """The user name of ``principal`` under Hadoop's ``DEFAULT`` auth_to_local rule; raise :class:`Unauthenticated`."""
    name, _, realm = principal.partition("@")
    if realm and realm != default_realm:
        raise Unauthenticated(
            f"No rules applied to {principal} (realm {realm} is not the default realm {default_realm})"
        )
    return name.split("/", 1)[0]


class SpnegoAcceptor:
    """Accept SPNEGO tokens with a service keytab.

    :param keytab: the keytab holding the service's key (``HTTP/<host>@REALM``).
    """

    def __init__(self, keytab: str):
        self.keytab = keytab
        self._lock = threading.Lock()
        self._creds = None

    def _credentials(self):
        import gssapi

        with self._lock:
            if self._creds is None:
                self._creds = gssapi.Credentials(usage="accept", store={"keytab": self.keytab})
            return self._creds

    @staticmethod
    def default_realm() -> str:
        import krb5

        return krb5.get_default_realm(krb5.init_context()).decode()

    def accept(self, authorization: str | None) -> tuple[str, str]:
        """``(principal, short user name)`` of a valid ``Negotiate`` header; raise :class:`Unauthenticated`."""
        import gssapi

        scheme, _, value = (authorization or "").partition(" ")
        if scheme.lower() != "negotiate" or not value.strip():
            raise Unauthenticated("Authentication required")
        try:
            token = base64.b64decode(value.strip(), validate=True)
        except ValueError as exc:
            raise Unauthenticated(f"malformed Negotiate token: {exc}") from exc
        try:
            context = gssapi.SecurityContext(creds=self._credentials(), usage="accept")
            context.step(token)
        except gssapi.exceptions.GSSError as exc:
            raise Unauthenticated(f"GSSException: {exc.gen_message()}") from exc
        if not context.complete:  # Kerberos completes in one step; anything else is not for us
            raise Unauthenticated("the Negotiate token did not complete a Kerberos authentication")
        principal = str(context.initiator_name)
        return principal, short_name(principal, self.default_realm())
