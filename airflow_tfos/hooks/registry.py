"""The model registry from the Airflow side: local paths, or HDFS through a ``webhdfs`` connection."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook

from airflow_tfos.hooks.run_dir import RunDirHook
from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.storage import Storage


class ModelRegistryHook(BaseHook):
    """Read and publish model versions in a registry directory (see :mod:`airflow_tfos.shared.registry`).

    :param registry: the registry's directory: a local path, ``file://``, ``hdfs://`` or ``webhdfs://`` URI.
    :param webhdfs_conn_id: the ``webhdfs`` connection for an HDFS registry (default ``webhdfs_default``).
    """

    def __init__(self, registry: str, *, webhdfs_conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.registry_uri = registry
        self.webhdfs_conn_id = webhdfs_conn_id

    @cached_property
    def storage(self) -> Storage:
        return RunDirHook(self.registry_uri, webhdfs_conn_id=self.webhdfs_conn_id).storage

    @cached_property
    def registry(self) -> ModelRegistry:
        return ModelRegistry(self.registry_uri, storage=self.storage)

    def current_model_path(self) -> str | None:
        """The model in service (for a warm start or batch inference), or None before the first publish."""
        return self.registry.current_model_path()

    def model_in_service_before(self, version: str) -> str | None:
        """The model a run for ``version`` starts from (see :meth:`ModelRegistry.in_service_before`)."""
        return self.registry.in_service_before(version)
