"""Former path of :func:`fetch`, which earlier docs showed: its home is
:mod:`airflow_tfos.runtime.program.saved_models` (SavedModels on remote storage, fetched into a local cache)."""

from airflow_tfos.runtime.program.saved_models import fetch

__all__ = ["fetch"]
