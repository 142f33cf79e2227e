"""The training lifecycle as separate tasks: feed a running application, and shut it down.

Start the application with :class:`~airflow_tfos.operators.train.TFoSLaunchClusterOperator`; each
:class:`TFoSFeedOperator` asks it to train on one more dataset and waits until that is done;
:class:`TFoSShutdownClusterOperator` (with ``trigger_rule="all_done"``) stops it gracefully, then kills
it after a grace period.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator
from airflow.sdk.configuration import conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_tfos.hooks.backends.apps import ApplicationClient
from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.errors import RunConfigError
from airflow_tfos.hooks.run_dir import (
    PollPacer,
    RunDirHook,
    RunWatch,
    check_run_dir,
    resolve_run_dir,
    run_key,
    run_tag,
    safe_name,
    templated,
)
from airflow_tfos.links.tfos import TRACKING_URL_KEY, SparkApplicationLink, TrainingReportLink, link_url
from airflow_tfos.operators.checks import rendered
from airflow_tfos.operators.errors import RenderedArgumentError
from airflow_tfos.sensors.tfos import application_failure
from airflow_tfos.shared.spec import SpecError, allowed_feed_functions, check_data, check_feed_data
from airflow_tfos.triggers.tfos import APP_ENDED, DONE, RESUMED_WITHOUT_EVENT, TFoSRunDirTrigger, watch_arguments

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context


class _RunTaskOperator(BaseOperator):
    """A task acting on the application that works on ``run_dir``, or on the default run directory of the
    launch task ``launch_task_id`` in the same DAG run (found as the launch task found it, with no XCom: a
    shutdown with ``trigger_rule="all_done"`` runs even when the launch failed before pushing anything).

    A templated ``run_dir`` must render to a folder under ``[tfos] run_dir_base`` unless
    ``allow_run_dir_outside_base`` (it may come from ``dag_run.conf``); ``..`` is never accepted.
    """

    template_fields: Sequence[str] = ("run_dir", "application_id")
    operator_extra_links = (SparkApplicationLink(), TrainingReportLink())

    def __init__(
        self,
        *,
        run_dir: str | None = None,
        launch_task_id: str | None = None,
        application_id: str | None = None,
        spark_conn_id: str = "spark_default",
        yarn_conn_id: str = "yarn_default",
        webhdfs_conn_id: str | None = None,
        poll_interval: float = 10.0,
        allow_run_dir_outside_base: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        where = f"{type(self).__name__} {self.task_id!r}"
        if (run_dir is None) == (launch_task_id is None):
            raise RunConfigError(
                f"{where}: give run_dir (the launch task's run directory) or launch_task_id (the launch task, "
                "whose default run directory in this DAG run is used), not both or neither"
            )
        self.allow_run_dir_outside_base = allow_run_dir_outside_base
        self._run_dir_as_written = run_dir  # before rendering: whether it is templated
        if run_dir is not None and not templated(run_dir):
            check_run_dir(run_dir, f"{where}: run_dir")
        self.run_dir = run_dir
        self.launch_task_id = launch_task_id
        self.application_id = application_id
        self.spark_conn_id = spark_conn_id
        self.yarn_conn_id = yarn_conn_id
        self.webhdfs_conn_id = webhdfs_conn_id
        self.poll_interval = poll_interval
        #: what this try found for the extra links (see airflow_tfos.links.tfos)
        self.link_targets: dict[str, str] = {}

    @cached_property
    def apps(self) -> ApplicationClient:
        return ApplicationClient(spark_conn_id=self.spark_conn_id, yarn_conn_id=self.yarn_conn_id)

    @cached_property
    def run_dir_hook(self) -> RunDirHook:
        return RunDirHook(self.run_dir, webhdfs_conn_id=self.webhdfs_conn_id)

    def resolve(self, context: Context) -> str:
        """The run directory this task acts on: ``run_dir`` rendered, normalised and checked against
        ``[tfos] run_dir_base``, else the launch task's default one."""
        self.run_dir = resolve_run_dir(
            self.run_dir,
            context,
            task_id=self.launch_task_id,
            as_written=self._run_dir_as_written,
            allow_outside_base=self.allow_run_dir_outside_base,
        )
        return self.run_dir

    def live_application(self) -> AppState | None:
        """The application named by ``application_id`` if it is live, else a live one with the run's tag.

        A named application must be one that a search for the run's tag finds (it carries the tag and, on YARN
        or a standalone master, runs as the user of this task's applications): another one is refused with
        :class:`RunConfigError`, never stopped nor killed.
        """
        tag = run_tag(self.run_dir)
        if self.application_id:
            state = self.apps.get(self.application_id)
            if not state.is_terminal:
                if all(app.app_id != state.app_id for app in self.apps.find(tag)):
                    raise RunConfigError(
                        f"{type(self).__name__} {self.task_id!r}: application_id {state.app_id} is not an "
                        f"application of {self.run_dir} (it does not carry the run's tag {tag}, or runs as "
                        "another user than this connection's applications): give the application the launch "
                        "task started, or no application_id to act on the live one with the run's tag"
                    )
                return self._linked(state)
        live = [a for a in self.apps.find(tag) if not a.is_terminal]
        return self._linked(live[0]) if live else None

    def _linked(self, app: AppState) -> AppState:
        url = link_url(app.tracking_url, f"the UI of application {app.app_id}", self.log)
        if url:
            self.link_targets[TRACKING_URL_KEY] = url
        return app


