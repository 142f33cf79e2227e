"""TensorFlowOnSpark 2.2.5's API on top of airflow-tfos.

A TFoS program runs after changing only its import::

    from tensorflowonspark import TFCluster, TFNode, compat       # before
    from airflow_tfos.runtime.compat import TFCluster, TFNode, compat   # after

Modules of TFoS that have no counterpart here raise :class:`NotImplementedError` naming what to use.
"""

from airflow_tfos.runtime.compat import (
    TFCluster,
    TFManager,
    TFNode,
    TFParallel,
    TFSparkNode,
    compat,
    dfutil,
    pipeline,
)
from airflow_tfos.runtime.compat.TFCluster import InputMode

__all__ = ["InputMode", "TFCluster", "TFManager", "TFNode", "TFParallel", "TFSparkNode", "compat", "dfutil", "pipeline"]

_MISSING = {
    "reservation": "TFoS's reservation server is not used: the nodes find each other in a Spark barrier stage",
    "gpu_info": (
        "GPUs come from Spark's resource scheduling (spark.task.resource.gpu.amount), handed to each node "
        "as CUDA_VISIBLE_DEVICES and ctx.gpus; use compat.is_gpu_available() inside map_fun"
    ),
    "util": "TFoS's util helpers are not available: ctx.host and ctx.executor_id give a node's address and id",
    "marker": "TFoS's markers were internal to its feed: use TFNode.DataFeed, whose should_stop() ends a feed",
}


def __getattr__(name: str):
    if name in _MISSING:
        raise NotImplementedError(f"tensorflowonspark.{name} is not available in airflow-tfos: {_MISSING[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
