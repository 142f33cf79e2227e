"""Hadoop's own configuration files: where HDFS's namenodes and YARN's ResourceManagers are, as every Hadoop
tool (spark-submit included) reads it.

``HADOOP_CONF_DIR`` holds ``core-site.xml`` and ``hdfs-site.xml`` (and ``yarn-site.xml`` unless
``YARN_CONF_DIR`` names another folder). The files are read as Hadoop's ``Configuration`` reads them: in
that order, a property marked ``<final>true</final>`` is not overridden by a later file, and ``${name}``
in a value is replaced by the property ``name`` (or ``${env.NAME}`` by the environment variable,
``${user.name}`` by the OS user), up to 20 levels deep.

What they give:

- HDFS (:meth:`HadoopConf.webhdfs_config`): ``fs.defaultFS`` (``hdfs://<nameservice or host:port>``);
  for an HA nameservice (listed in ``dfs.nameservices``, or with ``dfs.ha.namenodes.<ns>``) the namenodes
  of ``dfs.ha.namenodes.<ns>`` and their ``dfs.namenode.http-address.<ns>.<nn>`` (or ``https-address``);
  without HA ``dfs.namenode.http-address`` (or ``https-address``; default port 9870/9871 on the host of
  ``fs.defaultFS``). ``dfs.http.policy`` ``HTTPS_ONLY`` picks the HTTPS addresses. Kerberos when
  ``hadoop.security.authentication`` is ``kerberos``.
- YARN (:meth:`HadoopConf.rm_addresses`): ``yarn.resourcemanager.webapp.address`` (or, with
  ``yarn.resourcemanager.ha.enabled``, one per id of ``yarn.resourcemanager.ha.rm-ids``, suffixed
  ``.<rm-id>``), falling back to ``yarn.resourcemanager.hostname[.<rm-id>]`` with port 8088;
  ``yarn.http.policy`` ``HTTPS_ONLY`` picks ``yarn.resourcemanager.webapp.https.address`` (port 8090).

Precedence, wherever the package needs the cluster's addresses: the Airflow connection's fields
(``webhdfs`` / ``yarn``), then ``AIRFLOW_TFOS_WEBHDFS`` (HDFS only), then these files. A property that is
missing or contradicts another raises :class:`HadoopConfError` naming the file and the property.

Pure Python (no Airflow), so that it can be tested on files alone.
"""

from __future__ import annotations

import getpass
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from airflow_tfos.hooks.errors import HadoopConfError
from airflow_tfos.shared.storage.webhdfs_config import DEFAULT_PORTS as WEBHDFS_PORTS
from airflow_tfos.shared.storage.webhdfs_config import WebHDFSConfig

HADOOP_CONF_ENV = "HADOOP_CONF_DIR"
YARN_CONF_ENV = "YARN_CONF_DIR"
#: The files read, in Hadoop's order.
SITE_FILES = ("core-site.xml", "hdfs-site.xml", "yarn-site.xml")
RM_PORTS = {"http": 8088, "https": 8090}
POLICIES = ("HTTP_ONLY", "HTTPS_ONLY", "HTTP_AND_HTTPS")
MAX_SUBSTITUTIONS = 20
_VARIABLE = re.compile(r"\$\{([^}$\s]+)\}")


@dataclass(frozen=True)
class Property:
    """One property as read: its raw value, the file it came from, and whether it is final."""

    value: str
    source: str
    final: bool = False


def read_site_file(path: str | Path) -> dict[str, Property]:
    """Read one ``*-site.xml`` into ``{name: Property}`` (a later ``<property>`` of the same name wins, as in
    Hadoop, unless an earlier one is final).

    :param path: the file.
    """
    path = Path(path)
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise HadoopConfError(f"{path} is not valid XML ({exc}): fix or remove it") from exc
    except OSError as exc:
        raise HadoopConfError(f"cannot read {path}: {exc}") from exc
    properties: dict[str, Property] = {}
    for element in root.iter("property"):
        name = (element.findtext("name") or "").strip()
        if not name:
            raise HadoopConfError(f"{path}: a <property> has no <name>")
        value = element.findtext("value")
        if value is None:
            continue  # Hadoop skips a property without a value
        final = (element.findtext("final") or "").strip().lower() == "true"
        if name in properties and properties[name].final:
            continue
        properties[name] = Property(value.strip(), str(path), final)
    return properties


