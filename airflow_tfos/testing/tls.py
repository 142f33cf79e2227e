"""A throwaway certificate for the emulators' HTTPS: self-signed for one IP address, valid for an hour."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from pathlib import Path

__all__ = ["self_signed"]


def self_signed(folder: str | Path, address: str = "127.0.0.1") -> tuple[ssl.SSLContext, str]:
    """Write ``cert.pem`` and ``key.pem`` for ``address`` into ``folder``; return a server-side context serving
    them, and the certificate's path (a client's CA bundle, e.g. a connection's ``verify`` extra)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = Path(folder)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, address)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(address))]), False)
        .sign(key, hashes.SHA256())
    )
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return context, str(folder / "cert.pem")
