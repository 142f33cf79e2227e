"""One way to look up, find and kill applications, on YARN or through the local backend.

Sensors and triggers that watch an application take either a ``spark_conn_id`` (then the
:class:`~airflow_tfos.hooks.tfos.TFoSHook` of that Spark connection decides: YARN or local) or only a
``yarn_conn_id`` (YARN's ResourceManager directly).
"""

from __future__ import annotations

import asyncio
from functools import cached_property

from airflow_tfos.hooks.state import AppState


class ApplicationClient:
    """Application state, search by tag and kill, sync and async, for YARN or the local backend.

    :param spark_conn_id: a ``spark`` connection; its master picks the backend (YARN or local).
    :param yarn_conn_id: the ``yarn`` connection (used alone when ``spark_conn_id`` is None).
    """

    def __init__(self, *, spark_conn_id: str | None = None, yarn_conn_id: str = "yarn_default") -> None:
        self.spark_conn_id = spark_conn_id
        self.yarn_conn_id = yarn_conn_id

    @cached_property
    def tfos_hook(self):
        from airflow_tfos.hooks.tfos import TFoSHook

        return TFoSHook(spark_conn_id=self.spark_conn_id, yarn_conn_id=self.yarn_conn_id)

    @cached_property
    def yarn_hook(self):
        from airflow_tfos.hooks.yarn import YarnHook

        return YarnHook(yarn_conn_id=self.yarn_conn_id)

    def get(self, app_id: str) -> AppState:
        if self.spark_conn_id:
            return self.tfos_hook.get_state(app_id)
        return self.yarn_hook.get_application(app_id)

    def find(self, tag: str) -> list[AppState]:
        """Applications carrying ``tag``, live or not, newest last."""
        if self.spark_conn_id:
            return self.tfos_hook.find_by_tag(tag)
        return self.yarn_hook.find_applications(tag=tag, **self._owner())

    def _owner(self) -> dict[str, str]:
        return {"user": self.yarn_hook.application_user, "application_type": "SPARK"}

    def kill(self, app_id: str) -> AppState:
        if self.spark_conn_id:
            return self.tfos_hook.kill(app_id)
        return self.yarn_hook.kill_application(app_id)

    async def aget(self, app_id: str) -> AppState:
        if self.spark_conn_id:
            return await self.tfos_hook.aget_state(app_id)
        return await self.yarn_hook.aget_application(app_id)

    async def afind(self, tag: str) -> list[AppState]:
        if self.spark_conn_id:
            return await asyncio.to_thread(self.tfos_hook.find_by_tag, tag)
        user = await self.yarn_hook.aapplication_user()
        return await self.yarn_hook.afind_applications(tag=tag, user=user, application_type="SPARK")

    async def akill(self, app_id: str) -> AppState:
        if self.spark_conn_id:
            return await self.tfos_hook.akill(app_id)
        return await self.yarn_hook.akill_application(app_id)


def latest(apps: list[AppState]) -> AppState | None:
    """The live application among ``apps`` if there is one, else the last one, else None."""
    live = [a for a in apps if not a.is_terminal]
    if live:
        return live[-1]
    return apps[-1] if apps else None
