"""The ports a node holds for its servers: nobody else gets them meanwhile, and TensorBoard binds its own
beside the reservation (the race a bind-and-close pick left open: a JVM took TensorBoard's port)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from airflow_tfos.runtime.node.ports import PortReservation
from airflow_tfos.runtime.node.tensorboard import tensorboard_argv
from airflow_tfos.testing import ports
from airflow_tfos.testing.ports import SPAN, ephemeral_range, free_port


def _bind(port: int, *, reuseaddr: bool = False, reuseport: bool = False) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if reuseaddr:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind(("", port))
    except OSError:
        sock.close()
        raise
    return sock


@pytest.mark.parametrize("share", [False, True])
def test_a_held_port_is_given_to_nobody_else(share):
    with PortReservation(share=share) as held:
        for reuseaddr in (False, True):  # a server that asks for it by number (a JVM's sets SO_REUSEADDR)
            with pytest.raises(OSError, match="in use"):
                _bind(held.port, reuseaddr=reuseaddr)
        # nor what the kernel hands to bind(0): a smoke check (it hands out only some ports, so most runs
        # would not meet this one even unheld)
        for _ in range(3000):
            with _bind(0, reuseaddr=True) as other:
                assert other.getsockname()[1] != held.port
    with _bind(held.port) as after:  # let go: anyone's again
        assert after.getsockname()[1] == held.port
    assert not held.held and "released" in repr(held)


def test_a_shared_reservation_lets_a_reuseport_server_listen_and_serve():
    with PortReservation(share=True) as held, _bind(held.port, reuseport=True) as server:
        server.listen(1)
        with socket.create_connection(("127.0.0.1", held.port), timeout=5) as client:
            conn, _ = server.accept()
            client.sendall(b"x")
            assert conn.recv(1) == b"x"
            conn.close()
    with PortReservation() as plain, pytest.raises(OSError, match="in use"):  # unshared: not even reuseport
        _bind(plain.port, reuseport=True)


def test_tensorboard_binds_the_port_its_node_holds(tmp_path):
    pytest.importorskip("tensorboard")
    with PortReservation(share=True) as held:
        argv = tensorboard_argv(str(tmp_path), "127.0.0.1", held.port, reuse_port=True)
        board = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline, body = time.monotonic() + 90, None
            while body is None and time.monotonic() < deadline and board.poll() is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{held.port}/data/logdir", timeout=5) as resp:
                        body = resp.read().decode()
                except OSError:
                    time.sleep(0.5)
            if body is None:
                board.kill()
                pytest.fail(f"TensorBoard did not serve on its held port: {board.communicate()[1].decode()[-2000:]}")
            assert str(tmp_path) in body  # TensorBoard's own answer, naming the log directory it was given
        finally:
            board.terminate()
            board.wait(30)


def test_tensorboard_argv_asks_for_reuse_port_in_both_forms():
    local = tensorboard_argv("/logs/a", "h", 6006, python="py", reuse_port=True)
    assert local[-2:] == ["--reuse_port", "true"]
    remote = tensorboard_argv("hdfs://ns/logs/a", "h", 6006, python="py", reuse_port=True)
    assert remote[-1] == "--reuse-port" and remote[2] == "airflow_tfos.runtime.node.tensorboard"
    assert "--reuse_port" not in tensorboard_argv("/logs/a", "h", 6006, python=sys.executable)


def test_test_servers_get_ports_below_the_ephemeral_range_that_nothing_holds(monkeypatch):
    low = ephemeral_range()[0]
    picks = {free_port() for _ in range(50)}
    both = free_port(udp=True)
    if low - SPAN >= 1024:
        assert all(low - SPAN <= p < low for p in picks) and len(picks) > 40, picks  # random, below the range
    with _bind(both), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.bind(("127.0.0.1", both))  # free for TCP and UDP both
    # a port something holds is passed over: offer a held one first, then a free one
    with _bind(0) as busy:
        taken = busy.getsockname()[1]
        offered = iter([taken, *range(taken - 1, taken - 100, -1)])
        monkeypatch.setattr(ports, "ephemeral_range", lambda: (taken + 1, taken + 2))
        monkeypatch.setattr(ports._random, "randrange", lambda first, last: next(offered))
        got = free_port()
        assert got != taken and got < taken  # the held one was offered first and passed over
