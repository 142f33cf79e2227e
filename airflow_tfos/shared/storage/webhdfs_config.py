"""HDFS over WebHDFS: the run directory and InputMode.TENSORFLOW files on ``webhdfs://``, ``swebhdfs://``, ``hdfs://``.

Pure Python (no Airflow, no Spark, no TensorFlow), so the Airflow side, the Spark driver and the TF
node processes all use it; the ``hdfs`` package (HdfsCLI) is imported only when a storage is made.

URIs and where the namenodes come from:

- ``webhdfs://host:port/path`` (``swebhdfs://`` for HTTPS): the URI names the namenode's WebHDFS
  address (default port 9870, or 9871 for HTTPS).
- ``hdfs://nameservice/path``: the namenodes come from the environment variable
  ``AIRFLOW_TFOS_WEBHDFS``, a JSON :class:`WebHDFSConfig` (``WebHDFSConfig.to_json()``). Its other
  settings (user, auth, TLS, timeouts, retries) also apply to ``webhdfs://`` URIs.

Writes are atomic where HDFS allows: :meth:`WebHDFSStorage.write_bytes` writes a temporary name in the
same directory, then renames it over the target with ``renameoptions=OVERWRITE`` (HDFS's rename2, what
Hadoop's own WebHdfsFileSystem uses), so a reader sees the old content or the new. Only against a
server that ignores ``renameoptions`` (the plain rename refuses an existing target) is the old file
deleted first: readers of the run directory then see, for the few milliseconds between the DELETE
and the RENAME, no file at all (RunDir reads that as "not written yet"), never a partial one.

Transient failures (HTTP 5xx, refused/reset/dropped connections, timeouts, answers that are not
WebHDFS JSON, ``StandbyException``/``RetriableException``) are retried on the next namenode, with
exponential backoff after each round, bounded by ``retries`` and ``deadline``. A missing path raises
:class:`FileNotFoundError`, a refused permission :class:`PermissionError` naming path, user and
namenode, and namenodes that cannot be reached :class:`WebHDFSUnavailableError` naming each one.
"""

from __future__ import annotations

import base64
import getpass
import json
import os
import posixpath
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from airflow_tfos.shared.errors import WebHDFSConfigError

#: The environment variable that carries the WebHDFS settings (JSON) to the driver and executors.
WEBHDFS_ENV = "AIRFLOW_TFOS_WEBHDFS"
#: How the settings travel in a YARN container's environment: YARN writes each variable into the container's
#: launch script between double quotes without escaping it, so the quotes of a JSON value are lost on the way
#: (``{namenodes: ...}``, seen on Hadoop 3.5). Base64 has no character the shell would take.
ENV_BASE64_PREFIX = "base64:"
ENV_VAR = WEBHDFS_ENV  # its former name
#: The URI schemes that go over WebHDFS.
HDFS_SCHEMES = ("hdfs", "webhdfs", "swebhdfs")
DEFAULT_PORTS = {"http": 9870, "https": 9871}


