"""Hooks: all I/O with Spark, YARN and HDFS happens here.

``from airflow_tfos.hooks import TFoSHook`` (and the others below) works as for operators and sensors;
each is imported on first use, so that light modules of this package (application states, the YARN
connection type the provider's metadata names) do not pull in spark-submit and HTTP clients.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "TFoSHook": "airflow_tfos.hooks.tfos",
    "YarnHook": "airflow_tfos.hooks.yarn",
    "RunDirHook": "airflow_tfos.hooks.run_dir",
    "ModelRegistryHook": "airflow_tfos.hooks.registry",
    "LocalBackend": "airflow_tfos.hooks.backends.local_tracker",
    "ApplicationClient": "airflow_tfos.hooks.backends.apps",
    "AppState": "airflow_tfos.hooks.backends.state",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'airflow_tfos.hooks' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
