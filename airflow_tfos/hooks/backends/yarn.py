"""The YARN backend: the driver runs in a YARN container (``--deploy-mode cluster``), tracked and killed
through the ResourceManager REST API (:class:`~airflow_tfos.hooks.yarn.YarnHook`)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.backends.base import Backend, Submission, default_tracker_dir, tag_lock
from airflow_tfos.hooks.backends.spark_submit import private_properties, spark_submit_for
from airflow_tfos.hooks.backends.state import LIVE_STATES, AppState
from airflow_tfos.hooks.errors import ApplicationAlreadyRunningError, TFoSSubmitError
from airflow_tfos.hooks.spark_conf import check_container_fits, env_conf, runtime_zip
from airflow_tfos.hooks.yarn import YarnApplicationNotFound, YarnHook

if TYPE_CHECKING:
    from airflow_tfos.shared.storage import Storage

log = logging.getLogger(__name__)


#: Where spark-submit stages an application's files, under the user's home on HDFS (Spark's default).
STAGING_DIR = ".sparkStaging"
#: A Java exception in spark-submit's output: ``Exception in thread "main" org.x.YarnException: what went wrong``.
_JAVA_CAUSE = re.compile(r'^(Exception in thread "\w+" )?(?:[a-z_$][\w$]*\.)+[\w$]*(?:Exception|Error): (.+)$')


def submit_failure(message: str) -> str:
    """spark-submit's failure with its cause first: the message of the exception that ended spark-submit (e.g.
    the ResourceManager's answer: ``... submitted by user etl to unknown queue: nightly``), then the rest."""
    found = [m for line in message.splitlines() if (m := _JAVA_CAUSE.match(line.strip()))]
    ended = [m for m in found if m.group(1)] or found
    return f"{ended[0].group(2).strip()}\n{message}" if ended else message


