"""The training spec lives in :mod:`airflow_tfos.shared.spec` (pure Python, shared with the Airflow side)."""

from __future__ import annotations

from airflow_tfos.shared.spec import (
    DATA_FORMATS,
    INPUT_MODES,
    RunSpec,
    SpecError,
    import_callable,
    parse_spec,
    split_import_path,
)

__all__ = ["DATA_FORMATS", "INPUT_MODES", "RunSpec", "SpecError", "import_callable", "parse_spec", "split_import_path"]
