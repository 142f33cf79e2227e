"""What a running cluster listens on, checked against the list in docs/network.md.

A 2-node cluster with TensorBoard on the session's local cluster: every listening socket of the TF node
processes, of the Spark tasks that started them, and of their children is looked up with psutil and must be
one that the documentation lists, on the address it says.
"""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from airflow_tfos.runtime import TFClusterRun
from tests.conftest import REPO
from tests.runtime import programs
from tests.runtime.helpers import assert_no_node_processes, node_processes, read_records

pytestmark = pytest.mark.integration
ALL_INTERFACES = ("0.0.0.0", "::")


def listening(process: psutil.Process) -> list[tuple[str, int]]:
    return sorted(
        (c.laddr.ip, c.laddr.port) for c in process.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN
    )


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def test_nodes_listen_only_on_their_tf_port_and_tensorboard_on_the_executor_address(sc, tmp_path):
    stop = tmp_path / "stop"
    tf_run = TFClusterRun(
        sc, programs.serve_until_stopped, {"stop_file": str(stop)}, num_nodes=2, run_dir=str(tmp_path), tensorboard=True
    ).start()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(read_records(str(tmp_path), "serving")) < 2:
            time.sleep(0.25)
        serving = read_records(str(tmp_path), "serving")
        assert set(serving) == {"chief:0", "worker:0"}
        tb_url = serving["chief:0"]["tb"]
        assert tb_url
        while time.monotonic() < deadline and not answers(tb_url):  # TensorBoard binds once it has started
            time.sleep(0.25)
        nodes = {p.pid: p for p in node_processes(tf_run.run_id)}
        assert set(nodes) == {record["pid"] for record in serving.values()}
        seen, unexpected = {}, []
        tasks = {node.parent() for node in nodes.values()}  # the Spark (barrier) tasks' Python workers
        for process in [*nodes.values(), *tasks, *(c for t in tasks for c in t.children(recursive=True))]:
            if process.pid not in seen:
                seen[process.pid] = listening(process)
        tb_host, tb_port = tb_url.removeprefix("http://").rsplit(":", 1)
        for record in serving.values():  # TF's gRPC server: its port, on every interface (TF binds no host)
            assert [port for _, port in seen.pop(record["pid"])] == [record["port"]]
            assert all(ip in ALL_INTERFACES for ip, _ in listening(nodes[record["pid"]]))
        for pid, sockets in seen.items():
            command = psutil.Process(pid).cmdline()
            for ip, port in sockets:
                if (ip, port) == (tb_host, int(tb_port)):  # TensorBoard, on the executor's address
                    continue
                if ip == "127.0.0.1" and "tensorboard_data_server" in command[0]:  # TensorBoard's own, loopback
                    continue
                unexpected.append((command[:3], ip, port))
        assert (tb_host, int(tb_port)) in [s for sockets in seen.values() for s in sockets]
        assert unexpected == [], f"sockets docs/network.md does not list: {unexpected}"
    finally:
        stop.touch()
        tf_run.wait(120)
        assert_no_node_processes(tf_run.run_id)


def test_the_network_page_lists_what_the_test_above_finds():
    page = (REPO / "docs" / "network.md").read_text()
    needles = (
        "TF gRPC",
        "every interface",
        "TensorBoard",
        "executor's address",
        "data server",
        "Spark UI",
        "report route",
    )
    for needle in needles:
        assert needle in page, needle
    assert "docs/network.md" in (REPO / "README.md").read_text()
    assert Path(__file__).name in page  # the page names the test that checks it
