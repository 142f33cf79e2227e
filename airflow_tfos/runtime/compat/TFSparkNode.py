"""TensorFlowOnSpark's ``TFSparkNode`` module: the context that TFoS programs get as ``ctx``.

:class:`TFNodeContext` is the runtime's :class:`~airflow_tfos.runtime.program.context.NodeContext` with TFoS's
port reservation: under ``TFCluster.run(..., release_port=False)`` the node's TF port stays bound by
``ctx.tmp_socket`` until the program calls ``ctx.release_port()`` (or ``TFNode.release_port(ctx)``).
``ctx.mgr`` is the node's data feed, for ``TFNode.DataFeed(ctx.mgr)``; TFoS's manager calls on it
(``get_queue``, ``get``, ``set``) raise, naming what to use instead. The rest of TFoS's
``TFSparkNode`` (``run``, ``train``, ``inference``, ``shutdown``) was its internals: use ``TFCluster``.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from typing import Any

from airflow_tfos.runtime.compat.TFManager import _INSTEAD
from airflow_tfos.runtime.program.context import NodeContext

log = logging.getLogger(__name__)


class TFNodeContext(NodeContext):
    """A TF node's context as TFoS programs use it (see the module docstring)."""

    #: the socket holding the node's TF port, or None once released (or when the port was never held)
    tmp_socket: socket.socket | None = None

    @classmethod
    def of(cls, ctx: NodeContext, *, hold_port: bool) -> TFNodeContext:
        """``ctx`` as a TFoS context; ``hold_port``: bind ``ctx.port`` until :meth:`release_port`."""
        tfos_ctx = cls(**{f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)})
        if tfos_ctx.mgr is not None:
            tfos_ctx.mgr = FeedHandle(tfos_ctx.mgr)
        if hold_port and tfos_ctx.port:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("", tfos_ctx.port))
            tfos_ctx.tmp_socket = sock
        return tfos_ctx

    def release_port(self) -> None:
        """Close :attr:`tmp_socket`, so that TF's server can bind the port."""
        if self.tmp_socket is None:
            log.warning("release_port() called with no port held (TFCluster.run(release_port=True) frees it)")
            return
        log.info("releasing the reserved port %d", self.tmp_socket.getsockname()[1])
        self.tmp_socket.close()
        self.tmp_socket = None


class FeedHandle:
    """``ctx.mgr`` for TFoS programs: the node's data feed, refusing TFoS's manager calls by name."""

    def __init__(self, feed: Any):
        self._feed = feed

    def __getattr__(self, name: str) -> Any:
        return getattr(self._feed, name)

    def __reduce__(self):
        return FeedHandle, (self._feed,)

    def get_queue(self, qname):
        raise NotImplementedError(f"ctx.mgr.get_queue({qname!r}) is not available: {_INSTEAD}")

    def get(self, key):
        raise NotImplementedError(f"ctx.mgr.get({key!r}) is not available: {_INSTEAD}")

    def set(self, key, value):
        raise NotImplementedError(f"ctx.mgr.set({key!r}, ...) is not available: {_INSTEAD}")


class TFoSMain:
    """A TFoS ``map_fun`` as the runtime calls it: with a :class:`TFNodeContext` instead of its context.

    :param map_fun: the program's ``map_fun(args, ctx)``.
    :param hold_port: keep the node's port bound until the program releases it (``release_port=False``).
    """

    def __init__(self, map_fun, *, hold_port: bool):
        self.map_fun = map_fun
        self.hold_port = hold_port

    def __call__(self, args, ctx):
        tfos_ctx = TFNodeContext.of(ctx, hold_port=self.hold_port)
        try:
            return self.map_fun(args, tfos_ctx)
        finally:
            if tfos_ctx.tmp_socket is not None:
                tfos_ctx.tmp_socket.close()
