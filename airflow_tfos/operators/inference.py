"""Batch inference with an exported model, as a Spark application."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.run_dir import RunDirHook
from airflow_tfos.hooks.runs import RunConfigError
from airflow_tfos.operators.train import _TFoSRunOperator, shipped_code
from airflow_tfos.shared.spec import RunSpec
from airflow_tfos.shared.storage import join

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context

    from airflow_tfos.hooks.state import AppState
    from airflow_tfos.shared.storage import Storage

#: Spark's commit marker in a written output directory.
SUCCESS_MARKER = "_SUCCESS"


class TFoSInferenceOperator(_TFoSRunOperator):
    """Score a dataset with an exported SavedModel on the Spark executors; write the predictions as Parquet.

    No TF cluster is needed: every partition is scored on its own, in Arrow batches, with the model
    loaded once per Python worker. Idempotent on the output's ``_SUCCESS`` marker: when it is there,
    the task succeeds at once.

    :param model_path: the SavedModel (templated), e.g. the training task's ``export_path``.
    :param data: what to score (templated), as ``data`` of :class:`TFoSTrainOperator`.
    :param features: the columns fed to the model, in its input order.
    :param output_path: where the predictions go (templated): the input columns plus ``output_col``.
    :param output_col: the prediction column's name.
    :param model_output: which model output to keep (default: the first by name).
    :param batch_size: rows per model call.
    :param num_executors: executors to score on.
    Other parameters (connections, ``conf``, ``run_dir``, ``deferrable``...) as :class:`TFoSTrainOperator`.
    """

    template_fields: Sequence[str] = ("run_dir", "data", "model_path", "output_path", "conf", "env")
    kind = "inference"

    def __init__(
        self,
        *,
        model_path: str,
        data: dict,
        features: Sequence[str],
        output_path: str,
        output_col: str = "prediction",
        model_output: str | None = None,
        batch_size: int = 1024,
        num_executors: int = 2,
        **kwargs: Any,
    ) -> None:
        self.model_path = model_path
        self.features = list(features)
        self.output_path = output_path
        self.output_col = output_col
        self.model_output = model_output
        self.batch_size = batch_size
        if not self.features:
            raise RunConfigError(
                f"TFoSInferenceOperator {kwargs.get('task_id')!r}: features must name at least one column"
            )
        super().__init__(data=data, num_nodes=num_executors, **kwargs)

    def build_spec(self, *, code: bool = True) -> RunSpec:
        inference = {
            "model_path": self.model_path,
            "features": self.features,
            "output_path": self.output_path,
            "output_col": self.output_col,
            "batch_size": self.batch_size,
        }
        if self.model_output:
            inference["output"] = self.model_output
        return RunSpec(
            kind="inference",
            num_nodes=self.num_nodes,
            data=self.data,
            inference=inference,
            env=dict(self.env),
            code=shipped_code(self.user_code if code else None),  # a data function of the user's
        )

    def num_executors(self) -> int:
        return self.num_nodes

    @cached_property
    def output_storage(self) -> Storage:
        """Where the predictions are: the storage of ``output_path``'s scheme (not the run directory's)."""
        return RunDirHook(self.output_path, webhdfs_conn_id=self.webhdfs_conn_id).storage

    def _marker(self) -> str:
        return join(self.output_path, SUCCESS_MARKER)

    def already_done(self, digest: str) -> dict[str, Any] | None:
        if self.output_storage.exists(self._marker()):
            self.log.info("%s holds predictions already (%s): nothing to do", self.output_path, SUCCESS_MARKER)
            return self.result(None, digest)
        return None

    def result(self, app: AppState | None, digest: str) -> dict[str, Any]:
        status = self.rundir.read_status() or {}
        self._tfos_result = {
            "application_id": app.app_id if app else status.get("application_id"),
            "run_dir": self.run_dir,
            "output_path": self.output_path,
            "rows": (status.get("result") or {}).get("rows") if isinstance(status.get("result"), dict) else None,
        }
        return self._tfos_result

    def finish(self, app: AppState) -> dict[str, Any]:
        if app.is_successful and self.output_storage.exists(self._marker()):
            return self.result(app, self.request_hash())
        status = self.rundir.read_status() or {}
        raise AirflowException(
            f"inference application {app.app_id} ended {app.state}/{app.final_status} without writing "
            f"{self._marker()}: {status.get('error') or app.diagnostics or 'no error recorded'}"
        )

    def execute(self, context: Context) -> Any:
        return self.launch_and_wait(context)

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The data and the model this task scores with, and where the predictions go."""
        from airflow_tfos.operators.lineage import inference_operator_lineage

        return inference_operator_lineage(self, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The data and the model this task scored with, and the predictions with their row count."""
        from airflow_tfos.operators.lineage import inference_operator_lineage

        return inference_operator_lineage(self, self._tfos_result)
