"""A Spark standalone cluster of several hosts on one machine, with HDFS and YARN emulated across hosts.

The address plan (:class:`MultiHostLab`, on :class:`~airflow_tfos.testing.hosts.HostCluster`, subnet
10.231.77.0/24 by default):

========== ============== ==========================================================================
host       address        what runs there
========== ============== ==========================================================================
driver     10.231.77.11   Spark standalone master (7077, web UI 8080), the Spark driver, Airflow
nn         10.231.77.12   the WebHDFS emulator's namenode
dn         10.231.77.13   the WebHDFS emulator's datanode (every CREATE and OPEN redirect crosses hosts)
rm         10.231.77.14   the YARN ResourceManager emulator
w1 ... w4  10.231.77.15-  one Spark worker each (1 core); a 3-node run leaves one spare host, so it
           10.231.77.18   survives the loss of a host
========== ============== ==========================================================================

The emulators are served by the process that made the lab (their sockets live in the hosts'
namespaces), so a test can fault them and read what they hold; processes on the hosts reach them by
address. Nothing listens on, or connects through, the loopback of the hosts but what a process binds there
itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from airflow_tfos.testing.hosts import HostCluster
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from airflow_tfos.testing.yarn import ResourceManagerEmulator

DRIVER = "driver"
SERVICES = ("nn", "dn", "rm")  # the namenode, the datanode and the ResourceManager: no Spark worker there
WORKERS = ("w1", "w2", "w3", "w4")


class MultiHostLab:
    """Hosts, a Spark standalone cluster (master on ``driver``, one worker per worker host), a WebHDFS
    emulator (namenode on ``nn``, datanode on ``dn``) and a ResourceManager emulator (on ``rm``), so any
    worker host can die or be cut off while storage stays reachable.

    :param workers: the worker hosts' names.
    :param worker_memory: each Spark worker's memory.
    :param log_dir: where the daemons' and drivers' output goes (default: a temporary directory).
    """

    def __init__(self, *, workers: Sequence[str] = WORKERS, worker_memory: str = "1g", log_dir: str | None = None):
        if not workers or set(workers) & {DRIVER, *SERVICES}:
            raise ValueError(
                f"workers must name hosts other than {DRIVER} and {', '.join(SERVICES)}, got {list(workers)}"
            )
        self.workers = list(workers)
        self.hosts = HostCluster([DRIVER, *SERVICES, *self.workers], log_dir=log_dir)
        self.worker_memory = worker_memory
        self.master = ""
        self.hdfs: WebHDFSEmulator | None = None
        self.yarn: ResourceManagerEmulator | None = None

    def start(self) -> MultiHostLab:
        self.hosts.start()
        try:
            a = self.hosts.address
            self.hdfs = WebHDFSEmulator(namenode_host=a("nn"), datanode_host=a("dn"), bind=self.hosts.bind).start()
            self.yarn = ResourceManagerEmulator(host=a("rm"), bind=self.hosts.bind).start()
            self.master = self.hosts.start_spark(
                master=DRIVER, workers=self.workers, memory=self.worker_memory, env=self.env(DRIVER)
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """End every process of the hosts, the emulators, and delete the hosts."""
        try:
            self.hosts.stop()
        finally:
            for server in (self.yarn, self.hdfs):
                if server is not None:
                    server.stop()
            self.yarn = self.hdfs = None

    def __enter__(self) -> MultiHostLab:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def address(self, name: str) -> str:
        return self.hosts.address(name)

    def env(self, name: str, **extra: str) -> dict[str, str]:
        """The environment of a process on host ``name``: its ``SPARK_LOCAL_IP``, and the WebHDFS settings
        (``AIRFLOW_TFOS_WEBHDFS``) naming the emulator's namenode by its host address."""
        from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV

        env = {**os.environ, "SPARK_LOCAL_IP": self.address(name), **extra}
        if self.hdfs is not None:
            env[WEBHDFS_ENV] = self.hdfs.config(user="trainer").to_json()
        return env

    def describe(self) -> str:
        """The address plan, one line per host."""
        roles = {DRIVER: f"Spark master {self.master}, driver", "nn": "", "dn": "", "rm": ""}
        for name in self.workers:
            roles[name] = "Spark worker"
        if self.hdfs is not None and self.yarn is not None:
            roles["nn"] = f"WebHDFS namenode {self.hdfs.url}"
            roles["dn"] = f"WebHDFS datanode {self.hdfs.datanode_url}"
            roles["rm"] = f"YARN ResourceManager {self.yarn.url()}"
        return "\n".join(
            f"{name:7s} {host.address:14s} netns {host.netns:16s} {roles[name]}"
            for name, host in self.hosts.hosts.items()
        )
