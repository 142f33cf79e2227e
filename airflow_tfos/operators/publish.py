"""Publish a trained model into a registry, only when it is not worse than the model in service."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow.sdk import Asset, AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.registry import ModelRegistryHook
from airflow_tfos.hooks.run_dir import RunDirHook, resolve_run_dir, templated
from airflow_tfos.shared.errors import RegistryError
from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.registry_gate import decide
from airflow_tfos.shared.storage.webhdfs_config import HDFS_SCHEMES

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The scheme of a published model's Asset URI (see :func:`model_asset_uri`).
MODEL_ASSET_SCHEME = "tfos-model"
#: The alias through which the publish operator emits a model's Asset event: only when the model went into
#: service (an outlet Asset would get an event on every success, a rejected model's included).
PUBLISHED_MODELS_ALIAS = "tfos-published-models"


def model_asset_uri(registry: str) -> str:
    """The Asset URI of the model a registry holds: ``tfos-model://<namenode>/<path>`` for an HDFS registry
    (``hdfs://`` or ``webhdfs://``; ``hdfs`` when the URI names no namenode), ``tfos-model://local/<path>`` for
    a local one. The registry must be written the same way by the publisher and by the DAGs scheduled on it.
    """
    if templated(registry):
        raise ValueError(f"the registry {registry!r} is templated: name the model's Asset by its rendered value")
    parsed = urlsplit(registry)
    if parsed.scheme in ("", "file"):
        path = parsed.path if parsed.scheme else registry
        if not posixpath.isabs(path):
            raise ValueError(f"the registry {registry!r} must be an absolute path or a URI to name its model's Asset")
        return f"{MODEL_ASSET_SCHEME}://local{posixpath.normpath(path)}"
    if parsed.scheme in HDFS_SCHEMES:
        return f"{MODEL_ASSET_SCHEME}://{parsed.hostname or 'hdfs'}{posixpath.normpath(parsed.path or '/')}"
    raise ValueError(f"the registry {registry!r} is neither a local path nor an HDFS URI")


def model_asset(registry: str, **kwargs: Any) -> Asset:
    """The Airflow Asset of the model a registry holds (:func:`model_asset_uri`): what DAGs that use the
    published model are scheduled on. ``kwargs`` go to :class:`~airflow.sdk.Asset` (``name``, ``group``...)."""
    return Asset(uri=model_asset_uri(registry), **kwargs)


class TFoSPublishModelOperator(BaseOperator):
    """Copy a run's export into a model registry and put it in service if it is not worse.

    The candidate's ``metric`` (from the export's ``_SUCCESS`` record) is compared with the model in
    service: with ``baseline_<metric>`` from the candidate's own metrics when the training function
    recorded it (the model in service scored on the same evaluation data), else with the score kept
    when that model was published. Every candidate is copied in as a version; only one that is not
    worse (within ``tolerance``) goes into service: that copy, of the export whose metrics were judged (its
    content digest and the metrics judged are kept in ``current.json``). A version older than the one in
    service (a rerun of an old date) never replaces it. Idempotent: running it again for the same export
    changes nothing. The model in service is checked first: when its copy is not the export that was judged
    (other content, or another score), the task fails naming it
    (:meth:`~airflow_tfos.shared.registry.ModelRegistry.check_in_service`).

    Returns ``published`` (bool), ``reason``, ``version``, ``model_path`` (the model in service after
    the decision: use it for batch inference), ``candidate_path``, ``metric``, ``candidate`` and
    ``baseline``.

    :param run_dir: the training run's directory (templated), e.g. the training task's ``run_dir``.
    :param registry: the registry's directory (templated): a local path or an HDFS URI.
    :param version: the version's name (templated); by default the run's logical date, which sorts in time.
    :param metric: the export metric to compare.
    :param higher_is_better: False for losses and errors.
    :param tolerance: how much worse than the baseline still counts as not worse.
    :param fail_if_worse: fail the task (instead of succeeding with ``published: False``) when the
        candidate is worse.
    :param webhdfs_conn_id: the ``webhdfs`` connection for HDFS run directories and registries.
    :param allow_run_dir_outside_base: let a templated ``run_dir`` render to a folder outside
        ``[tfos] run_dir_base`` (by default it must be inside: it may come from ``dag_run.conf``).
    :param emit_asset: when a model goes into service, emit an Asset event for the registry's model
        (:func:`model_asset`; ``registry``, ``version``, ``model_path``, ``metric``, ``metrics``, ``step``,
        ``spec_hash`` and the publishing run's ``logical_date`` in its extra), through the alias
        :data:`PUBLISHED_MODELS_ALIAS`; a rejected model, or a rerun of the version already in service, emits
        nothing. DAGs scheduled on ``model_asset(registry)`` run once per model put in service.
    """

    template_fields: Sequence[str] = ("run_dir", "registry", "version")
    ui_color = "#fde6c4"

    def __init__(
        self,
        *,
        run_dir: str,
        registry: str,
        version: str = "{{ ts_nodash }}",
        metric: str = "test_accuracy",
        higher_is_better: bool = True,
        tolerance: float = 0.0,
        fail_if_worse: bool = False,
        webhdfs_conn_id: str | None = None,
        allow_run_dir_outside_base: bool = False,
        emit_asset: bool = True,
        **kwargs: Any,
    ) -> None:
        if emit_asset:
            outlets = kwargs.get("outlets") or []
            outlets = list(outlets) if isinstance(outlets, (list, tuple)) else [outlets]
            kwargs["outlets"] = [*outlets, AssetAlias(PUBLISHED_MODELS_ALIAS)]
        super().__init__(**kwargs)
        self.emit_asset = emit_asset
        self.allow_run_dir_outside_base = allow_run_dir_outside_base
        self._run_dir_as_written = run_dir  # before rendering: whether it is templated
        if tolerance < 0:
            raise ValueError(f"TFoSPublishModelOperator {self.task_id!r}: tolerance must be >= 0, got {tolerance}")
        self.run_dir = run_dir
        self.registry = registry
        self.version = version
        self.metric = metric
        self.higher_is_better = higher_is_better
        self.tolerance = tolerance
        self.fail_if_worse = fail_if_worse
        self.webhdfs_conn_id = webhdfs_conn_id
        if emit_asset and not templated(registry):
            self.model_asset()  # a registry that cannot name its Asset fails at parse time

    @cached_property
    def run_dir_hook(self) -> RunDirHook:
        return RunDirHook(self.run_dir, webhdfs_conn_id=self.webhdfs_conn_id)

    @cached_property
    def registry_hook(self) -> ModelRegistryHook:
        return ModelRegistryHook(self.registry, webhdfs_conn_id=self.webhdfs_conn_id)

    def execute(self, context: Context) -> dict[str, Any]:
        self.run_dir = resolve_run_dir(
            self.run_dir,
            context,
            as_written=self._run_dir_as_written,
            allow_outside_base=self.allow_run_dir_outside_base,
        )
        if self.emit_asset:
            self.model_asset()  # the rendered registry names its Asset: checked before anything is published
        rundir = self.run_dir_hook.run_dir_contents
        export = rundir.export_success()
        if export is None:
            raise AirflowException(
                f"{rundir.path('export')} holds no complete export (no _SUCCESS): run the training task first"
            )
        registry = self.registry_hook.registry
        current = self.checked_in_service(registry)
        metrics = export.get("metrics") or {}

        def judge(in_service: dict[str, Any] | None):
            try:
                return decide(
                    metrics,
                    in_service,
                    metric=self.metric,
                    higher_is_better=self.higher_is_better,
                    tolerance=self.tolerance,
                    version=self.version,
                )
            except RegistryError as exc:
                raise AirflowException(f"cannot judge {rundir.path('export')}: {exc}") from exc

        judge(current)  # a candidate that cannot be judged is not copied in
        record = {
            "source_run_dir": self.run_dir,
            "spec_hash": export.get("spec_hash"),
            "fingerprint": export.get("fingerprint"),
            "step": export.get("step"),
            "metrics": metrics,
            "metric": self.metric,
            "score": float(metrics[self.metric]),
        }
        try:
            # the copy of the export whose metrics are judged: a copy of another export is never reused
            added = registry.add_version(self.version, rundir.path("export"), self.run_dir_hook.storage, record)
            if (
                current
                and current.get("version") == self.version
                and current.get("model_path") == added["model_path"]
                and current.get("content_digest") == added.get("content_digest")
                and current.get("metric") == self.metric
            ):
                self.log.info("version %s is already in service: nothing to do", self.version)
                return self._result(True, "already in service", current, added, export)
            # decided again under the registry's lock, on current.json as it is then (another publisher may
            # have put a model in service meanwhile)
            decision, in_service = registry.publish(self.version, added, judge, metric=self.metric)
        except RegistryError as exc:
            raise AirflowException(f"cannot publish {rundir.path('export')}: {exc}") from exc
        if decision.publish:
            self.log.info("published version %s: %s", self.version, decision.reason)
            self.emit_model_event(context, in_service or added)
        else:
            self.log.warning("kept version %s in service: %s", (in_service or {}).get("version"), decision.reason)
            if self.fail_if_worse:
                raise AirflowException(f"version {self.version} was not published: {decision.reason}")
        return self._result(decision.publish, decision.reason, in_service, added, export, decision)

    def checked_in_service(self, registry: ModelRegistry) -> dict[str, Any] | None:
        """The record of the model in service, once its copy's content and score are found to be those judged;
        else the task fails naming it (nothing is judged against a model that is not the one judged)."""
        try:
            return registry.check_in_service(
                higher_is_better=self.higher_is_better, tolerance=self.tolerance, verify_content=True
            )
        except RegistryError as exc:
            raise AirflowException(str(exc)) from None

    def model_asset(self) -> Asset:
        """The Asset of the registry's model (see ``emit_asset``); an error that names the argument to change."""
        try:
            return model_asset(self.registry)
        except ValueError as exc:
            raise AirflowException(
                f"TFoSPublishModelOperator {self.task_id!r}: {exc}; or pass emit_asset=False"
            ) from None

    def emit_model_event(self, context: Context, in_service: dict[str, Any]) -> None:
        """Emit the Asset event of the model just put in service (see ``emit_asset``)."""
        events = context.get("outlet_events") if self.emit_asset else None
        if events is None:
            return
        asset = self.model_asset()
        logical_date = context.get("logical_date")
        extra = {
            "registry": self.registry,
            "version": self.version,
            "model_path": in_service["model_path"],
            "metric": self.metric,
            "metrics": in_service.get("metrics") or {},
            "step": in_service.get("step"),
            "spec_hash": in_service.get("spec_hash"),
            "logical_date": logical_date.isoformat() if logical_date else None,
        }
        events[AssetAlias(PUBLISHED_MODELS_ALIAS)].add(asset, extra=extra)
        self.log.info("Asset event for %s: version %s, %s", asset.uri, self.version, in_service["model_path"])

    def _result(self, published, reason, in_service, added, export, decision=None) -> dict[str, Any]:
        metrics = export.get("metrics") or {}
        return {
            "published": published,
            "reason": reason,
            "version": self.version,
            "model_path": in_service["model_path"],
            "model_version": in_service.get("version"),
            "candidate_path": added["model_path"],
            "metric": self.metric,
            "candidate": decision.candidate if decision else metrics.get(self.metric),
            "baseline": decision.baseline if decision else None,
        }
