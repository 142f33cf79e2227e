"""What runs in the Spark driver process: the entry point spark-submit runs
(``python -m airflow_tfos.runtime.driver --run-dir URI``, :mod:`~airflow_tfos.runtime.driver.entry`), the launcher of
TF clusters as barrier stages and its watches (heartbeat, stall watchdog, eviction of unanswering executors), the
checks made before a stage is submitted, table fingerprints, batch inference and the Spark ML stages.

Nothing in :mod:`airflow_tfos.runtime.node.task` or :mod:`airflow_tfos.runtime.program` imports from here
(``tests/project/test_layout.py``).
"""

from __future__ import annotations

from typing import Any

#: The entry point's names, for ``from airflow_tfos.runtime.driver import main``: imported when first asked for,
#: so that importing a module of this package (on an executor, say) does not load the whole driver.
_ENTRY_NAMES = frozenset({"main", "run_driver", "write_report_safely"})


def __getattr__(name: str) -> Any:
    if name in _ENTRY_NAMES:
        from airflow_tfos.runtime.driver import entry

        return getattr(entry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
