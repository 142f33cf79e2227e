"""TensorFlowOnSpark's ``TFManager`` module: not available here, with what to use instead.

TFoS kept a ``multiprocessing`` manager per executor whose queues carried the fed rows (``input``), the
inference results (``output``) and errors. Here the rows are spilled to the executor's disk and read
through ``TFNode.DataFeed(ctx.mgr)``; ``ctx.mgr`` is that feed's handle, not a manager with queues.
"""

from __future__ import annotations

_INSTEAD = (
    "read the fed rows with TFNode.DataFeed(ctx.mgr) (or ctx.get_data_feed()) and return inference results "
    "with DataFeed.batch_results; errors in map_fun reach the driver by themselves"
)


class TFManager:
    """Stands for TFoS's manager class so that imports work; it cannot be started or connected to."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"TFManager is not available in airflow-tfos: {_INSTEAD}")


def start(authkey, queues, mode="local"):
    raise NotImplementedError(f"TFManager.start is not available in airflow-tfos: {_INSTEAD}")


def connect(address, authkey):
    raise NotImplementedError(f"TFManager.connect is not available in airflow-tfos: {_INSTEAD}")
