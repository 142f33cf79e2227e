"""The HDFS delegation token YARN gave this container: read from Hadoop's token file, for WebHDFS.

On a secure YARN cluster spark-submit obtains HDFS delegation tokens for the application (with ``--principal``
and ``--keytab``, or the submitting user's ticket, also for a ``--proxy-user``) and puts them into the
containers' launch context. The ResourceManager renews them while the application lives and cancels them when
it ends (their renewer is the ResourceManager). Each container finds them in the file that
``HADOOP_TOKEN_FILE_LOCATION`` names (``container_tokens`` in its working directory, readable by the
application's user only), in Hadoop's token storage format.

The NameNode's WebHDFS takes such a token as ``delegation=`` (:meth:`HadoopToken.url_string`, Hadoop's own
``Token.encodeToUrlString``): a driver on YARN, which has no Python Kerberos login, reaches the run directory
with it and lends it to the TF nodes, and nobody outside YARN has to renew or cancel anything. The token never
travels in an environment variable or a launch script (the file is YARN's own place for it).

Only the ``WRITABLE`` serialization (version 0) is read, the one Spark and YARN write; the token's identifier
(owner, renewer, dates, sequence number: nothing secret) is decoded for the logs.
"""

from __future__ import annotations

import base64
import io
import os
from dataclasses import dataclass

from airflow_tfos.shared.errors import TokenFileError

#: The environment variable naming the container's token file (set by the NodeManager).
TOKEN_FILE_ENV = "HADOOP_TOKEN_FILE_LOCATION"
#: The kind of the tokens HDFS's NameNode issues over RPC (WebHDFS ones say ``WEBHDFS delegation``).
HDFS_TOKEN_KIND = "HDFS_DELEGATION_TOKEN"
_MAGIC = b"HDTS"


def _vlong(stream: io.BytesIO) -> int:
    """Hadoop's ``WritableUtils.readVLong``."""
    first = stream.read(1)
    if not first:
        raise EOFError("the file ends inside a number")
    value = int.from_bytes(first, "big", signed=True)
    if value >= -112:
        return value
    size = (-120 - value) if value < -120 else (-112 - value)  # the bytes after this one
    raw = stream.read(size)
    if len(raw) != size:
        raise EOFError("the file ends inside a number")
    number = int.from_bytes(raw, "big")
    return ~number if value < -120 else number


def _bytes(stream: io.BytesIO) -> bytes:
    size = _vlong(stream)
    if size < 0:
        raise ValueError(f"a negative length ({size})")
    raw = stream.read(size)
    if len(raw) != size:
        raise EOFError("the file ends inside a field")
    return raw


def _text(stream: io.BytesIO) -> str:
    return _bytes(stream).decode("utf-8", errors="replace")


def _write_vlong(value: int) -> bytes:
    """Hadoop's ``WritableUtils.writeVLong`` (for :meth:`HadoopToken.url_string`)."""
    if -112 <= value <= 127:
        return value.to_bytes(1, "big", signed=True)
    size, marker = 0, -112
    if value < 0:
        value, marker = ~value, -120
    tmp = value
    while tmp:
        tmp >>= 8
        size += 1
    return (marker - size).to_bytes(1, "big", signed=True) + value.to_bytes(size, "big")


def _write_bytes(raw: bytes) -> bytes:
    return _write_vlong(len(raw)) + raw


@dataclass(frozen=True, repr=False)
class HadoopToken:
    """One token of the file: its alias, identifier, password (the secret), kind and service."""

    alias: str
    identifier: bytes
    password: bytes
    kind: str
    service: str

    def __repr__(self) -> str:  # never the password
        return f"HadoopToken(kind={self.kind!r}, service={self.service!r}, {self.describe()})"

    def url_string(self) -> str:
        """The token as WebHDFS's ``delegation=`` takes it (Hadoop's ``Token.encodeToUrlString``)."""
        raw = b"".join(
            [
                _write_bytes(self.identifier),
                _write_bytes(self.password),
                _write_bytes(self.kind.encode()),
                _write_bytes(self.service.encode()),
            ]
        )
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def fields(self) -> dict[str, object]:
        """What a delegation token's identifier says (owner, renewer, real user, issue and max dates in ms,
        sequence number, master key id); empty when it is not a delegation token's."""
        stream = io.BytesIO(self.identifier)
        try:
            version = stream.read(1)
            if version != b"\x00":
                return {}
            found: dict[str, object] = {"owner": _text(stream), "renewer": _text(stream), "real_user": _text(stream)}
            found.update(issue_ms=_vlong(stream), max_ms=_vlong(stream), sequence=_vlong(stream))
            found["master_key"] = _vlong(stream)
        except (EOFError, ValueError):
            return {}
        return found

    def describe(self) -> str:
        """Who owns the token and who renews it, for logs (nothing secret)."""
        f = self.fields()
        if not f:
            return "identifier not a delegation token's"
        return f"owner {f['owner']}, renewer {f['renewer'] or '(none)'}, sequence number {f['sequence']}"


def read_token_file(data: bytes, *, source: str = "the token file") -> list[HadoopToken]:
    """The tokens of a file in Hadoop's token storage format (``Credentials.writeTokenStorageToStream``)."""
    if data[:4] != _MAGIC:
        raise TokenFileError(f"{source} is not a Hadoop token file (it does not start with {_MAGIC!r})")
    if data[4:5] != b"\x00":
        raise TokenFileError(
            f"{source} is in Hadoop's token storage version {data[4:5].hex() or 'none'}; only version 00 "
            "(WRITABLE, what Spark and YARN write) is read here"
        )
    stream = io.BytesIO(data[5:])
    try:
        tokens = []
        for _ in range(_vlong(stream)):
            alias = _text(stream)
            identifier, password = _bytes(stream), _bytes(stream)
            tokens.append(HadoopToken(alias, identifier, password, _text(stream), _text(stream)))
    except (EOFError, ValueError) as exc:
        raise TokenFileError(f"{source} is cut short or damaged: {exc}") from None
    return tokens


def container_hdfs_token(environ=None) -> HadoopToken | None:
    """The HDFS delegation token of this YARN container (the first of the file that ``HADOOP_TOKEN_FILE_LOCATION``
    names whose kind is ``HDFS_DELEGATION_TOKEN``); None outside YARN, or when the file holds none."""
    path = (os.environ if environ is None else environ).get(TOKEN_FILE_ENV)
    if not path:
        return None
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    hdfs = [t for t in read_token_file(data, source=path) if t.kind == HDFS_TOKEN_KIND]
    return hdfs[0] if hdfs else None


def use_container_token(environ=None) -> HadoopToken | None:
    """Authenticate this process's WebHDFS requests with :func:`container_hdfs_token` (in memory,
    :func:`~airflow_tfos.shared.storage.kerberos.use_delegation_token`); return it, or None when there is none
    (or the file cannot be read: the process then goes on without, and says why in the error it meets)."""
    import logging

    from airflow_tfos.shared.storage.kerberos import use_delegation_token

    try:
        token = container_hdfs_token(environ)
    except TokenFileError as exc:
        logging.getLogger(__name__).warning("no HDFS delegation token from YARN: %s", exc)
        return None
    if token is not None:
        use_delegation_token(token.url_string())
        logging.getLogger("airflow_tfos.driver").info(
            "WebHDFS is reached with the application's HDFS delegation token from YARN (%s): the ResourceManager "
            "renews it while the application lives and cancels it when it ends",
            token.describe(),
        )
    return token
