"""A throwaway MIT Kerberos realm: a real KDC on 127.0.0.1, its own ``krb5.conf``, principals and keytabs.

For tests of this package and of users' DAGs against Kerberized emulators (SPNEGO)::

    with KDC() as kdc:
        http_keytab = kdc.service_keytab("HTTP/127.0.0.1")
        alice_keytab = kdc.user_keytab("alice")
        with WebHDFSEmulator(kerberos_keytab=http_keytab) as hdfs:
            ...

Everything lives in one temporary directory (KDC database, stash, ``krb5.conf``, ``kdc.conf``, keytabs,
the KDC's log) that :meth:`KDC.stop` removes; the machine's own Kerberos configuration is never read or
written: :meth:`KDC.env` gives the variables (``KRB5_CONFIG``, ``KRB5_KDC_PROFILE``, ``KRB5RCACHEDIR``)
that point a process at the realm, and :meth:`KDC.activate` sets them in this process.

The realm's ``krb5.conf`` turns DNS off (``rdns = false``, ``dns_canonicalize_hostname = false``): a
client asks for ``HTTP/<host as written in the URL>``, so services on ``http://127.0.0.1:port`` are
``HTTP/127.0.0.1@REALM``. ``kdc_timesync = 0``: a client whose clock is off by more than ``clockskew``
seconds is refused, as on a cluster whose clocks drifted. Needs the Debian packages ``krb5-kdc``,
``krb5-admin-server`` and ``krb5-user`` (:func:`ensure_installed` installs them with apt-get when it can).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from airflow_tfos.testing.ports import free_port

__all__ = ["KDC", "KDCError", "ensure_installed"]

PACKAGES = ("krb5-kdc", "krb5-admin-server", "krb5-user")
TOOLS = ("krb5kdc", "kdb5_util", "kadmin.local", "kinit")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin")


class KDCError(RuntimeError):
    """The KDC could not be installed, created or started."""


def _tool(name: str) -> str | None:
    return shutil.which(name) or next((f"{d}/{name}" for d in SBIN if os.access(f"{d}/{name}", os.X_OK)), None)


def ensure_installed() -> None:
    """Install MIT Kerberos' KDC and client tools with apt-get when they are missing (as root or with sudo)."""
    if all(_tool(t) for t in TOOLS):
        return
    if shutil.which("apt-get") is None:
        raise KDCError(f"MIT Kerberos tools {TOOLS} are missing and apt-get is not here: install {PACKAGES}")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES],
    ):
        done = subprocess.run(sudo + cmd, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            raise KDCError(f"{' '.join(cmd)} failed ({done.stderr.strip()[-300:]}): install {PACKAGES} by hand")
    if not all(_tool(t) for t in TOOLS):
        raise KDCError(f"after installing {PACKAGES}, {TOOLS} are still not all on PATH")


class KDC:
    """One MIT KDC for a throwaway realm, in a temporary directory, listening on 127.0.0.1.

    :param realm: the realm's name.
    :param ticket_lifetime: lifetime of the tickets the KDC issues (a Kerberos duration, ``"10h"``, ``"5m"``).
    :param clockskew: seconds of clock difference the realm tolerates.
    """

    def __init__(self, *, realm: str = "TFOS.TEST", ticket_lifetime: str = "10h", clockskew: int = 300):
        self.realm = realm
        self.ticket_lifetime = ticket_lifetime
        self.clockskew = clockskew
        self.dir: Path | None = None
        self.port = 0
        self._process: subprocess.Popen | None = None
        self._saved_env: dict[str, str | None] | None = None

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> KDC:
        """Install the tools if needed, create the realm's database and start the KDC; return self."""
        if self._process is not None:
            return self
        ensure_installed()
        self.dir = Path(tempfile.mkdtemp(prefix="airflow-tfos-kdc-"))
        (self.dir / "rcache").mkdir()
        self.port = free_port(udp=True)  # the KDC listens on both
        self._write_config()
        try:
            self._run(_tool("kdb5_util"), "create", "-s", "-r", self.realm, "-P", os.urandom(16).hex())
            log = open(self.dir / "krb5kdc.out", "wb")  # noqa: SIM115 - the KDC's own output, kept with it
            self._process = subprocess.Popen(
                [_tool("krb5kdc"), "-n", "-r", self.realm, "-P", str(self.dir / "kdc.pid")],
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            log.close()
            self._wait_listening(15.0)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the KDC, restore the environment :meth:`activate` changed, remove the directory."""
        self.deactivate()
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
            self._process = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def __enter__(self) -> KDC:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # --- the environment -------------------------------------------------------------------------------

    def env(self) -> dict[str, str]:
        """The variables that point MIT Kerberos (and ``gssapi``) at this realm."""
        d = self._require()
        return {
            "KRB5_CONFIG": str(d / "krb5.conf"),
            "KRB5_KDC_PROFILE": str(d / "kdc.conf"),
            "KRB5RCACHEDIR": str(d / "rcache"),
        }

    def activate(self) -> None:
        """Set :meth:`env` in this process (undone by :meth:`deactivate` and :meth:`stop`)."""
        if self._saved_env is None:
            self._saved_env = {k: os.environ.get(k) for k in (*self.env(), "KRB5CCNAME")}
        os.environ.update(self.env())
        # No ticket cache of the machine's: tickets live where a test puts them.
        os.environ["KRB5CCNAME"] = f"FILE:{self._require() / 'ccache-none'}"

    def deactivate(self) -> None:
        if self._saved_env is None:
            return
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = None

    # --- principals ----------------------------------------------------------------------------------

    def principal(self, name: str) -> str:
        """``name@REALM`` (``name`` unchanged when it has a realm)."""
        return name if "@" in name else f"{name}@{self.realm}"

    def add_principal(self, name: str, *, password: str | None = None) -> str:
        """Create ``name`` (random key, or ``password``); return the full principal."""
        how = f"-pw {password}" if password is not None else "-randkey"
        self.kadmin(f"addprinc {how} {self.principal(name)}")
        return self.principal(name)

    def keytab(self, name: str, *, create: bool = True) -> str:
        """A keytab file holding ``name``'s key (the principal is created first unless ``create`` is False).

        Exporting a keytab gives the principal a new random key: keytabs exported earlier stop working.
        """
        path = self._require() / f"{name.replace('/', '_').replace('@', '_')}.keytab"
        if create:
            self.add_principal(name)
        self.kadmin(f"ktadd -k {path} {self.principal(name)}")
        os.chmod(path, 0o600)
        return str(path)

    service_keytab = keytab
    user_keytab = keytab

    def shared_keytab(self, filename: str, *names: str) -> str:
        """One keytab holding the current keys of several principals (each created when missing).

        Unlike :meth:`keytab`, no key changes: keytabs exported earlier for the same principals keep working.
        """
        path = self._require() / filename
        known = set(self.kadmin("listprincs").split())
        for name in names:
            if self.principal(name) not in known:
                self.add_principal(name)
            self.kadmin(f"ktadd -k {path} -norandkey {self.principal(name)}")
        os.chmod(path, 0o600)
        return str(path)

    def kinit(self, name: str, keytab: str, ccache: str) -> None:
        """Get ``name``'s ticket from ``keytab`` into ``ccache`` (``FILE:/path``)."""
        self._run(_tool("kinit"), "-k", "-t", keytab, "-c", ccache, self.principal(name))

    def kadmin(self, query: str) -> str:
        """Run one ``kadmin.local`` query against the realm's database; return its output."""
        return self._run(_tool("kadmin.local"), "-r", self.realm, "-q", query)

    # --- internals -------------------------------------------------------------------------------------

    def _require(self) -> Path:
        if self.dir is None:
            raise KDCError("the KDC is not started: call start() or use it as a context manager")
        return self.dir

    def _run(self, *cmd: str | None) -> str:
        done = subprocess.run(
            [str(c) for c in cmd], env={**os.environ, **self.env()}, capture_output=True, text=True, timeout=60
        )
        if done.returncode != 0:
            raise KDCError(f"{' '.join(str(c) for c in cmd[:2])} failed: {(done.stderr or done.stdout).strip()}")
        return done.stdout

    def _write_config(self) -> None:
        d, realm, port = self._require(), self.realm, self.port
        (d / "krb5.conf").write_text(
            "[libdefaults]\n"
            f"  default_realm = {realm}\n"
            "  dns_lookup_kdc = false\n  dns_lookup_realm = false\n"
            "  rdns = false\n  dns_canonicalize_hostname = false\n"
            "  kdc_timesync = 0\n"
            f"  clockskew = {self.clockskew}\n"
            f"  ticket_lifetime = {self.ticket_lifetime}\n"
            "  udp_preference_limit = 1\n"
            "  forwardable = false\n"
            "[realms]\n"
            f"  {realm} = {{\n    kdc = 127.0.0.1:{port}\n  }}\n"
            "[domain_realm]\n"
            f"  127.0.0.1 = {realm}\n  localhost = {realm}\n"
        )
        (d / "kdc.conf").write_text(
            "[kdcdefaults]\n"
            f"  kdc_listen = 127.0.0.1:{port}\n  kdc_tcp_listen = 127.0.0.1:{port}\n"
            "[realms]\n"
            f"  {realm} = {{\n"
            f"    database_name = {d / 'principal'}\n"
            f"    key_stash_file = {d / 'stash'}\n"
            f"    acl_file = {d / 'kadm5.acl'}\n"
            f"    max_life = {self.ticket_lifetime}\n"
            "    supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n"
            f"    kdc_listen = 127.0.0.1:{port}\n    kdc_tcp_listen = 127.0.0.1:{port}\n"
            "  }\n"
            "[logging]\n"
            f"  kdc = FILE:{d / 'kdc.log'}\n"
        )
        (d / "kadm5.acl").write_text("")

    def _wait_listening(self, within: float) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                output = (self._require() / "krb5kdc.out").read_text(errors="replace")[-500:]
                raise KDCError(f"krb5kdc exited with code {self._process.returncode}: {output}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise KDCError(f"krb5kdc did not listen on 127.0.0.1:{self.port} within {within:.0f} s")
