"""Several hosts on one machine: Linux network namespaces joined by a bridge, for multi-host tests.

Each host is a network namespace with its own address in one private /24 (by default 10.231.77.0/24:
the bridge's end holds no address, the namespaces have no default route and nothing is forwarded off the
bridge, so their traffic reaches only each other). Processes started on a host (:meth:`HostCluster.spawn`,
which runs ``ip netns exec``) are tracked and ended by process group at :meth:`HostCluster.stop`, as is
anything else still alive in the namespaces; then the namespaces, veths and bridge are deleted. Names
carry the creating process's pid (``tfh<pid>``), so a later start removes what a crashed run left
(:func:`sweep`) and never touches another live run's hosts::

    with HostCluster(["driver", "h1", "h2", "h3"]) as hosts:
        master = hosts.start_spark(master="driver", workers=["h1", "h2", "h3"])
        hosts.spawn("driver", ["python", "train.py", master], env={...})

Servers of this process (the WebHDFS and ResourceManager emulators) listen on a host with
:meth:`HostCluster.bind`: a network namespace is per thread in Linux, so a short-lived thread enters the
namespace, opens the listening socket there and leaves; the socket stays in that namespace.

Faults for drills: :meth:`~HostCluster.kill_host` (every process of a host at once), :meth:`~HostCluster.cut`
and :meth:`~HostCluster.mend` (a partition: the host's link down, its processes alive), and
:meth:`~HostCluster.delay` (``tc netem`` on the host's link), :meth:`~HostCluster.starve` (a host short of
CPU). Needs root (``ip netns add``).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil

log = logging.getLogger(__name__)

T = TypeVar("T")

NAME_PREFIX = "tfh"
DEFAULT_SUBNET = "10.231.77"
FIRST_HOST = 11
CLONE_NEWNET = 0x40000000
MASTER_PORT, MASTER_WEBUI_PORT, WORKER_WEBUI_PORT = 7077, 8080, 8081
#: The master's spark.worker.timeout: a worker host that stops answering loses its place after 15 to 30 s.
WORKER_TIMEOUT_SECS = 15


class HostsUnavailable(RuntimeError):
    """This machine cannot make network namespaces (not root, or ``ip netns add`` refused)."""


@dataclass(frozen=True)
class Host:
    """One emulated host: its name, its network namespace and its address."""

    name: str
    netns: str
    address: str
    veth: str  # the bridge's end, in the root namespace: down means the host is cut off


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _netns_pids(netns: str) -> list[int]:
    done = _ip("netns", "pids", netns, check=False)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def _kill_pids(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def sweep() -> list[str]:
    """Delete the namespaces and links that earlier runs of this module left, when their creator is gone.

    Only names with this module's prefix whose creating pid no longer lives are touched; returns them.
    """
    removed = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if name.startswith(NAME_PREFIX) and not _creator_alive(name):
            _kill_pids(_netns_pids(name))
            _ip("netns", "del", name, check=False)
            removed.append(name)
    links = json.loads(_ip("-j", "link", "show", check=False).stdout or "[]")
    for link in links:
        name = link.get("ifname", "")
        if name.startswith(NAME_PREFIX) and not _creator_alive(name):
            _ip("link", "del", name, check=False)
            removed.append(name)
    return removed


def _creator_alive(name: str) -> bool:
    digits = name[len(NAME_PREFIX) :].split("-", 1)[0].split("x", 1)[0]
    try:
        return psutil.pid_exists(int(digits, 16))
    except ValueError:
        return True  # not one of ours


class HostCluster:
    """Network namespaces joined by a bridge, one per host name, with tracked processes.

    :param names: the hosts' names (at most 10); the first gets ``<subnet>.11``, the next ``.12``, ...
    :param subnet: the first three octets of the private /24 (default ``10.231.77``).
    :param log_dir: where :meth:`spawn` writes each process's output (default: a new temporary directory).
    """

    def __init__(self, names: Sequence[str], *, subnet: str = DEFAULT_SUBNET, log_dir: str | None = None):
        if not names or len(set(names)) != len(names) or len(names) > 10:
            raise ValueError(f"names must be 1 to 10 distinct host names, got {list(names)}")
        self.names = list(names)
        self.subnet = subnet
        self.prefix = f"{NAME_PREFIX}{os.getpid():x}x{uuid.uuid4().hex[:3]}"  # <= 13 chars: link names fit 15
        self.bridge = f"{self.prefix}-b"
        self.hosts: dict[str, Host] = {
            name: Host(name, f"{self.prefix}-{i}", f"{subnet}.{FIRST_HOST + i}", f"{self.prefix}{i}")
            for i, name in enumerate(self.names)
        }
        if log_dir is None:
            import tempfile

            log_dir = tempfile.mkdtemp(prefix="hosts-")
        self.log_dir = Path(log_dir)
        self.processes: list[tuple[str, subprocess.Popen]] = []
        self._started = False

    # --- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> HostCluster:
        """Make the bridge, the namespaces and their links; raise :class:`HostsUnavailable` if refused."""
        if os.geteuid() != 0:
            raise HostsUnavailable("network namespaces need root (ip netns add); this process runs as a user")
        sweep()
        self._started = True
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
        except subprocess.CalledProcessError as exc:
            raise HostsUnavailable(f"cannot make a bridge ({exc.stderr.strip()})") from None
        try:
            _ip("link", "set", self.bridge, "up")
            for index, host in enumerate(self.hosts.values()):
                inner = f"{self.prefix}{index}i"
                _ip("netns", "add", host.netns)
                _ip("link", "add", host.veth, "type", "veth", "peer", "name", inner)
                _ip("link", "set", inner, "netns", host.netns)
                _ip("link", "set", host.veth, "master", self.bridge)
                _ip("link", "set", host.veth, "up")
                _ip("-n", host.netns, "link", "set", "lo", "up")
                _ip("-n", host.netns, "link", "set", inner, "name", "eth0")
                _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
                _ip("-n", host.netns, "link", "set", "eth0", "up")
        except subprocess.CalledProcessError as exc:
            self.stop()
            raise HostsUnavailable(f"cannot make the hosts: {' '.join(exc.cmd)}: {exc.stderr.strip()}") from None
        return self

    def stop(self) -> None:
        """End every process of the hosts (by process group, then anything left in the namespaces), and
        delete the namespaces, links and bridge. Safe to call twice."""
        if not self._started:
            return
        for _, process in self.processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for host in self.hosts.values():
            _kill_pids(_netns_pids(host.netns))
        for _, process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                log.warning("process %s did not end after SIGKILL", process.pid)
        deadline = time.monotonic() + 10
        for host in self.hosts.values():
            while _netns_pids(host.netns) and time.monotonic() < deadline:
                time.sleep(0.1)
            _ip("netns", "del", host.netns, check=False)
            _ip("link", "del", host.veth, check=False)
        _ip("link", "del", self.bridge, check=False)
        self._started = False

    def __enter__(self) -> HostCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # --- running things on a host ----------------------------------------------------------------------

    def address(self, name: str) -> str:
        return self.hosts[name].address

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        log_name: str | None = None,
        **kw: Any,
    ) -> subprocess.Popen:
        """Start ``argv`` on host ``name`` in a process group of its own; its output goes to ``log_dir``
        unless ``stdout`` is given. The process is ended at :meth:`stop`."""
        host = self.hosts[name]
        environment = dict(os.environ if env is None else env)
        environment.setdefault("SPARK_LOCAL_IP", host.address)
        if "stdout" not in kw:
            out = open(self.log_dir / f"{log_name or name}.log", "ab")  # noqa: SIM115 (closed below)
            kw.update(stdout=out, stderr=subprocess.STDOUT)
        else:
            out = None
        try:
            process = subprocess.Popen(
                ["ip", "netns", "exec", host.netns, *argv], env=environment, start_new_session=True, **kw
            )
        finally:
            if out is not None:
                out.close()
        self.processes.append((name, process))
        return process

    def run(self, name: str, argv: Sequence[str], *, timeout: float = 60, **kw: Any) -> subprocess.CompletedProcess:
        """Run ``argv`` on host ``name`` to its end (bounded by ``timeout``)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.hosts[name].netns, *argv],
            timeout=timeout,
            capture_output=True,
            text=True,
            **kw,
        )

    def call_in(self, name: str, fn: Callable[[], T]) -> T:
        """Call ``fn`` in a thread that entered host ``name``'s network namespace; sockets it opens stay there."""
        result: dict[str, Any] = {}

        def enter_and_call() -> None:
            try:
                with open(f"/var/run/netns/{self.hosts[name].netns}") as ns:
                    if ctypes.CDLL(None, use_errno=True).setns(ns.fileno(), CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into {self.hosts[name].netns} failed")
                result["value"] = fn()
            except BaseException as exc:  # handed to the caller
                result["error"] = exc

        thread = threading.Thread(target=enter_and_call, name=f"netns-{name}", daemon=True)
        thread.start()
        thread.join()
        if "error" in result:
            raise result["error"]
        return result["value"]

    def bind(self, address: str, make: Callable[[], T]) -> T:
        """Open a server (``make()``) listening on ``address``, inside the host that owns it (for the
        emulators' ``bind`` argument)."""
        [name] = [h.name for h in self.hosts.values() if h.address == address]
        return self.call_in(name, make)

    def pids(self, name: str) -> list[int]:
        """Every process alive in host ``name``'s network namespace."""
        return _netns_pids(self.hosts[name].netns)

    # --- Spark standalone ------------------------------------------------------------------------------

    def start_spark(
        self,
        *,
        master: str,
        workers: Sequence[str],
        cores: int = 1,
        memory: str = "1g",
        env: dict | None = None,
        worker_timeout_secs: int = WORKER_TIMEOUT_SECS,
    ) -> str:
        """Start a standalone master on host ``master`` and one worker on each of ``workers``, each bound to
        its host's address; return the master URL once every worker registered (within 120 s).

        ``worker_timeout_secs`` is the master's ``spark.worker.timeout``: how long a worker that does not
        answer (its host cut off) keeps its place, so the master may start an application's replacement
        executor there instead of on a spare host (Spark's default is 60 s)."""
        from pyspark.find_spark_home import _find_spark_home

        spark_class = os.path.join(_find_spark_home(), "bin", "spark-class")
        base = {**(env or os.environ), "SPARK_DAEMON_MEMORY": "256m"}
        address = self.address(master)
        url = f"spark://{address}:{MASTER_PORT}"
        self.spawn(
            master,
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", address, "--port", str(MASTER_PORT),
             "--webui-port", str(MASTER_WEBUI_PORT)],
            env={**base, "SPARK_LOCAL_IP": address,
                 "SPARK_MASTER_OPTS": f"-Dspark.worker.timeout={worker_timeout_secs}"},
            log_name=f"{master}-master",
        )  # fmt: skip
        for name in workers:
            self.spawn(
                name,
                [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", self.address(name),
                 "-c", str(cores), "-m", memory, "--webui-port", str(WORKER_WEBUI_PORT)],
                env={**base, "SPARK_LOCAL_IP": self.address(name)}, log_name=f"{name}-worker",
            )  # fmt: skip
        webui = f"http://{address}:{MASTER_WEBUI_PORT}"
        want = {self.address(name) for name in workers}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                alive = {w["host"] for w in self.master_state(master, webui)["workers"] if w.get("state") == "ALIVE"}
            except (OSError, ValueError):  # not up yet, or an answer cut short while it starts
                alive = set()
            if want <= alive:
                return url
            time.sleep(0.5)
        raise TimeoutError(
            f"Spark workers on {sorted(want)} did not register with {url} within 120 s (logs: {self.log_dir})"
        )

    def master_state(self, master: str, webui: str | None = None) -> dict:
        """The standalone master's ``/json/`` answer, asked from inside its host."""
        webui = webui or f"http://{self.address(master)}:{MASTER_WEBUI_PORT}"

        def ask() -> dict:
            with urllib.request.urlopen(f"{webui}/json/", timeout=5) as reply:
                return json.loads(reply.read())

        return self.call_in(master, ask)

    # --- faults ----------------------------------------------------------------------------------------

    def kill_host(self, name: str) -> list[int]:
        """Kill every process of host ``name`` at once (SIGKILL), as a host that dies; return their pids."""
        pids = self.pids(name)
        _kill_pids(pids)
        return pids

    def cut(self, name: str) -> None:
        """Partition host ``name`` away: its link to the bridge goes down; its processes live on."""
        _ip("link", "set", self.hosts[name].veth, "down")

    def mend(self, name: str) -> None:
        """Bring host ``name``'s link back up."""
        _ip("link", "set", self.hosts[name].veth, "up")

    def starve(self, name: str, share: float, stop: threading.Event, period: float = 0.2) -> threading.Thread:
        """Give every process of host ``name`` about ``share`` of the time it would get (a host starved of CPU):
        a thread stops them (SIGSTOP) for the rest of each ``period`` until ``stop`` is set, then resumes them."""
        if not 0 < share < 1:
            raise ValueError(f"share must be between 0 and 1, got {share}")

        def duty_cycle() -> None:
            try:
                while not stop.is_set():
                    pids = self.pids(name)
                    _kill_pids(pids, signal.SIGSTOP)
                    stop.wait(period * (1 - share))
                    _kill_pids(pids, signal.SIGCONT)
                    stop.wait(period * share)
            finally:
                _kill_pids(self.pids(name), signal.SIGCONT)

        thread = threading.Thread(target=duty_cycle, name=f"starve-{name}", daemon=True)
        thread.start()
        return thread

    def delay(self, name: str, millis: int | None) -> bool:
        """Delay every packet host ``name`` sends by ``millis`` ms (``tc netem``; None removes it); return
        False when this kernel has no netem."""
        netns = self.hosts[name].netns
        if millis is None:
            _ip("netns", "exec", netns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
            return True
        done = _ip("netns", "exec", netns, "tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay",
                   f"{millis}ms", check=False)  # fmt: skip
        return done.returncode == 0