class TFoSFeedOperator(_RunTaskOperator):
    """Ask the running application to train on one dataset, and wait until it has.

    Idempotent by ``feed_id``: a feed already done returns its result; a feed already requested is
    waited for, not requested again. A feed that failed, or that was done for another spec than the run's
    (the spec changed, then the DAG run was cleared), is requested again.

    :param run_dir: the run directory of the application (templated); or
    :param launch_task_id: the launch task, whose default run directory in this DAG run is used.
    :param data: what to feed (templated), as ``data`` of :class:`TFoSTrainOperator`; a data function only if the
        launch allows it (its ``feed_functions``, ``data`` or ``validation_data``), Spark's own reader options
        only, a table by its plain name. Anything else fails the task before the feed is requested, and the
        application refuses it too.
    :param args: replaces the spec's ``args`` for this feed (templated), e.g. ``{"epochs": 2}``.
    :param feed_id: the feed's id (templated); default ``<task_id>-<logical date>``.
    :param application_id: the application (templated); default: the live one with the run's tag.
    :param feed_timeout: seconds to wait for the feed to be done (None: no limit).
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    """

    template_fields: Sequence[str] = ("run_dir", "application_id", "data", "args", "feed_id")
    template_fields_renderers = {"data": "json", "args": "json"}

    def __init__(
        self,
        *,
        data: dict | None = None,
        args: dict | list | None = None,
        feed_id: str | None = None,
        feed_timeout: float | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.data = data
        self.check_data(pending=templated)
        self.args = args
        self.feed_id = feed_id
        self.feed_timeout = feed_timeout
        self.deferrable = deferrable
        #: the feed's done record, once known (for lineage)
        self._feed_result: dict[str, Any] | None = None

    def execute(self, context: Context) -> Any:
        self._feed_result = self._feed(context)
        return self._feed_result

    def check_data(self, *, pending: Callable[[Any], bool] = rendered) -> None:
        """Raise :class:`RunConfigError` naming the task unless ``data`` can be read: at parse time (values still
        holding Jinja are checked for their keys only) and after rendering."""
        if self.data is None:
            return
        try:
            check_data(self.data, "data", pending=pending)
        except SpecError as exc:
            raise RunConfigError(f"TFoSFeedOperator {self.task_id!r}: {str(exc).removeprefix('spec.json ')}") from None

    def check_allowed(self, spec: dict[str, Any]) -> None:
        """Raise :class:`RenderedArgumentError` (no retry) unless the application of ``spec`` (the run's
        spec.json) would serve ``data``: a data function it allows, Spark's own reader options, a plain table
        name. The application checks the same against the spec it verified; this fails the task sooner."""
        try:
            check_feed_data(self.data, allowed_feed_functions(spec), "data")
        except SpecError as exc:
            raise RenderedArgumentError(f"TFoSFeedOperator {self.task_id!r}: {exc}") from None

    def _feed(self, context: Context) -> dict[str, Any]:
        self.resolve(context)
        self.check_data()  # rendered now: before the feed is requested
        feed_id = self.feed_id or safe_name(
            f"{self.task_id}-{run_key(context['dag_run'].logical_date, context['dag_run'].run_id)}"
        )
        rundir = self.run_dir_hook.run_dir_contents
        done = rundir.feed_result(feed_id)
        stale = None if done is None else stale_feed(done, (rundir.read_spec() or {}).get("spec_hash"))
        if done is not None and stale is None:
            self.log.info("feed %s was done already (step %s)", feed_id, done.get("step"))
            return done
        if done is not None:  # a try that failed, or a feed of an earlier spec: this one asks again
            self.log.info("feed %s %s: requesting it again", feed_id, stale)
            rundir.withdraw_feed(feed_id)
        app = self.live_application()
        if app is None:
            raise AirflowException(
                f"no live application works on {self.run_dir}: start it with TFoSLaunchClusterOperator first"
            )
        if self.data is not None:
            self.check_allowed(rundir.read_spec() or {})
        request = {"data": self.data} if self.data is not None else {}
        if self.args is not None:
            request["args"] = self.args
        if rundir.request_feed(feed_id, request):
            self.log.info("requested feed %s from application %s", feed_id, app.app_id)
        else:
            self.log.info("feed %s was requested already: waiting for it", feed_id)
        condition = {"feed": feed_id}
        if self.deferrable:
            self.defer(
                trigger=TFoSRunDirTrigger(
                    condition=condition, application_id=app.app_id, timeout=self.feed_timeout, **watch_arguments(self)
                ),
                method_name="execute_complete",
            )
        deadline = None if self.feed_timeout is None else time.monotonic() + self.feed_timeout
        watch, pacer = RunWatch(), PollPacer(self.poll_interval)
        while True:
            result = self.run_dir_hook.check(condition)
            if result is not None:
                self.log.info("feed %s done at step %s", feed_id, result.get("step"))
                return feed_outcome(feed_id, result)
            for line in self.run_dir_hook.watch_lines(watch):
                self.log.info("feed %s: %s", feed_id, line)
            state = self.apps.get(app.app_id)
            if state.is_terminal:
                result = self.run_dir_hook.check(condition)
                if result is not None:
                    return feed_outcome(feed_id, result)
                raise AirflowException(self._not_done(feed_id, state))
            if deadline is not None and time.monotonic() > deadline:
                raise AirflowException(f"feed {feed_id} was not done within {self.feed_timeout:.0f} s (feed_timeout)")
            time.sleep(pacer.next_secs(watch.status, time.time()))

    def execute_complete(self, context: Context, event: dict[str, Any] | None = None) -> Any:
        if event is None:  # resumed without the trigger's event: start over (the feed's request is kept)
            self.log.info(RESUMED_WITHOUT_EVENT)
            return self.execute(context)
        if event.get("status") == DONE:
            self._feed_result = feed_outcome(event["result"].get("feed_id", "?"), event["result"])
            return self._feed_result
        if event.get("status") == APP_ENDED:
            raise AirflowException(self._not_done(self.feed_id or "", AppState.from_json(event["app"])))
        raise AirflowException(f"the feed was not done: {event.get('message') or event}")

    def _not_done(self, feed_id: str, state: AppState) -> str:
        """Why a feed was not done by an application that ended: the driver's error first, when it left one."""
        try:
            error = (self.run_dir_hook.run_dir_contents.read_status() or {}).get("error")
        except Exception as exc:  # the application's own account still says something
            self.log.warning("cannot read the status of %s: %s", self.run_dir, exc)
            error = None
        ended = application_failure(state) or f"{state} ended"
        what = f"feed {feed_id} was not done" if feed_id else "the feed was not done"
        return f"{error} ({what}: {ended})" if error else f"{what}: {ended}"

    # --- OpenLineage (asked for by the OpenLineage provider; its classes are imported only then) ------------

    def get_openlineage_facets_on_start(self) -> OperatorLineage:
        """The data this feed trains on, and the run's checkpoints it will write."""
        from airflow_tfos.operators.lineage import feed_operator_lineage

        return feed_operator_lineage(self, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> OperatorLineage:
        """The data this feed trained on, and the run's checkpoints with the step it reached."""
        from airflow_tfos.operators.lineage import feed_operator_lineage

        return feed_operator_lineage(self, self._feed_result)


def stale_feed(record: dict[str, Any], spec_hash: str | None) -> str | None:
    """Why a feed's done record does not stand for this task's feed in a run of spec ``spec_hash`` (None: it
    does): the feed failed, or it was trained on by an application of another spec (the DAG run was
    cleared after its spec changed, and the launch started a new application of the new spec)."""
    if record.get("error"):
        return f"failed before ({record['error']})"
    done_for = record.get("spec_hash")
    if done_for and spec_hash and done_for != spec_hash:
        return f"was done for spec {done_for}, not for the run's spec {spec_hash}"
    return None


def feed_outcome(feed_id: str, record: dict[str, Any]) -> dict[str, Any]:
    """A feed's done record, or the exception its error stands for (the error first, in the driver's words)."""
    error = record.get("error")
    if not error:
        return record
    if record.get("refused"):  # asked again, it is refused again: no retry
        raise AirflowFailException(f"{error} (feed {feed_id} was refused by the application, which serves on)")
    if record.get("exit_code") == 2:
        raise AirflowException(f"{error} (feed {feed_id} failed on its input; the application serves on)")
    raise AirflowException(f"{error} (feed {feed_id} failed: the application failed with it)")


class TFoSShutdownClusterOperator(_RunTaskOperator):
    """Stop the application of a run: a graceful stop request, then a kill after ``grace_secs``.

    A no-op when no application is live (already stopped, finished, or never started): running it
    twice is safe. Meant for ``trigger_rule="all_done"``.

    :param run_dir: the run directory (templated); or
    :param launch_task_id: the launch task, whose default run directory in this DAG run is used (no XCom
        needed, so the shutdown runs even when the launch failed).
    :param application_id: the application (templated); default: the live one with the run's tag.
    :param grace_secs: how long the graceful stop may take before the application is killed.
    :param reason: recorded with the stop request.
    """

    def __init__(self, *, grace_secs: float = 300.0, reason: str = "shutdown task", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if grace_secs < 0:
            raise RunConfigError(f"TFoSShutdownClusterOperator {self.task_id!r}: grace_secs must be >= 0")
        self.grace_secs = grace_secs
        self.reason = reason

    def execute(self, context: Context) -> Any:
        self.resolve(context)
        app = self.live_application()
        if app is None:
            self.log.info("no live application works on %s: nothing to stop", self.run_dir)
            return {"application_id": self.application_id, "state": None, "stopped": False}
        rundir = self.run_dir_hook.run_dir_contents
        rundir.request_stop(self.reason, application_id=app.app_id)
        self.log.info("asked application %s to stop (grace %.0f s)", app.app_id, self.grace_secs)
        deadline = time.monotonic() + self.grace_secs
        while not app.is_terminal and time.monotonic() < deadline:
            time.sleep(min(self.poll_interval, max(0.5, deadline - time.monotonic())))
            app = self.apps.get(app.app_id)
        if not app.is_terminal:
            self.log.warning("application %s did not stop within %.0f s: killing it", app.app_id, self.grace_secs)
            app = self.apps.kill(app.app_id)
        self.log.info("application %s is %s/%s", app.app_id, app.state, app.final_status)
        return {"application_id": app.app_id, "state": app.state, "final_status": app.final_status, "stopped": True}
