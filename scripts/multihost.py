"""A multi-host Spark cluster on this machine (network namespaces; run as root), for trying faults by hand.

    python scripts/multihost.py up      # build it, print the address plan, keep it until Ctrl-C
    python scripts/multihost.py down    # remove what an ``up`` that was killed (not interrupted) left

``up`` builds the hosts of ``airflow_tfos.testing.multihost`` (driver, nn, dn, rm, w1..w4 in 10.231.77.0/24),
starts a Spark standalone master on ``driver`` and a worker on each of w1..w4, the WebHDFS emulator's
namenode on ``nn`` and datanode on ``dn``, and the ResourceManager emulator on ``rm``, then waits. Run a
driver on the driver host with ``ip netns exec <netns> ...`` (the plan names each host's namespace), and
disturb a host with ``ip link set <veth> down`` or ``ip netns pids <netns> | xargs kill -9``. Ctrl-C (or
SIGTERM) ends every process of the hosts and deletes them.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from airflow_tfos.testing import hosts as hosts_module  # noqa: E402
from airflow_tfos.testing.multihost import MultiHostLab  # noqa: E402


def up() -> int:
    log_dir = tempfile.mkdtemp(prefix="multihost-")
    stop = {"now": False}

    def interrupted(signum, frame):
        # once: a second signal must not interrupt the cleanup that the first one started
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    with MultiHostLab(log_dir=log_dir) as lab:
        print(lab.describe())
        print(f"master: {lab.master}   daemons' logs: {log_dir}")
        print(f"AIRFLOW_TFOS_WEBHDFS='{json.dumps(json.loads(lab.hdfs.config(user='trainer').to_json()))}'")
        for name, host in lab.hosts.hosts.items():
            print(f"shell on {name}: ip netns exec {host.netns} bash   (cut off: ip link set {host.veth} down)")
        print("Ctrl-C ends the cluster", flush=True)
        try:
            while not stop["now"]:
                signal.pause()
        except KeyboardInterrupt:
            print("ending the cluster", flush=True)
    return 0


def down() -> int:
    removed = hosts_module.sweep()
    print(f"removed: {', '.join(removed)}" if removed else "nothing left by an earlier run")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down"])
    options = parser.parse_args()
    return up() if options.command == "up" else down()


if __name__ == "__main__":
    sys.exit(main())