class YarnBackend(Backend):
    """Submit training applications to YARN in cluster mode; look them up, find and kill them through the RM.

    A tag is no proof of who submitted an application (anyone can set any tag): a search by tag keeps
    only SPARK applications of the connection's application user.

    :param hook: the ResourceManager's hook.
    :param tracker_dir: where the tags' locks and the private properties files go (default:
        :func:`~airflow_tfos.hooks.backends.base.default_tracker_dir`).
    :param min_kill_wait_secs: :meth:`kill` waits at least this long for the RM to report the kill.
    :param staging_storage: makes the HDFS storage through which :meth:`kill` removes what spark-submit staged for
        the killed application (``/user/<its user>/.sparkStaging/<id>``: Spark's application master removes it
        itself when it ends, but a kill may leave it no time); None: left alone.
    """

    name = "yarn"

    def __init__(
        self,
        hook: YarnHook,
        *,
        tracker_dir: str | None = None,
        min_kill_wait_secs: float = 30,
        staging_storage: Callable[[], Storage] | None = None,
        app_user: str | None = None,
    ) -> None:
        self.hook = hook
        self.app_user = app_user
        self.tracker_dir = tracker_dir or default_tracker_dir()
        self.min_kill_wait_secs = min_kill_wait_secs
        self.staging_storage = staging_storage

    def executor_path(self, path: str) -> str:
        """Shipped with ``--files``: in the container's working directory."""
        return f"./{Path(path).name}"

    def submit(self, submission: Submission) -> str:
        """Check that the containers fit, then spark-submit in cluster mode under the tag's lock."""
        limit = self.hook.get_max_allocation()
        check_container_fits(submission.conf, max_memory_mb=limit.memory_mb, max_vcores=limit.vcores)
        secret_conf = env_conf(submission.secret_env, backend=self.name)
        secret_conf.update({f"spark.yarn.appMasterEnv.{k}": v for k, v in submission.driver_secret_env.items()})
        runtime = [str(runtime_zip(submission.cache_dir))] if submission.ship_runtime else []
        gpu_script = [submission.gpu_script] if submission.gpu_script else []
        with tag_lock(self.tracker_dir, submission.tag):
            live = self.find_live(submission.tag)
            if live:
                raise ApplicationAlreadyRunningError(submission.tag, [app.app_id for app in live])
            secrets = Path(self.tracker_dir) / "secrets"
            props = private_properties(submission.properties_file, secret_conf, secrets)
            try:
                spark = spark_submit_for(
                    submission,
                    deploy_mode="cluster",
                    properties_file=props,
                    py_files_first=runtime,
                    more_files=gpu_script,
                    secrets_dir=secrets,
                )
                try:
                    spark.submit(submission.application)
                except AirflowException as exc:
                    raise TFoSSubmitError(submit_failure(str(exc))) from exc
                finally:
                    spark.forget_keytab()  # spark-submit staged it on HDFS for the application master
            finally:
                if props and props != submission.properties_file:
                    Path(props).unlink(missing_ok=True)
        if not spark.application_id:
            raise TFoSSubmitError(
                "spark-submit ended without naming the YARN application it submitted: keep the log level of "
                "org.apache.spark.deploy.yarn.Client at INFO in the Spark log4j2 settings"
            )
        log.info("submitted YARN application %s (tag %s)", spark.application_id, submission.conf["spark.yarn.tags"])
        return spark.application_id

    def _owner(self) -> dict[str, str]:
        """Who a run's application must belong to (its tag is predictable: anyone could set it)."""
        return {"user": self.app_user or self.hook.application_user, "application_type": "SPARK"}

    def get_state(self, app_id: str) -> AppState:
        return self.hook.get_application(app_id)

    async def aget_state(self, app_id: str) -> AppState:
        return await self.hook.aget_application(app_id)

    def find_by_tag(self, tag: str) -> list[AppState]:
        return self.hook.find_applications(tag=tag, **self._owner())

    async def afind_by_tag(self, tag: str) -> list[AppState]:
        user = self.app_user or await self.hook.aapplication_user()
        return await self.hook.afind_applications(tag=tag, user=user, application_type="SPARK")

    def find_live(self, tag: str) -> list[AppState]:
        return self.hook.find_applications(tag=tag, states=list(LIVE_STATES), **self._owner())

    def kill(self, app_id: str, grace_secs: float = 30) -> AppState:
        """YARN kills a container with SIGTERM, then SIGKILL after ``yarn.nodemanager.sleep-delay-before-sigkill.ms``;
        ``grace_secs`` is how long to wait for the RM to report it killed (at least ``min_kill_wait_secs``)."""
        try:
            killed = self.hook.kill_application(app_id, timeout=max(grace_secs, self.min_kill_wait_secs))
        except YarnApplicationNotFound as exc:
            return _gone(app_id, exc)
        self.remove_staging(killed)
        return killed

    def clean_up(self, app: AppState) -> None:
        """An application that failed or was killed may leave its staging folder: Spark's application master
        removes it only when it succeeds or ends its last attempt itself, not when its container was killed
        (a lost node, the kernel's OOM killer, a kill through the RM)."""
        if app.is_terminal and app.final_status != "SUCCEEDED":
            self.remove_staging(app)

    def remove_staging(self, app: AppState) -> None:
        """Remove what spark-submit staged on HDFS for ``app`` (at Spark's default ``spark.yarn.stagingDir``: the
        user's home) once it ended; a failure to do so is logged, not raised."""
        if self.staging_storage is None or not app.is_terminal:
            return
        path = f"/user/{app.user or self.app_user or self.hook.application_user}/{STAGING_DIR}/{app.app_id}"
        try:
            storage = self.staging_storage()
            if storage.exists(path):
                storage.delete(path)
                log.info("removed %s, what spark-submit staged for %s", path, app.app_id)
        except Exception as exc:  # the kill worked: a leftover on HDFS is not worth failing it for
            log.warning("cannot remove %s (staged for %s): %s", path, app.app_id, exc)

    async def akill(self, app_id: str, grace_secs: float = 30) -> AppState:
        try:
            return await self.hook.akill_application(app_id, timeout=max(grace_secs, self.min_kill_wait_secs))
        except YarnApplicationNotFound as exc:
            return _gone(app_id, exc)


def _gone(app_id: str, exc: Exception) -> AppState:
    return AppState(app_id=app_id, state="KILLED", final_status="KILLED", diagnostics=f"not killed: {exc}")
