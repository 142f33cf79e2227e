"""Where a task's run directory is: as given (templated or not), or the default one, checked against the base.

Airflow side (reads ``[tfos] run_dir_base``); the rules themselves are pure, in :mod:`airflow_tfos.hooks.runs`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from airflow.sdk.configuration import conf

from airflow_tfos.hooks.runs import default_run_dir, place_run_dir, templated

if TYPE_CHECKING:
    from airflow.sdk import Context

__all__ = ["resolve_run_dir", "run_dir_base", "templated"]


def run_dir_base() -> str:
    """Where default run directories go: ``[tfos] run_dir_base``, ``$AIRFLOW_TFOS_RUN_DIR_BASE``, else
    ``$AIRFLOW_HOME/tfos-runs``."""
    configured = conf.get("tfos", "run_dir_base", fallback=None) or os.environ.get("AIRFLOW_TFOS_RUN_DIR_BASE")
    if configured:
        return configured
    home = os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")
    return os.path.join(home, "tfos-runs")


def resolve_run_dir(
    run_dir: str | None,
    context: Context,
    *,
    task_id: str | None = None,
    as_written: str | None = None,
    allow_outside_base: bool = False,
) -> str:
    """``run_dir`` as given, else the default one of this task (or of task ``task_id``, e.g. the launch task
    of a feed or shutdown) in this DAG run; normalised (never ``..``).

    A templated run directory (``as_written``, the value before rendering, holds Jinja; unknown counts as
    templated), the run directory of a mapped task instance (its value may come from ``.expand()`` over an
    upstream task's output, data rather than the DAG's text) and the default one must lie under
    ``[tfos] run_dir_base``, unless ``allow_outside_base``.
    """
    base = run_dir_base()
    ti, dag_run = context["ti"], context["dag_run"]
    if run_dir:
        map_index = getattr(ti, "map_index", None)
        mapped = map_index is not None and map_index >= 0
        bounded = (as_written is None or templated(as_written) or mapped) and not allow_outside_base
        return place_run_dir(run_dir, base, must_be_under_base=bounded)
    # a mapped instance's own run directory (a feed or shutdown names its launch task: that one's, unmapped)
    map_index = getattr(ti, "map_index", None) if task_id is None else None
    default = default_run_dir(
        base, ti.dag_id, task_id or ti.task_id, dag_run.logical_date, dag_run.run_id, map_index=map_index
    )
    return place_run_dir(default, base, must_be_under_base=True)
