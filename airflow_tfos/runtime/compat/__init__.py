"""TensorFlowOnSpark 2.2.5's API on top of airflow-tfos.

A TFoS program runs after changing only its import::

    from tensorflowonspark import TFCluster, TFNode, compat       # before
    from airflow_tfos.runtime.compat import TFCluster, TFNode, compat   # after
"""

from airflow_tfos.runtime.compat import TFCluster, TFNode, compat
from airflow_tfos.runtime.compat.TFCluster import InputMode

__all__ = ["InputMode", "TFCluster", "TFNode", "compat"]