@dataclass(frozen=True)
class WebHDFSConfig:
    """How to reach HDFS over WebHDFS.

    :param namenodes: the namenodes' WebHDFS addresses, ``http(s)://host:port`` (several for HA: the
        standby answers ``StandbyException`` and the next one is tried), optionally with the path of a
        gateway in front of ``/webhdfs/v1`` (``https://knox:8443/gateway/default``).
    :param user: the HDFS user (simple auth: ``user.name``; Kerberos: the user to impersonate with
        ``doas``, if any). Default for simple auth: ``HADOOP_USER_NAME``, else the OS user.
    :param auth: ``"simple"`` or ``"kerberos"`` (SPNEGO with the process's Kerberos ticket).
    :param verify: for HTTPS, whether to verify the certificate, or the path of a CA bundle.
    :param timeout: seconds to wait for a connection and for each answer.
    :param retries: how many more rounds over all namenodes a transiently failing request gets.
    :param backoff: seconds to wait after the first failed round; doubled after each (at most 30 s).
    :param deadline: seconds one operation may spend in all, retries included.
    :param nameservice: the HA nameservice that ``hdfs://`` URIs name; other names are refused.
    :param origin: where the namenodes' addresses came from (a file and its property, a connection), named by
        the error when none of them answers.
    """

    namenodes: tuple[str, ...] = ()
    user: str | None = None
    auth: str = "simple"
    verify: bool | str = True
    timeout: float = 30.0
    retries: int = 3
    backoff: float = 0.5
    deadline: float = 120.0
    nameservice: str | None = None
    origin: str | None = None

    def __post_init__(self):
        namenodes = (self.namenodes,) if isinstance(self.namenodes, str) else tuple(self.namenodes)
        object.__setattr__(self, "namenodes", tuple(n.rstrip("/") for n in namenodes))
        for url in self.namenodes:
            scheme, _, rest = url.partition("://")
            if scheme not in ("http", "https") or not rest.split("/", 1)[0]:
                raise WebHDFSConfigError(
                    f"namenode {url!r} must look like http://host:port or https://host:port (the WebHDFS "
                    "address, dfs.namenode.http-address, not the RPC port 8020)"
                )
        if self.auth not in ("simple", "kerberos"):
            raise WebHDFSConfigError(f"auth must be 'simple' or 'kerberos', got {self.auth!r}")
        if self.timeout <= 0 or self.deadline <= 0:
            raise WebHDFSConfigError(
                f"timeout and deadline must be positive seconds, got {self.timeout}, {self.deadline}"
            )
        if self.retries < 0 or self.backoff < 0:
            raise WebHDFSConfigError(f"retries and backoff must be 0 or more, got {self.retries}, {self.backoff}")

    def to_json(self) -> str:
        """The settings as JSON (what ``AIRFLOW_TFOS_WEBHDFS`` holds); it holds no secret."""
        data = asdict(self)
        data["namenodes"] = list(self.namenodes)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | dict[str, Any]) -> WebHDFSConfig:
        """Read settings written by :meth:`to_json` (or a dict of them); unknown keys are an error."""
        try:
            data = json.loads(text) if isinstance(text, str) else dict(text)
        except ValueError as exc:
            raise WebHDFSConfigError(f"the WebHDFS settings are not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise WebHDFSConfigError("the WebHDFS settings must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise WebHDFSConfigError(f"unknown WebHDFS setting(s) {unknown}; known are {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> WebHDFSConfig | None:
        """The settings in ``AIRFLOW_TFOS_WEBHDFS``, or None when it is not set."""
        text = (os.environ if environ is None else environ).get(WEBHDFS_ENV, "").strip()
        if not text:
            return None
        if text.startswith(ENV_BASE64_PREFIX):
            try:
                text = base64.b64decode(text[len(ENV_BASE64_PREFIX) :], validate=True).decode()
            except (ValueError, UnicodeDecodeError) as exc:
                raise WebHDFSConfigError(f"{WEBHDFS_ENV}: {ENV_BASE64_PREFIX} is followed by no valid base64") from exc
        try:
            return cls.from_json(text)
        except WebHDFSConfigError as exc:
            raise WebHDFSConfigError(f"{WEBHDFS_ENV}: {exc}") from exc

    def effective_user(self) -> str | None:
        if self.auth == "kerberos":
            return self.user
        return self.user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


def env_value(config_json: str) -> str:
    """``config_json`` as the value of ``AIRFLOW_TFOS_WEBHDFS`` in an environment that a shell script sets (a
    YARN container's); :meth:`WebHDFSConfig.from_env` reads both forms."""
    return ENV_BASE64_PREFIX + base64.b64encode(config_json.encode()).decode()


def split_uri(uri: str) -> tuple[str, str, str]:
    """``(scheme, authority, absolute path)`` of a WebHDFS/HDFS URI or a plain absolute path."""
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        authority, _, path = rest.partition("/")
    else:
        scheme, authority, path = "", "", uri
    return scheme, authority, posixpath.normpath("/" + path.lstrip("/")) if path.strip("/") else "/"


def config_for_uri(uri: str, environ: dict[str, str] | None = None) -> WebHDFSConfig:
    """The settings for ``uri``: its own namenode for ``(s)webhdfs://``, ``AIRFLOW_TFOS_WEBHDFS`` for ``hdfs://``."""
    scheme, authority, _ = split_uri(uri)
    env = WebHDFSConfig.from_env(environ)
    if scheme in ("webhdfs", "swebhdfs"):
        if not authority:
            raise WebHDFSConfigError(f"{uri!r} names no namenode: write {scheme}://host:port/path")
        http = "https" if scheme == "swebhdfs" else "http"
        url = f"{http}://{authority}" if ":" in authority else f"{http}://{authority}:{DEFAULT_PORTS[http]}"
        if env is not None and url in env.namenodes:
            return env
        origin = f"the URI {scheme}://{authority}"
        if env is not None:
            return replace(env, namenodes=(url,), origin=origin)
        return WebHDFSConfig(namenodes=(url,), origin=origin)
    if scheme == "hdfs":
        if env is None or not env.namenodes:
            raise WebHDFSConfigError(
                f"{uri!r} is reached over WebHDFS, and no namenode is configured: set {WEBHDFS_ENV} to a WebHDFSConfig "
                "JSON naming the namenodes' http(s)://host:port WebHDFS addresses (the Airflow side derives it from "
                "the webhdfs connection), or use webhdfs://host:port/path"
            )
        if env.nameservice and authority and authority != env.nameservice:
            raise WebHDFSConfigError(
                f"{uri!r} names nameservice {authority!r}, but {WEBHDFS_ENV} configures {env.nameservice!r}: "
                "use the configured nameservice in the path, or change the configuration's nameservice"
            )
        return env
    raise WebHDFSConfigError(f"{uri!r} is not a WebHDFS URI: use webhdfs://, swebhdfs:// or hdfs://")


def add_config_option(parser) -> None:
    """Add ``--webhdfs-config JSON`` to an ``argparse`` parser (the driver's and the report's command lines)."""
    parser.add_argument(
        "--webhdfs-config",
        metavar="JSON",
        help=f"HDFS settings (a WebHDFSConfig JSON) for hdfs:// paths; default: ${WEBHDFS_ENV}",
    )


def use_config(text: str) -> None:
    """Make ``text`` (a WebHDFSConfig JSON) the settings of this process and of the processes it starts
    (through ``AIRFLOW_TFOS_WEBHDFS``); raise :class:`WebHDFSConfigError` when it cannot be used."""
    os.environ[WEBHDFS_ENV] = WebHDFSConfig.from_json(text).to_json()
