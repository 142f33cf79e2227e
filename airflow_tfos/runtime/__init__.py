"""The Spark side of airflow-tfos: TF clusters inside Spark barrier stages.

Runs on the Spark driver and executors. Imports pyspark and (in the node processes) TensorFlow, and
never Airflow, which executors do not have.
"""

from __future__ import annotations

from airflow_tfos.runtime.cluster import ClusterConfigError, NodeRole, plan_roles
from airflow_tfos.runtime.context import NodeContext
from airflow_tfos.runtime.errors import (
    NodeFailedError,
    RunCancelledError,
    RunTimeoutError,
    TFoSRuntimeError,
)
from airflow_tfos.runtime.launcher import TFClusterRun, run
from airflow_tfos.runtime.progress import ProgressTracker, progress_callback

__all__ = [
    "ClusterConfigError",
    "NodeContext",
    "NodeFailedError",
    "NodeRole",
    "ProgressTracker",
    "RunCancelledError",
    "RunTimeoutError",
    "TFClusterRun",
    "TFoSRuntimeError",
    "plan_roles",
    "progress_callback",
    "run",
]
