"""Triggers: wait for an application's state, or for something in a run directory, in the triggerer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_tfos.hooks.backends.apps import ApplicationClient, latest
from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.run_dir import PollPacer, RunDirHook, RunWatch, progress_line

#: What a trigger's event says (its ``status``): the condition was met (``app``: the application's state,
#: or ``result``), the application ended before the condition was met, the trigger failed, or timed out.
DONE, APP_ENDED, ERROR, TIMEOUT = "done", "app_ended", "error", "timeout"
#: What a deferred task logs when Airflow resumes it without its trigger's event (the process that was waiting
#: died, and the task was run again, e.g. by ``airflow tasks test``): it starts over, which is idempotent.
RESUMED_WITHOUT_EVENT = "resumed without the trigger's event (its wait was lost): starting over"
#: How many polls in a row may fail (network, RM failover) before the trigger gives up.
MAX_POLL_ERRORS = 10
#: What a task hands the trigger it defers to, from its attributes of these names.
WATCH_ARGUMENTS = ("run_dir", "webhdfs_conn_id", "spark_conn_id", "yarn_conn_id", "poll_interval", "proxy_user")


def watch_arguments(task: Any, **overrides: Any) -> dict[str, Any]:
    """The run directory, connections and poll interval a trigger watches with, as the deferring ``task``
    holds them (its attributes named in :data:`WATCH_ARGUMENTS`), with ``overrides`` on top."""
    return {**{name: getattr(task, name, None) for name in WATCH_ARGUMENTS}, **overrides}


class TFoSApplicationTrigger(BaseTrigger):
    """Fire when an application reaches one of ``target_states``, or ends.

    :param application_id: the application to watch (or ``tag``).
    :param tag: find the application by this tag (the run's tag) when no id is given.
    :param target_states: YARN states to wait for; default: any terminal state.
    :param spark_conn_id: a ``spark`` connection (its master picks YARN or the local backend); None for
        YARN through ``yarn_conn_id`` alone.
    :param yarn_conn_id: the ``yarn`` connection.
    :param run_dir: the run directory, to log training progress from its status.json, and to look again
        soon after the run's expected end (see :class:`~airflow_tfos.hooks.run_dir.PollPacer`).
    :param webhdfs_conn_id: the ``webhdfs`` connection for HDFS run directories.
    :param poll_interval: seconds between polls.
    :param proxy_user: the user the application runs as (the operator's ``proxy_user``), for the search by tag.
    :param kill_on_kill: kill the application when a user kills the deferred task (mark failed, clear).
    :param webhdfs_token: the WebHDFS delegation token the task's hook handed the driver (YARN, Kerberized
        run directory), sealed with Airflow's Fernet key
        (:func:`~airflow_tfos.hooks.backends.driver_token.seal_token`: the trigger's arguments are stored in
        Airflow's database as they are): renewed while the trigger waits,
        cancelled when the application ends or the task is killed.
    """

    def __init__(
        self,
        *,
        application_id: str | None = None,
        tag: str | None = None,
        target_states: list[str] | None = None,
        spark_conn_id: str | None = None,
        yarn_conn_id: str = "yarn_default",
        run_dir: str | None = None,
        webhdfs_conn_id: str | None = None,
        poll_interval: float = 15.0,
        kill_on_kill: bool = False,
        webhdfs_token: str | None = None,
        proxy_user: str | None = None,
    ) -> None:
        super().__init__()
        if not application_id and not tag:
            raise ValueError("give application_id or tag")
        self.application_id = application_id
        self.tag = tag
        self.target_states = list(target_states) if target_states else None
        self.spark_conn_id = spark_conn_id
        self.yarn_conn_id = yarn_conn_id
        self.run_dir = run_dir
        self.webhdfs_conn_id = webhdfs_conn_id
        self.poll_interval = poll_interval
        self.kill_on_kill = kill_on_kill
        self.webhdfs_token = webhdfs_token
        self.proxy_user = proxy_user
        self._token_keeper = None

    def __repr__(self) -> str:  # BaseTrigger's shows every argument: never the token
        return f"<{type(self).__qualname__} application_id={self.application_id!r} tag={self.tag!r}>"

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "webhdfs_token": self.webhdfs_token,
                "application_id": self.application_id,
                "tag": self.tag,
                "target_states": self.target_states,
                "spark_conn_id": self.spark_conn_id,
                "yarn_conn_id": self.yarn_conn_id,
                "run_dir": self.run_dir,
                "webhdfs_conn_id": self.webhdfs_conn_id,
                "poll_interval": self.poll_interval,
                "proxy_user": self.proxy_user,
                "kill_on_kill": self.kill_on_kill,
            },
        )

    def _client(self) -> ApplicationClient:
        return ApplicationClient(
            spark_conn_id=self.spark_conn_id, yarn_conn_id=self.yarn_conn_id, proxy_user=self.proxy_user
        )

    async def _state(self, client: ApplicationClient) -> AppState | None:
        if self.application_id:
            return await client.aget(self.application_id)
        return latest(await client.afind(self.tag))

    def _reached(self, state: AppState | None) -> bool:
        if state is None:
            return False
        if self.target_states is None:
            return state.is_terminal
        return state.state in self.target_states or state.is_terminal

    async def _keep_token(self) -> None:
        """Renew the driver's token from now on (in a thread of the keeper's)."""
        if not self.webhdfs_token or self._token_keeper is not None or not self.run_dir:
            return
        from airflow_tfos.hooks.backends.driver_token import unseal_token
        from airflow_tfos.shared.storage.tokens import TokenKeeper

        storage = RunDirHook(self.run_dir, webhdfs_conn_id=self.webhdfs_conn_id).storage
        keeper = TokenKeeper(storage, f"driver of {self.application_id or self.tag}")
        self._token_keeper = await asyncio.to_thread(keeper.adopt, unseal_token(self.webhdfs_token))

    async def _end_token(self) -> None:
        """Cancel the driver's token (the application ended, or the task was killed)."""
        if not self.webhdfs_token:
            return
        if self._token_keeper is None:
            try:
                await self._keep_token()
            except Exception as exc:  # expired or cancelled already: nothing left to cancel
                self.log.warning("cannot renew the driver's WebHDFS delegation token to cancel it: %s", exc)
                return
        keeper, self._token_keeper = self._token_keeper, None
        if keeper is not None:
            await asyncio.to_thread(keeper.stop)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            await self._keep_token()
        except Exception as exc:  # the driver meets the expired token and fails with what it says
            self.log.error("cannot renew the driver's WebHDFS delegation token: %s", exc)
        try:
            async for event in self._watch():
                yield event
        finally:  # cancelled (the task timed out, or the trigger moves to another triggerer): stop renewing here
            if self._token_keeper is not None:
                self._token_keeper.hand_off()
                self._token_keeper = None

    async def _watch(self) -> AsyncIterator[TriggerEvent]:
        client = self._client()
        run_dir_hook = RunDirHook(self.run_dir, webhdfs_conn_id=self.webhdfs_conn_id) if self.run_dir else None
        errors, last_line, tracking_url = 0, None, None
        pacer = PollPacer(self.poll_interval)
        while True:
            try:
                state = await self._state(client)
                errors = 0
            except Exception as exc:  # the hooks already retried; count consecutive failures
                errors += 1
                self.log.warning("cannot read the application state (%d/%d): %s", errors, MAX_POLL_ERRORS, exc)
                if errors >= MAX_POLL_ERRORS:
                    await self._end_token()  # the task fails
                    yield TriggerEvent({"status": ERROR, "message": str(exc), "application_id": self.application_id})
                    return
                await asyncio.sleep(self.poll_interval)
                continue
            # the last UI address seen: a local application's UI is gone once it ends, YARN's stays
            tracking_url = (state.tracking_url if state else None) or tracking_url
            if self._reached(state):
                if state.is_terminal:
                    await self._end_token()
                yield TriggerEvent({"status": DONE, "app": state.to_json(), "tracking_url": tracking_url})
                return
            status = None
            if run_dir_hook is not None:
                try:
                    status = await run_dir_hook.aread_status()
                    line = progress_line(status)
                except Exception as exc:
                    line = f"cannot read status.json: {exc}"
                if line and line != last_line:
                    self.log.info("%s: %s", state or self.tag, line)
                    last_line = line
            await asyncio.sleep(pacer.next_secs(status, time.time()))

    async def on_kill(self) -> None:
        try:
            if self.kill_on_kill:
                await self._kill()
        finally:
            await self._end_token()  # the driver's token, once its application is killed

    async def _kill(self) -> None:
        client = self._client()
        app_id = self.application_id
        if app_id is None:
            found = latest(await client.afind(self.tag))
            app_id = found.app_id if found and not found.is_terminal else None
        if app_id:
            self.log.info("the task was killed: killing application %s", app_id)
            await client.akill(app_id)


class TFoSRunDirTrigger(BaseTrigger):
    """Fire when a condition on a run directory is met (a checkpoint, the export, a feed done, ready).

    :param run_dir: the run directory.
    :param condition: what to wait for (see :func:`airflow_tfos.hooks.run_dir.check_condition`).
    :param webhdfs_conn_id: the ``webhdfs`` connection for HDFS run directories.
    :param application_id: fail as soon as this application ends without the condition being met.
    :param spark_conn_id: its ``spark`` connection (None: YARN through ``yarn_conn_id``).
    :param yarn_conn_id: the ``yarn`` connection.
    :param poll_interval: seconds between polls.
    :param proxy_user: the user the application runs as (the operator's ``proxy_user``), for the search by tag.
    :param timeout: give up after this many seconds (None: never).
    """

    def __init__(
        self,
        *,
        run_dir: str,
        condition: dict[str, Any],
        webhdfs_conn_id: str | None = None,
        application_id: str | None = None,
        spark_conn_id: str | None = None,
        yarn_conn_id: str = "yarn_default",
        poll_interval: float = 15.0,
        timeout: float | None = None,
        proxy_user: str | None = None,
    ) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.condition = condition
        self.webhdfs_conn_id = webhdfs_conn_id
        self.application_id = application_id
        self.spark_conn_id = spark_conn_id
        self.yarn_conn_id = yarn_conn_id
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.proxy_user = proxy_user

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "run_dir": self.run_dir,
                "condition": self.condition,
                "webhdfs_conn_id": self.webhdfs_conn_id,
                "application_id": self.application_id,
                "spark_conn_id": self.spark_conn_id,
                "yarn_conn_id": self.yarn_conn_id,
                "poll_interval": self.poll_interval,
                "proxy_user": self.proxy_user,
                "timeout": self.timeout,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        run_dir_hook = RunDirHook(self.run_dir, webhdfs_conn_id=self.webhdfs_conn_id)
        client = ApplicationClient(
            spark_conn_id=self.spark_conn_id, yarn_conn_id=self.yarn_conn_id, proxy_user=self.proxy_user
        )
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        errors = 0
        watch, pacer = RunWatch(), PollPacer(self.poll_interval)
        while True:
            try:
                result = await run_dir_hook.acheck(self.condition)
                if result is not None:
                    yield TriggerEvent({"status": DONE, "result": result})
                    return
                if self.application_id:  # a live run (a feed, a launch): its progress and lost nodes
                    for line in await run_dir_hook.awatch_lines(watch):
                        self.log.info("%s: %s", self.application_id, line)
                if self.application_id:
                    state = await client.aget(self.application_id)
                    if state.is_terminal:
                        # the condition may have been met just before the application ended
                        result = await run_dir_hook.acheck(self.condition)
                        if result is not None:
                            yield TriggerEvent({"status": DONE, "result": result})
                        else:
                            yield TriggerEvent({"status": APP_ENDED, "app": state.to_json()})
                        return
                errors = 0
            except Exception as exc:
                errors += 1
                self.log.warning("cannot check %s (%d/%d): %s", self.run_dir, errors, MAX_POLL_ERRORS, exc)
                if errors >= MAX_POLL_ERRORS:
                    yield TriggerEvent({"status": ERROR, "message": str(exc)})
                    return
            if deadline is not None and time.monotonic() > deadline:
                yield TriggerEvent({"status": TIMEOUT, "message": f"not met within {self.timeout:.0f} s"})
                return
            await asyncio.sleep(pacer.next_secs(watch.status, time.time()))
