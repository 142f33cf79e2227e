"""The local backend: the driver runs on this machine as a detached spark-submit in client mode, against
``local-cluster[N,C,MB]``, ``local[N]`` or a standalone master, tracked by
:class:`~airflow_tfos.hooks.backends.local_tracker.LocalBackend` (its records, processes and exit codes).

With a standalone master (``spark://``) the application's name carries the run's tag, and the master's
web UI (:class:`~airflow_tfos.hooks.backends.standalone.StandaloneMaster`) finds and kills the run's applications
that other Airflow workers started, of this backend's user only (the master lists every user's applications,
and a name is no proof of who submitted it): the tracker stays the fast path for the applications of this
worker."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from airflow_tfos.hooks.backends.base import Backend, Submission
from airflow_tfos.hooks.backends.local_tracker import LocalBackend
from airflow_tfos.hooks.backends.spark_submit import private_properties, spark_submit_for
from airflow_tfos.hooks.backends.standalone import StandaloneMaster, master_webui_url, name_with_tag, spark_user
from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.errors import ApplicationAlreadyRunningError
from airflow_tfos.hooks.spark_conf import check_local_master, env_conf
from airflow_tfos.shared.lease import lease_owner


class LocalSparkBackend(Backend):
    """Submit training applications as local processes; look them up, find and kill them through the tracker.

    Spark standalone has no cluster deploy mode for Python applications, so the driver always runs here;
    the runtime is imported from this installation (nothing is shipped but the user's code).

    :param tracker: the tracker of local applications.
    :param master: the Spark master (``local-cluster[...]``, ``local[N]`` or ``spark://host:port``).
    :param webui_url: a standalone master's web UI (default:
        :func:`~airflow_tfos.hooks.backends.standalone.master_webui_url`).
    :param user: the user this backend's applications run as on a standalone master, whose applications alone
        it finds and kills there (default: :func:`~airflow_tfos.hooks.backends.standalone.spark_user`).
    """

    name = "local"

    def __init__(
        self, tracker: LocalBackend, *, master: str, webui_url: str | None = None, user: str | None = None
    ) -> None:
        self.tracker = tracker
        self.master = master
        self.webui_url = webui_url or master_webui_url(master)
        self.user = user or spark_user()
        #: the standalone master, for ``spark://`` masters (None for local masters)
        self.standalone = StandaloneMaster(self.webui_url, user=self.user) if self.webui_url else None

    @property
    def lease_owner(self) -> str:
        """This worker as the owner of a run directory's lease: its host and its tracker directory."""
        return lease_owner(str(self.tracker.tracker_dir))

    def submit(self, submission: Submission) -> str:
        """Check that the master holds the executors, then start spark-submit detached under the tag's lock
        (the secrets reach it through a private properties file, deleted when it ends).

        With a standalone master the name carries the tag, and an application of the tag that the master
        lists as active (started by any worker) raises :class:`ApplicationAlreadyRunningError`.
        """
        check_local_master(
            self.master,
            num_nodes=submission.num_nodes,
            executor_cores=submission.executor_cores,
            executor_memory=submission.executor_memory,
        )
        if self.standalone is not None:
            live = [app for app in self.standalone.find_by_tag(submission.tag) if not app.is_terminal]
            if live:
                raise ApplicationAlreadyRunningError(submission.tag, [app.app_id for app in live])
            submission = dataclasses.replace(submission, name=name_with_tag(submission.name, submission.tag))
        secrets = Path(self.tracker.tracker_dir) / "secrets"
        props = private_properties(
            submission.properties_file, env_conf(submission.secret_env, backend=self.name), secrets
        )
        spark = spark_submit_for(submission, deploy_mode="client", properties_file=props, secrets_dir=secrets)
        own = [p for p in (props,) if p and p != submission.properties_file]
        return self.tracker.submit(
            spark.command(submission.application),
            tag=submission.tag,
            name=submission.name,
            run_dir=submission.run_dir,
            master=self.master,
            env={**submission.env_vars, **submission.secret_env},
            remove_after=[*own, *filter(None, [spark.own_keytab])],  # the driver re-logs in from the keytab
            webui_url=self.webui_url,
        )

    def _on_master(self, app_id: str) -> bool:
        """Whether ``app_id`` names an application of the standalone master (not one of the tracker's)."""
        return self.standalone is not None and not app_id.startswith("local-")

    def get_state(self, app_id: str) -> AppState:
        if self._on_master(app_id):
            return self.standalone.get_state(app_id)
        return self.tracker.get_state(app_id)

    def find_by_tag(self, tag: str) -> list[AppState]:
        """This worker's applications of ``tag``; with a standalone master, also the master's when none of
        this worker's lives (a live local application is the same one the master lists)."""
        local = self.tracker.find_by_tag(tag)
        if self.standalone is None or any(not app.is_terminal for app in local):
            return local
        return local + self.standalone.find_by_tag(tag)

    def find_live(self, tag: str) -> list[AppState]:
        local = self.tracker.find_live(tag)
        if local or self.standalone is None:
            return local
        return [app for app in self.standalone.find_by_tag(tag) if not app.is_terminal]

    def kill(self, app_id: str, grace_secs: float = 30) -> AppState:
        """SIGTERM the application's processes, then SIGKILL what is left after ``grace_secs``; an application
        of the standalone master (started by another worker) is killed through the master."""
        if self._on_master(app_id):
            return self.standalone.kill(app_id, grace_secs)
        return self.tracker.kill(app_id, grace_secs)
