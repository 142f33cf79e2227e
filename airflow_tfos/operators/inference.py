"""Batch inference with an exported model, as a Spark application."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.errors import RunConfigError
from airflow_tfos.hooks.run_dir import RunDirHook
from airflow_tfos.links.tfos import SparkApplicationLink, TrainingReportLink
from airflow_tfos.operators.application import _TFoSApplicationOperator, shipped_code
from airflow_tfos.operators.run import ApplicationRun
from airflow_tfos.shared.fingerprint import changes, inference_fingerprint
from airflow_tfos.shared.spec import RunSpec
from airflow_tfos.shared.storage import join

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage

    from airflow_tfos.hooks.backends.state import AppState
    from airflow_tfos.shared.storage import Storage

#: The SavedModel signature scored with unless ``signature`` names another.
DEFAULT_SIGNATURE = "serving_default"
#: Spark's commit marker in a written output directory.
SUCCESS_MARKER = "_SUCCESS"


class InferenceRun(ApplicationRun):
    """A batch inference request: done means the output's ``_SUCCESS`` marker, of predictions made from the
    same input, model and code (:func:`~airflow_tfos.shared.fingerprint.inference_fingerprint`).

    :param output_path: where the predictions go.
    :param output_storage: the storage of ``output_path``'s scheme (not the run directory's).
    """

    def __init__(self, *, output_path: str, output_storage: Storage, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.output_path = output_path
        self.output_storage = output_storage
        self.marker = join(output_path, SUCCESS_MARKER)

    def measure_fingerprint(self) -> dict[str, Any]:
        return inference_fingerprint(self.spec_json, self.input_storage)

    def already_done(self) -> dict[str, Any] | None:
        """The predictions are there, made from this input, model and code (``fingerprint.json`` of the run
        directory, written when they were); predictions from other ones are made again."""
        if not self.output_storage.exists(self.marker):
            return None
        made_from = self.run_dir_contents.read_fingerprint()
        if made_from is not None and made_from.get("hash") != self.fingerprint["hash"]:
            self.log.warning(
                "%s holds predictions of another input, model or code: %s. Scoring again; the old predictions "
                "stay until the new ones replace them",
                self.output_path,
                "; ".join(changes(made_from, self.fingerprint)),
            )
            return None
        self.log.info("%s holds predictions already (%s): nothing to do", self.output_path, SUCCESS_MARKER)
        return self.result(None)

    def result(self, app: AppState | None) -> dict[str, Any]:
        """Application id, run directory, output path and the number of rows scored."""
        status = self.run_dir_contents.read_status() or {}
        self.outcome = {
            "application_id": app.app_id if app else status.get("application_id"),
            "run_dir": self.run_dir,
            "output_path": self.output_path,
            "rows": (status.get("result") or {}).get("rows") if isinstance(status.get("result"), dict) else None,
        }
        return self.outcome

    def finish(self, app: AppState) -> dict[str, Any]:
        if app.is_successful and self.output_storage.exists(self.marker):
            # Recorded only now: a failed run leaves the old predictions with the fingerprint they were made from.
            self.run_dir_contents.write_fingerprint(self.fingerprint)
            return self.result(app)
        status = self.run_dir_contents.read_status() or {}
        raise AirflowException(
            f"inference application {app.app_id} ended {app.state}/{app.final_status} without writing "
            f"{self.marker}: {status.get('error') or app.diagnostics or 'no error recorded'}"
        )


class TFoSInferenceOperator(_TFoSApplicationOperator):
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
    :param model_outputs: instead of ``model_output``, several outputs (``"*"``: all), each written to a
        column named after it (``output_col`` is then unused).
    :param batch_size: rows per model call.
    :param num_executors: executors to score on.
    :param signature: the SavedModel signature to call.
    Other parameters (connections, ``conf``, ``env``, executor resources, ``run_dir``, ``deferrable``,
    ``durable``, shipping) as :class:`TFoSTrainOperator`; the training settings do not apply.
    """

    template_fields: Sequence[str] = (
        "run_dir", "data", "model_path", "output_path", "conf", "env", "py_files", "archives", "files", "packed_env",
        "name", "yarn_queue", "proxy_user",
    )  # fmt: skip
    template_fields_renderers = {"data": "json", "conf": "json"}
    operator_extra_links = (SparkApplicationLink(), TrainingReportLink())
    spec_argument_names = {"num_nodes": "num_executors"}

    def __init__(
        self,
        *,
        model_path: str,
        data: dict,
        features: Sequence[str],
        output_path: str,
        output_col: str = "prediction",
        model_output: str | None = None,
        model_outputs: str | Sequence[str] | None = None,
        batch_size: int = 1024,
        num_executors: int = 2,
        signature: str = DEFAULT_SIGNATURE,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.model_path = model_path
        self.data = data
        self.features = list(features)
        self.output_path = output_path
        self.output_col = output_col
        self.model_output = model_output
        self.model_outputs = (
            model_outputs if model_outputs is None or isinstance(model_outputs, str) else list(model_outputs)
        )
        self.batch_size = batch_size
        self.num_nodes = num_executors
        self.signature = signature
        where = f"TFoSInferenceOperator {self.task_id!r}"
        if not self.features:
            raise RunConfigError(f"{where}: features must name at least one column")
        if model_output is not None and model_outputs is not None:
            raise RunConfigError(f"{where}: give model_output (one output) or model_outputs (several), not both")
        if not isinstance(num_executors, int) or isinstance(num_executors, bool) or num_executors < 1:
            raise RunConfigError(f"{where}: num_executors must be an integer >= 1, got {num_executors!r}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise RunConfigError(f"{where}: batch_size must be an integer >= 1, got {batch_size!r}")
        if not isinstance(signature, str) or not signature:
            raise RunConfigError(f"{where}: signature must name one of the SavedModel's signatures, got {signature!r}")
        self.check_parameters()

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
        if self.model_outputs is not None:
            inference["outputs"] = self.model_outputs
        if self.signature != DEFAULT_SIGNATURE:  # the default is left out: the specs of earlier runs stay the same
            inference["signature"] = self.signature
        return RunSpec(
            kind="inference",
            num_nodes=self.num_nodes,
            data=self.data,
            inference=inference,
            env=dict(self.env),
            code=shipped_code(self.user_code if code else None),  # a data function of the user's
        )

    def user_functions(self) -> list[str]:
        """The data function, when ``data`` is read by one (format ``function``)."""
        data = self.data
        if isinstance(data, dict) and data.get("format") == "function" and data.get("function"):
            return [str(data["function"])]
        return []

    def new_run(self, spec: RunSpec) -> InferenceRun:
        return InferenceRun(**self.run_parts(spec), output_path=self.output_path, output_storage=self.output_storage)

    def num_executors(self) -> int:
        return self.num_nodes

    def cluster_paths(self) -> dict[str, Any]:
        return {**super().cluster_paths(), "model_path": self.model_path, "output_path": self.output_path}

    @cached_property
    def output_storage(self) -> Storage:
        """Where the predictions are: the storage of ``output_path``'s scheme (not the run directory's)."""
        return RunDirHook(self.output_path, webhdfs_conn_id=self.webhdfs_conn_id).storage

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The data and the model this task scores with, and where the predictions go."""
        from airflow_tfos.operators.lineage import inference_operator_lineage

        return inference_operator_lineage(self, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The data and the model this task scored with, and the predictions with their row count."""
        from airflow_tfos.operators.lineage import inference_operator_lineage

        return inference_operator_lineage(self, self._tfos_result)
