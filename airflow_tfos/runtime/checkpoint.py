"""Former path of checkpoints and exports, which earlier docs showed: import them from :mod:`airflow_tfos.runtime`
(``from airflow_tfos.runtime import RunCheckpointer, fit_resumable, export_model``)."""

from airflow_tfos.runtime.program.checkpoint import RunCheckpointer, fit_resumable
from airflow_tfos.runtime.program.export import export_model

__all__ = ["RunCheckpointer", "export_model", "fit_resumable"]
