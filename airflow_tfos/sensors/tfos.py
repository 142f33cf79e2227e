"""Sensors: an application's state on YARN (or the local backend), and checkpoints in a run directory."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.backends.apps import ApplicationClient, latest
from airflow_tfos.hooks.backends.state import YARN_STATES, AppState
from airflow_tfos.hooks.run_dir import RunDirHook, check_run_dir, templated
from airflow_tfos.triggers.tfos import DONE, RESUMED_WITHOUT_EVENT, TFoSApplicationTrigger, TFoSRunDirTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


def application_failure(state: AppState) -> str | None:
    """Why an ended application counts as failed, or None when it succeeded (or has not ended)."""
    if not state.is_terminal or state.is_successful:
        return None
    diagnostics = (state.diagnostics or "no diagnostics").strip()
    return f"application {state.app_id} ended {state.state}/{state.final_status}: {diagnostics}"


class _DeferrableSensor(BaseSensorOperator):
    """Poke once; if not done and ``deferrable``, wait in the triggerer on :meth:`trigger`."""

    deferrable = False

    def trigger(self):
        raise NotImplementedError

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        result = self.poke(context)
        if result.is_done:
            return result.xcom_value
        self.defer(
            trigger=self.trigger(),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )
        return None


class YarnApplicationSensor(_DeferrableSensor):
    """Wait for an application to reach a state; fail at once, with its diagnostics, if it fails or is killed.

    Failing fast lets the DAG's retry (of the training or launch task) resume from the last checkpoint
    instead of waiting out the sensor's timeout.

    :param application_id: the application (templated); or give ``tag``.
    :param tag: the run's tag (templated; :func:`airflow_tfos.hooks.run_dir.run_tag`): the latest application
        carrying it is watched.
    :param target_states: YARN states to wait for (default ``FINISHED``). ``FINISHED`` with a final
        status other than ``SUCCEEDED`` is a failure.
    :param yarn_conn_id: the ``yarn`` connection.
    :param spark_conn_id: watch through this ``spark`` connection's backend instead (for the local
        backend on one machine); None for YARN.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    """

    template_fields: Sequence[str] = ("application_id", "tag")

    def __init__(
        self,
        *,
        application_id: str | None = None,
        tag: str | None = None,
        target_states: Sequence[str] = ("FINISHED",),
        yarn_conn_id: str = "yarn_default",
        spark_conn_id: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not application_id and not tag:
            raise ValueError(f"{self.task_id}: give application_id or tag")
        unknown = [s for s in target_states if s not in YARN_STATES]
        if unknown or not target_states:
            raise ValueError(
                f"{self.task_id}: target_states must be YARN states ({', '.join(YARN_STATES)}), got {unknown}"
            )
        self.application_id = application_id
        self.tag = tag
        self.target_states = list(target_states)
        self.yarn_conn_id = yarn_conn_id
        self.spark_conn_id = spark_conn_id
        self.deferrable = deferrable

    @cached_property
    def client(self) -> ApplicationClient:
        return ApplicationClient(spark_conn_id=self.spark_conn_id, yarn_conn_id=self.yarn_conn_id)

    def _check(self, state: AppState | None) -> PokeReturnValue:
        if state is None:
            self.log.info("no application carries tag %s yet", self.tag)
            return PokeReturnValue(False)
        failure = application_failure(state)
        if state.state in self.target_states and not failure:
            self.log.info("application %s is %s", state.app_id, state.state)
            return PokeReturnValue(True, state.to_json())
        if failure:
            raise AirflowException(failure)
        self.log.info("application %s is %s; waiting for %s", state.app_id, state.state, "/".join(self.target_states))
        return PokeReturnValue(False)

    def poke(self, context: Context) -> PokeReturnValue:
        if self.application_id:
            return self._check(self.client.get(self.application_id))
        return self._check(latest(self.client.find(self.tag)))

    def trigger(self) -> TFoSApplicationTrigger:
        return TFoSApplicationTrigger(
            application_id=self.application_id,
            tag=self.tag,
            target_states=self.target_states,
            spark_conn_id=self.spark_conn_id,
            yarn_conn_id=self.yarn_conn_id,
            poll_interval=self.poke_interval,
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        if event is None:  # resumed without the trigger's event: look again
            self.log.info(RESUMED_WITHOUT_EVENT)
            return self.execute(context)
        if event.get("status") != DONE:
            raise AirflowException(f"cannot watch the application: {event.get('message')}")
        result = self._check(AppState.from_json(event["app"]))
        if not result.is_done:
            raise AirflowException(f"application {event['app']['app_id']} ended {event['app']['state']}")
        return result.xcom_value


class TFoSCheckpointSensor(_DeferrableSensor):
    """Wait for a published checkpoint (or the export) in a run directory; return its path and step.

    Only checkpoints the manifest names are seen, and the manifest names a checkpoint only once it has
    been renamed into place complete: a half-written checkpoint never fires the sensor.

    :param run_dir: the run directory (templated).
    :param min_step: fire once a checkpoint of at least this step exists.
    :param newer_than: fire once a checkpoint newer than this time exists (a datetime, or templated ISO string).
    :param export: wait for the export (``export/_SUCCESS``) instead of a checkpoint.
    :param webhdfs_conn_id: the ``webhdfs`` connection for HDFS run directories.
    :param deferrable: wait in the triggerer (default: ``[operators] default_deferrable``).
    """

    template_fields: Sequence[str] = ("run_dir", "newer_than", "min_step")

    def __init__(
        self,
        *,
        run_dir: str,
        min_step: int | str | None = None,
        newer_than: datetime | str | None = None,
        export: bool = False,
        webhdfs_conn_id: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not templated(run_dir):
            check_run_dir(run_dir)
        if isinstance(min_step, int) and min_step < 0:
            raise ValueError(f"{self.task_id}: min_step must be >= 0, got {min_step}")
        self.run_dir = run_dir
        self.min_step = min_step
        self.newer_than = newer_than
        self.export = export
        self.webhdfs_conn_id = webhdfs_conn_id
        self.deferrable = deferrable

    def _condition(self) -> dict[str, Any]:
        if self.export:
            return {"export": {}}
        newer = self.newer_than
        if isinstance(newer, str) and newer:
            newer = datetime.fromisoformat(newer)
        return {
            "checkpoint": {
                "min_step": int(self.min_step) if self.min_step not in (None, "") else None,
                "newer_than": newer.timestamp() if isinstance(newer, datetime) else None,
            }
        }

    def poke(self, context: Context) -> PokeReturnValue:
        result = RunDirHook(self.run_dir, webhdfs_conn_id=self.webhdfs_conn_id).check(self._condition())
        if result is None:
            self.log.info("waiting for %s in %s", "the export" if self.export else self._condition(), self.run_dir)
            return PokeReturnValue(False)
        self.log.info("found %s at step %s", result.get("path"), result.get("step"))
        return PokeReturnValue(True, result)

    def trigger(self) -> TFoSRunDirTrigger:
        return TFoSRunDirTrigger(
            run_dir=self.run_dir,
            condition=self._condition(),
            webhdfs_conn_id=self.webhdfs_conn_id,
            poll_interval=self.poke_interval,
            timeout=self.timeout,
        )

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        if event is None:  # resumed without the trigger's event: look again
            self.log.info(RESUMED_WITHOUT_EVENT)
            return self.execute(context)
        if event.get("status") != DONE:
            raise AirflowException(f"{self.run_dir}: {event.get('message') or event}")
        return event["result"]


__all__ = ["TFoSCheckpointSensor", "YarnApplicationSensor"]
