"""Ports a node picks for servers that another process binds later: held, not just looked at.

A port found free with ``bind(0)`` and closed again is free for anyone: the kernel may hand it to the
next ``bind(0)`` or outgoing connection on the host (a Spark JVM, another executor's task) in the seconds
before the node's TF server or TensorBoard binds it, and that server then fails or, worse, the task's link
points at somebody else's service. A :class:`PortReservation` keeps the port bound (not listening) by the
Spark task until it is let go, so the kernel gives it to nobody else meanwhile:

- TensorBoard binds it *while* it is held: both sockets carry ``SO_REUSEPORT`` (TensorBoard's
  ``--reuse_port true``), which Linux allows for sockets of one user. The reservation is held for as
  long as TensorBoard runs.
- TensorFlow's gRPC server turns ``SO_REUSEPORT`` off, so the TF port is let go when the node's process
  gets its context, and is bound when the program builds its strategy or ``tf.distribute.Server``: the
  window is the program's own work before that (for most, building the strategy is the first thing), not
  the port exchange and the data's spill as before.
"""

from __future__ import annotations

import socket


class PortReservation:
    """A TCP port bound on every IPv4 interface by this process, not listening, until :meth:`release`.

    :param share: set ``SO_REUSEPORT``, so that a server of the same user that sets it too can bind the
        port while it is held (TensorBoard with ``--reuse_port true``). No ``SO_REUSEADDR``: a socket
        that sets only that one (a JVM's server socket) cannot take the port.
    """

    def __init__(self, share: bool = False):
        self._sock: socket.socket | None = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if share:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            self._sock.bind(("", 0))
        except BaseException:
            self._sock.close()
            raise
        self.port: int = self._sock.getsockname()[1]

    def release(self) -> None:
        """Let the port go (again: nothing)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    @property
    def held(self) -> bool:
        return self._sock is not None

    def __enter__(self) -> PortReservation:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"PortReservation({self.port}, {'held' if self.held else 'released'})"
