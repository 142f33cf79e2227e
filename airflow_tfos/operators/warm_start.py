"""Where a training run starts from, when it is the model in service in a registry.

``warm_start=ModelInService("hdfs://nameservice1/models/churn")`` on :class:`~airflow_tfos.operators.TFoSTrainOperator`
starts the run from the model the registry had in service before this run's version (the one
:class:`~airflow_tfos.operators.TFoSPublishModelOperator` publishes it under, by default the run's logical date),
and from scratch when there is none yet: the registry's answer, looked up by the task itself after its arguments
are rendered, so no upstream task is needed. A rerun of an old date starts from the model in service before that
date, as the registry's :meth:`~airflow_tfos.shared.registry.ModelRegistry.in_service_before` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: The version a run publishes under by default (the publish operator's default): its logical date, which sorts in time.
DEFAULT_VERSION = "{{ ts_nodash }}"


class ModelInService:
    """``warm_start``: the model in service in ``registry`` before version ``before`` (templated, both).

    :param registry: the registry's folder, as the publish operator's ``registry`` (``hdfs://``, ``webhdfs://``, a
        local path or ``file://``); read through the training task's ``webhdfs_conn_id``.
    :param before: the version this run publishes under (default the run's logical date, ``{{ ts_nodash }}``, the
        publish operator's default); versions older than it count.
    """

    # Airflow renders the template fields of an object that a template field holds (and would call a method named
    # ``resolve`` instead: hence :meth:`lookup`).
    template_fields: Sequence[str] = ("registry", "before")

    def __init__(self, registry: str, *, before: str = DEFAULT_VERSION) -> None:
        if not isinstance(registry, str) or not registry:
            raise TypeError(f"ModelInService needs the registry's folder, got {registry!r}")
        self.registry = registry
        self.before = before

    def __repr__(self) -> str:
        return f"ModelInService({self.registry!r}, before={self.before!r})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ModelInService) and (other.registry, other.before) == (self.registry, self.before)

    def __hash__(self) -> int:
        return hash((self.registry, self.before))

    def lookup(self, *, webhdfs_conn_id: str | None, log: Any) -> str | None:
        """The model's path, or None (train from scratch); logged either way."""
        from airflow_tfos.hooks.registry import ModelRegistryHook

        found = ModelRegistryHook(self.registry, webhdfs_conn_id=webhdfs_conn_id).model_in_service_before(self.before)
        if found:
            log.info("warm start: the model in service in %s before version %s, %s", self.registry, self.before, found)
        else:
            log.info("warm start: no model in service in %s before version %s: training from scratch", self.registry,
                     self.before)  # fmt: skip
        return found or None