class HadoopConf:
    """The properties of a cluster's configuration files, merged in Hadoop's order.

    :param properties: ``{name: Property}``, usually from :meth:`load`.
    :param environ: the environment for ``${env.NAME}`` (default: this process's).
    """

    def __init__(self, properties: dict[str, Property], environ: dict[str, str] | None = None) -> None:
        self.properties = properties
        self.environ = dict(os.environ if environ is None else environ)

    @classmethod
    def load(cls, conf_dir: str | Path, yarn_conf_dir: str | Path | None = None, environ: dict[str, str] | None = None):
        """Read ``core-site.xml``, ``hdfs-site.xml`` of ``conf_dir`` and ``yarn-site.xml`` of ``yarn_conf_dir``
        (default ``conf_dir``); missing files are skipped, as Hadoop does.

        :param conf_dir: the ``HADOOP_CONF_DIR``.
        :param yarn_conf_dir: the ``YARN_CONF_DIR``, if another folder.
        :param environ: the environment for ``${env.NAME}``.
        """
        conf_dir = Path(conf_dir)
        if not conf_dir.is_dir():
            raise HadoopConfError(f"{HADOOP_CONF_ENV} names {conf_dir}, which is not a folder: fix or unset it")
        merged: dict[str, Property] = {}
        for name in SITE_FILES:
            folder = Path(yarn_conf_dir) if name == "yarn-site.xml" and yarn_conf_dir else conf_dir
            path = folder / name
            if not path.is_file():
                continue
            for key, prop in read_site_file(path).items():
                if key in merged and merged[key].final:
                    continue
                merged[key] = prop
        return cls(merged, environ)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> HadoopConf | None:
        """The files of ``HADOOP_CONF_DIR`` (and ``YARN_CONF_DIR``), or None when neither is set."""
        env = os.environ if environ is None else environ
        conf_dir, yarn_dir = env.get(HADOOP_CONF_ENV, "").strip(), env.get(YARN_CONF_ENV, "").strip()
        if not conf_dir and not yarn_dir:
            return None
        return cls.load(conf_dir or yarn_dir, yarn_dir or None, environ=dict(env))

    # --- values --------------------------------------------------------------------------------------

    def source(self, name: str, default_file: str = "core-site.xml") -> str:
        """The file that set ``name`` (or the file where it belongs, for errors about a missing property)."""
        return self.properties[name].source if name in self.properties else default_file

    def get(self, name: str, default: str | None = None) -> str | None:
        """The value of ``name`` with ``${...}`` replaced, or ``default`` when it is not set."""
        if name not in self.properties:
            return default
        value = self.properties[name].value
        for _ in range(MAX_SUBSTITUTIONS):
            match = _VARIABLE.search(value)
            if match is None:
                return value
            replacement = self._variable(match.group(1))
            if replacement is None:
                return value  # Hadoop leaves an unknown variable as it is
            value = value[: match.start()] + replacement + value[match.end() :]
        raise HadoopConfError(
            f"{self.source(name)}: property {name} still holds ${{...}} after {MAX_SUBSTITUTIONS} substitutions "
            f"({value!r}): a variable refers to itself"
        )

    def _variable(self, name: str) -> str | None:
        if name.startswith("env."):
            return self.environ.get(name[4:])
        if name in self.properties:
            return self.properties[name].value
        if name == "user.name":  # Java's system property: the OS user (HADOOP_USER_NAME does not change it)
            return getpass.getuser()
        return None

    def _policy(self, name: str, file: str) -> str:
        policy = (self.get(name) or "HTTP_ONLY").strip().upper()
        if policy not in POLICIES:
            raise HadoopConfError(f"{self.source(name, file)}: property {name} is {policy!r}; use one of {POLICIES}")
        return policy

    def _require(self, name: str, file: str, why: str) -> str:
        value = (self.get(name) or "").strip()
        if not value:
            raise HadoopConfError(f"{file}: property {name} is missing; {why}")
        return value

    # --- HDFS ----------------------------------------------------------------------------------------

    def default_fs(self) -> tuple[str, str] | None:
        """``(scheme, authority)`` of ``fs.defaultFS`` (or the old ``fs.default.name``), None when unset."""
        value = (self.get("fs.defaultFS") or self.get("fs.default.name") or "").strip()
        if not value:
            return None
        scheme, sep, rest = value.partition("://")
        if not sep:
            raise HadoopConfError(
                f"{self.source('fs.defaultFS')}: property fs.defaultFS is {value!r}, not a URI: write hdfs://<nameservice>"
            )
        return scheme.lower(), rest.split("/", 1)[0]

    def http_scheme(self) -> str:
        """``https`` when ``dfs.http.policy`` is ``HTTPS_ONLY``, else ``http``."""
        return "https" if self._policy("dfs.http.policy", "hdfs-site.xml") == "HTTPS_ONLY" else "http"

    def namenode_urls(self) -> tuple[str | None, tuple[str, ...]]:
        """``(nameservice, WebHDFS base URLs)`` of ``fs.defaultFS``'s namenodes; ``(None, ())`` when
        ``fs.defaultFS`` is not ``hdfs://``."""
        default = self.default_fs()
        if default is None or default[0] != "hdfs":
            return None, ()
        authority = default[1]
        if not authority:
            raise HadoopConfError(
                f"{self.source('fs.defaultFS')}: property fs.defaultFS names no nameservice or namenode: "
                "write hdfs://<nameservice> or hdfs://<host>:8020"
            )
        scheme = self.http_scheme()
        kind = "https-address" if scheme == "https" else "http-address"
        nameservices = [n.strip() for n in (self.get("dfs.nameservices") or "").split(",") if n.strip()]
        ha_key = f"dfs.ha.namenodes.{authority}"
        if authority in nameservices or self.get(ha_key):
            ids = [n.strip() for n in (self.get(ha_key) or "").split(",") if n.strip()]
            if not ids:
                raise HadoopConfError(
                    f"hdfs-site.xml: property {ha_key} is missing; fs.defaultFS ({self.source('fs.defaultFS')}) names "
                    f"nameservice {authority!r}, whose namenode ids it lists (e.g. nn1,nn2)"
                )
            urls = []
            for nn in ids:
                key = f"dfs.namenode.{kind}.{authority}.{nn}"
                address = self._require(
                    key,
                    self.source(ha_key, "hdfs-site.xml"),
                    f"namenode {nn!r} of nameservice {authority!r} ({ha_key}) needs its WebHDFS address "
                    f"(dfs.http.policy is {self._policy('dfs.http.policy', 'hdfs-site.xml')})",
                )
                urls.append(self._url(scheme, address, key, WEBHDFS_PORTS[scheme]))
            return authority, tuple(dict.fromkeys(urls))
        if ":" not in authority and nameservices:
            raise HadoopConfError(
                f"{self.source('fs.defaultFS')}: property fs.defaultFS names {authority!r}, which is neither a "
                f"host:port nor a nameservice of dfs.nameservices ({', '.join(nameservices)}, in "
                f"{self.source('dfs.nameservices', 'hdfs-site.xml')}): make them agree"
            )
        host = authority.split(":", 1)[0]
        key = f"dfs.namenode.{kind}"
        address = self.get(key) or f"{host}:{WEBHDFS_PORTS[scheme]}"
        return None, (self._url(scheme, address, key, WEBHDFS_PORTS[scheme], host=host),)

    def _url(self, scheme: str, address: str, key: str, default_port: int, host: str | None = None) -> str:
        address = address.strip().split("://", 1)[-1].rstrip("/")
        name, _, port = address.partition(":")
        if port and not port.isdigit():
            raise HadoopConfError(f"{self.source(key, 'hdfs-site.xml')}: property {key} has a bad port: {address!r}")
        if name in ("0.0.0.0", "") and host:
            name = host  # a server's bind-all address: the host is the one the client knows
        if name in ("0.0.0.0", ""):
            raise HadoopConfError(
                f"{self.source(key, 'hdfs-site.xml')}: property {key} is {address!r}, a bind-all address that names "
                "no host: set the host the clients reach"
            )
        return f"{scheme}://{name}:{port or default_port}"

    def auth(self) -> str:
        """``simple`` or ``kerberos``, from ``hadoop.security.authentication``."""
        value = (self.get("hadoop.security.authentication") or "simple").strip().lower()
        if value not in ("simple", "kerberos"):
            raise HadoopConfError(
                f"{self.source('hadoop.security.authentication')}: property hadoop.security.authentication is "
                f"{value!r}; this package speaks 'simple' or 'kerberos'"
            )
        return value

    def webhdfs_config(self, **settings) -> WebHDFSConfig | None:
        """A :class:`WebHDFSConfig` for ``fs.defaultFS``'s namenodes, or None when it is not ``hdfs://``.

        :param settings: more :class:`WebHDFSConfig` fields (user, timeout, ...).
        """
        nameservice, urls = self.namenode_urls()
        if not urls:
            return None
        settings.setdefault("origin", self.namenode_origin(nameservice))
        return WebHDFSConfig(namenodes=urls, nameservice=nameservice, auth=self.auth(), **settings)

    def namenode_origin(self, nameservice: str | None) -> str:
        """The file and property the namenodes' WebHDFS addresses came from, for errors."""
        kind = "https-address" if self.http_scheme() == "https" else "http-address"
        if nameservice:
            ha_key = f"dfs.ha.namenodes.{nameservice}"
            return f"{self.source(ha_key, 'hdfs-site.xml')} ({ha_key}, dfs.namenode.{kind}.{nameservice}.*)"
        key = f"dfs.namenode.{kind}"
        if self.get(key):
            return f"{self.source(key, 'hdfs-site.xml')} ({key})"
        return f"{self.source('fs.defaultFS')} (fs.defaultFS's host, WebHDFS's default port)"

    # --- YARN ----------------------------------------------------------------------------------------

    def rm_addresses(self) -> tuple[str, ...]:
        """The ResourceManagers' web base URLs (``http(s)://host:port``); empty when yarn-site.xml names none."""
        https = self._policy("yarn.http.policy", "yarn-site.xml") == "HTTPS_ONLY"
        scheme = "https" if https else "http"
        key = "yarn.resourcemanager.webapp.https.address" if https else "yarn.resourcemanager.webapp.address"
        ha = (self.get("yarn.resourcemanager.ha.enabled") or "false").strip().lower() == "true"
        ids = [i.strip() for i in (self.get("yarn.resourcemanager.ha.rm-ids") or "").split(",") if i.strip()]
        if ha and not ids:
            raise HadoopConfError(
                f"{self.source('yarn.resourcemanager.ha.enabled', 'yarn-site.xml')}: property "
                "yarn.resourcemanager.ha.rm-ids is missing, but yarn.resourcemanager.ha.enabled is true: list the "
                "RM ids (e.g. rm1,rm2)"
            )
        suffixes = [f".{i}" for i in ids] if ha else [""]
        urls = []
        for suffix in suffixes:
            address = self.get(key + suffix)
            hostname = self.get(f"yarn.resourcemanager.hostname{suffix}")
            if not address and not hostname:
                if not ha:
                    return ()
                raise HadoopConfError(
                    f"{self.source('yarn.resourcemanager.ha.rm-ids', 'yarn-site.xml')}: property {key}{suffix} is "
                    f"missing (nor is yarn.resourcemanager.hostname{suffix} set): RM {suffix[1:]!r} of "
                    "yarn.resourcemanager.ha.rm-ids needs its web address"
                )
            address = address or f"{hostname}:{RM_PORTS[scheme]}"
            urls.append(self._url(scheme, address, key + suffix, RM_PORTS[scheme], host=hostname))
        return tuple(dict.fromkeys(urls))


def hadoop_conf(environ: dict[str, str] | None = None) -> HadoopConf | None:
    """The configuration files ``HADOOP_CONF_DIR`` / ``YARN_CONF_DIR`` name, or None."""
    return HadoopConf.from_env(environ)
