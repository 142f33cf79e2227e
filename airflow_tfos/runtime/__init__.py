"""The Spark side of airflow-tfos: TF clusters inside Spark barrier stages.

Runs on the Spark driver and executors. Imports pyspark and (in the node processes) TensorFlow, and
never Airflow, which executors do not have. Its code is laid out by the process it runs in:

- :mod:`airflow_tfos.runtime.driver`: the Spark driver (the entry point spark-submit runs, the launcher of
  TF clusters and its watches, batch inference, the Spark ML stages);
- :mod:`airflow_tfos.runtime.node`: a barrier task on an executor (the cluster's layout, ports, the TF process);
- :mod:`airflow_tfos.runtime.program`: a TF node's own process (the context ``main_fun`` gets, checkpoints,
  exports, progress);
- :mod:`airflow_tfos.runtime.feed` (what all three use to feed data), :mod:`airflow_tfos.runtime.report`,
  :mod:`airflow_tfos.runtime.compat` (TensorFlowOnSpark's API).

This module is the one import path of the public API: ``from airflow_tfos.runtime import TFClusterRun, Feed,
RunCheckpointer, fit_resumable, export_model``. Each name is imported when first used, so that a TF node's
process, which imports :mod:`airflow_tfos.runtime.program`, does not load the driver's modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each public name and the module that defines it.
_API = {
    "TFClusterRun": "airflow_tfos.runtime.driver.launcher",
    "run": "airflow_tfos.runtime.driver.launcher",
    "predict": "airflow_tfos.runtime.driver.inference",
    "write_predictions": "airflow_tfos.runtime.driver.inference",
    "TFoSEstimator": "airflow_tfos.runtime.driver.ml",
    "TFoSModel": "airflow_tfos.runtime.driver.ml",
    "NodeRole": "airflow_tfos.runtime.node.cluster",
    "plan_roles": "airflow_tfos.runtime.node.cluster",
    "NodeContext": "airflow_tfos.runtime.program.context",
    "RunCheckpointer": "airflow_tfos.runtime.program.checkpoint",
    "fit_resumable": "airflow_tfos.runtime.program.checkpoint",
    "export_model": "airflow_tfos.runtime.program.export",
    "ProgressTracker": "airflow_tfos.runtime.program.progress",
    "progress_callback": "airflow_tfos.runtime.program.keras_progress",
    "Feed": "airflow_tfos.shared.feed",
    "parquet_dataset": "airflow_tfos.runtime.feed.files",
    "csv_dataset": "airflow_tfos.runtime.feed.files",
    "tfrecord_dataset": "airflow_tfos.runtime.feed.files",
    "ClusterConfigError": "airflow_tfos.runtime.errors",
    "FeedConfigError": "airflow_tfos.shared.errors",
    "NodeFailedError": "airflow_tfos.runtime.errors",
    "RunCancelledError": "airflow_tfos.runtime.errors",
    "RunTimeoutError": "airflow_tfos.runtime.errors",
    "StallError": "airflow_tfos.runtime.errors",
    "TFoSRuntimeError": "airflow_tfos.runtime.errors",
    "WarmStartError": "airflow_tfos.runtime.errors",
}

__all__ = [
    "ClusterConfigError",
    "Feed",
    "FeedConfigError",
    "NodeContext",
    "NodeFailedError",
    "NodeRole",
    "ProgressTracker",
    "RunCancelledError",
    "RunCheckpointer",
    "RunTimeoutError",
    "StallError",
    "TFClusterRun",
    "TFoSEstimator",
    "TFoSModel",
    "TFoSRuntimeError",
    "WarmStartError",
    "csv_dataset",
    "export_model",
    "fit_resumable",
    "parquet_dataset",
    "plan_roles",
    "predict",
    "progress_callback",
    "run",
    "tfrecord_dataset",
    "write_predictions",
]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found once; later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, eagerly
    from airflow_tfos.runtime.driver.inference import predict, write_predictions
    from airflow_tfos.runtime.driver.launcher import TFClusterRun, run
    from airflow_tfos.runtime.driver.ml import TFoSEstimator, TFoSModel
    from airflow_tfos.runtime.errors import (
        ClusterConfigError,
        NodeFailedError,
        RunCancelledError,
        RunTimeoutError,
        StallError,
        TFoSRuntimeError,
        WarmStartError,
    )
    from airflow_tfos.runtime.feed.files import csv_dataset, parquet_dataset, tfrecord_dataset
    from airflow_tfos.runtime.node.cluster import NodeRole, plan_roles
    from airflow_tfos.runtime.program.checkpoint import RunCheckpointer, fit_resumable
    from airflow_tfos.runtime.program.context import NodeContext
    from airflow_tfos.runtime.program.export import export_model
    from airflow_tfos.runtime.program.keras_progress import progress_callback
    from airflow_tfos.runtime.program.progress import ProgressTracker
    from airflow_tfos.shared.errors import FeedConfigError
    from airflow_tfos.shared.feed import Feed
