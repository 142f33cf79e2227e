"""One way to look up, find and kill applications, on YARN or through the local backend.

Sensors and triggers that watch an application take either a ``spark_conn_id`` (then the
:class:`~airflow_tfos.hooks.tfos.TFoSHook` of that Spark connection decides: YARN or local) or only a
``yarn_conn_id`` (YARN's ResourceManager directly, :class:`~airflow_tfos.hooks.backends.yarn.YarnBackend`).
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from airflow_tfos.hooks.backends.state import AppState

if TYPE_CHECKING:
    from airflow_tfos.hooks.backends.base import Backend
    from airflow_tfos.hooks.tfos import TFoSHook

#: How long a kill through the ResourceManager alone waits for it to report the application killed.
YARN_KILL_WAIT_SECS = 120


class ApplicationClient:
    """Application state, search by tag and kill, sync and async, for YARN or the local backend.

    :param spark_conn_id: a ``spark`` connection; its master picks the backend (YARN or local).
    :param yarn_conn_id: the ``yarn`` connection (used alone when ``spark_conn_id`` is None).
    :param proxy_user: the user the applications run as (the operator's ``proxy_user``), for the search by tag.
    """

    def __init__(
        self, *, spark_conn_id: str | None = None, yarn_conn_id: str = "yarn_default", proxy_user: str | None = None
    ) -> None:
        self.spark_conn_id = spark_conn_id
        self.yarn_conn_id = yarn_conn_id
        self.proxy_user = proxy_user

    @cached_property
    def tfos_hook(self) -> TFoSHook:
        from airflow_tfos.hooks.tfos import TFoSHook

        return TFoSHook(spark_conn_id=self.spark_conn_id, yarn_conn_id=self.yarn_conn_id, proxy_user=self.proxy_user)

    @cached_property
    def yarn_hook(self):
        from airflow_tfos.hooks.yarn import YarnHook

        return YarnHook(yarn_conn_id=self.yarn_conn_id)

    @cached_property
    def backend(self) -> Backend | TFoSHook:
        """The Spark connection's backend (through its hook), else the ResourceManager of the ``yarn`` connection."""
        if self.spark_conn_id:
            return self.tfos_hook
        from airflow_tfos.hooks.backends.yarn import YarnBackend

        return YarnBackend(self.yarn_hook, min_kill_wait_secs=YARN_KILL_WAIT_SECS, app_user=self.proxy_user)

    def get(self, app_id: str) -> AppState:
        return self.backend.get_state(app_id)

    def find(self, tag: str) -> list[AppState]:
        """Applications carrying ``tag``, live or not, newest last."""
        return self.backend.find_by_tag(tag)

    def kill(self, app_id: str) -> AppState:
        return self.backend.kill(app_id)

    async def aget(self, app_id: str) -> AppState:
        return await self.backend.aget_state(app_id)

    async def afind(self, tag: str) -> list[AppState]:
        return await self.backend.afind_by_tag(tag)

    async def akill(self, app_id: str) -> AppState:
        return await self.backend.akill(app_id)


def latest(apps: list[AppState]) -> AppState | None:
    """The live application among ``apps`` if there is one, else the last one, else None."""
    live = [a for a in apps if not a.is_terminal]
    if live:
        return live[-1]
    return apps[-1] if apps else None
