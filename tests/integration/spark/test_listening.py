"""What a running cluster listens on, checked against the list in docs/network.md.

:func:`assert_listens_as_documented` looks up, with psutil, every listening socket of a live run's TF node
processes, of the Spark tasks that started them and of all their children, and fails on any socket the page
does not list, or on one bound to another address than it says. It runs inside the 2-node TensorBoard test
(tests/integration/spark/test_remote_tensorboard.py), while that cluster serves.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from tests.conftest import REPO
from tests.support.helpers import node_processes

ALL_INTERFACES = ("0.0.0.0", "::")


def listening(process: psutil.Process) -> list[tuple[str, int]]:
    return sorted(
        (c.laddr.ip, c.laddr.port) for c in process.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
    )


def assert_listens_as_documented(run_id: str, tf_ports: list[int], tensorboard_url: str | None) -> None:
    """Each node process listens on one of ``tf_ports`` (every interface: TF binds no host), TensorBoard on
    the executor's address, its data server on loopback; nothing else listens."""
    nodes = node_processes(run_id)
    assert len(nodes) == len(tf_ports)
    deadline = time.monotonic() + 60  # a node starts its server once its program builds the strategy
    while time.monotonic() < deadline and not all(listening(node) for node in nodes):
        time.sleep(0.25)
    node_ports = []
    for node in nodes:
        sockets = listening(node)
        assert len(sockets) == 1 and sockets[0][0] in ALL_INTERFACES, (node.pid, sockets)
        node_ports.append(sockets[0][1])
    assert sorted(node_ports) == sorted(tf_ports)
    tasks = {node.parent() for node in nodes}  # the Spark (barrier) tasks' Python workers
    others = {p.pid: p for t in tasks for p in [t, *t.children(recursive=True)] if p.pid not in {n.pid for n in nodes}}
    tb = None
    if tensorboard_url:
        host, port = tensorboard_url.removeprefix("http://").rsplit(":", 1)
        tb = (host, int(port))
    found, unexpected = set(), []
    for process in others.values():
        command = process.cmdline()
        for address in listening(process):
            if address == tb:
                found.add(address)
            elif address[0] == "127.0.0.1" and "tensorboard_data_server" in command[0]:
                continue  # TensorBoard's own data server, loopback only
            else:
                unexpected.append((command[:3], *address))
    assert unexpected == [], f"sockets docs/network.md does not list: {unexpected}"
    assert found == ({tb} if tb else set())


def test_the_network_page_lists_what_the_check_looks_for():
    page = (REPO / "docs" / "network.md").read_text()
    needles = (
        "TF gRPC",
        "every interface",
        "tf.data dispatcher",
        "tf.data worker",
        "TensorBoard",
        "executor's address",
        "data server",
        "Spark UI",
        "report route",
    )
    for needle in needles:
        assert needle in page, needle
    assert "docs/network.md" in (REPO / "README.md").read_text()
    assert Path(__file__).name in page  # the page names the check
