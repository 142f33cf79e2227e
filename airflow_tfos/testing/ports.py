"""Ports for the servers a test starts, picked where the kernel does not pick.

A port found free with ``bind(0)`` lies in the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``), which it hands to every ``bind(0)`` and outgoing connection on the host:
between the pick and the server's own bind (an api-server or a KDC takes seconds to start) a JVM of another
test session may be given it. :func:`free_port` picks at random from the ports just below that range
instead, which only explicit choices like this one reach.
"""

from __future__ import annotations

import random
import socket

#: how many ports below the ephemeral range to choose from
SPAN = 12000
_EPHEMERAL = "/proc/sys/net/ipv4/ip_local_port_range"
_random = random.SystemRandom()


def ephemeral_range() -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default when it cannot be read)."""
    try:
        with open(_EPHEMERAL) as f:
            low, high = map(int, f.read().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def _free(port: int, host: str, udp: bool) -> bool:
    kinds = (socket.SOCK_STREAM, socket.SOCK_DGRAM) if udp else (socket.SOCK_STREAM,)
    socks = []
    try:
        for kind in kinds:
            sock = socket.socket(socket.AF_INET, kind)
            socks.append(sock)
            sock.bind((host, port))
    except OSError:
        return False
    finally:
        for sock in socks:
            sock.close()
    return True


def free_port(host: str = "127.0.0.1", *, udp: bool = False) -> int:
    """A port nothing is bound to on ``host`` (for TCP, and UDP too with ``udp``), below the ephemeral range."""
    low = ephemeral_range()[0]
    first = max(1024, low - SPAN)
    if low - first >= 100:
        for _ in range(200):
            port = _random.randrange(first, low)
            if _free(port, host, udp):
                return port
    for _ in range(50):  # a range that leaves no room below: the kernel's choice, above it
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if _free(port, host, udp):
            return port
    raise OSError(f"no port free on {host} for TCP{' and UDP' if udp else ''}")
