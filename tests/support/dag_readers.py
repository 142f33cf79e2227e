"""An auth manager for tests: Airflow's simple auth manager, with users who may read only some Dags.

The simple auth manager's roles are global; deployments get per-Dag permissions from the FAB auth manager
(``access_control`` on a Dag) or another auth manager. This one answers ``is_authorized_dag`` per user and
Dag, from ``AIRFLOW_TFOS_TEST_DAG_READERS`` (``alice=dag_a,dag_c;bob=dag_b``), so that a test can go through
the real api-server and the real auth manager interface. Users not listed there keep their role's rights.
(The FAB provider does not install beside this project's pins: apache-airflow-providers-fab 3.10.2 needs
flask-appbuilder 5.2.2, which needs python-dateutil < 3; python-dateutil 4.0.0 is pinned.)
"""

from __future__ import annotations

import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

READERS_ENV = "AIRFLOW_TFOS_TEST_DAG_READERS"


def dag_readers(value: str | None = None) -> dict[str, frozenset[str]]:
    """``alice=dag_a,dag_c;bob=dag_b`` as ``{"alice": {"dag_a", "dag_c"}, "bob": {"dag_b"}}``."""
    readers = {}
    for part in filter(None, (value if value is not None else os.environ.get(READERS_ENV, "")).split(";")):
        user, _, dags = part.partition("=")
        readers[user.strip()] = frozenset(d.strip() for d in dags.split(",") if d.strip())
    return readers


class DagReadersAuthManager(SimpleAuthManager):
    """The simple auth manager, where the users listed in ``AIRFLOW_TFOS_TEST_DAG_READERS`` may read (GET)
    their listed Dags and nothing else of any Dag."""

    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        readable = dag_readers().get(user.username)
        if readable is None:
            return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
        return method == "GET" and details is not None and details.id in readable
