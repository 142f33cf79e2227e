"""The local backend: the driver runs on this machine as a detached spark-submit in client mode, against
``local-cluster[N,C,MB]``, ``local[N]`` or a standalone master, tracked by
:class:`~airflow_tfos.hooks.local.LocalBackend` (its records, processes and exit codes)."""

from __future__ import annotations

from pathlib import Path

from airflow_tfos.hooks.backend import Backend, Submission
from airflow_tfos.hooks.local import LocalBackend
from airflow_tfos.hooks.spark_conf import check_local_master, env_conf
from airflow_tfos.hooks.spark_submit import private_properties, spark_submit_for
from airflow_tfos.hooks.state import AppState


class LocalSparkBackend(Backend):
    """Submit training applications as local processes; look them up, find and kill them through the tracker.

    Spark standalone has no cluster deploy mode for Python applications, so the driver always runs here;
    the runtime is imported from this installation (nothing is shipped but the user's code).

    :param tracker: the tracker of local applications.
    :param master: the Spark master (``local-cluster[...]``, ``local[N]`` or ``spark://host:port``).
    """

    name = "local"

    def __init__(self, tracker: LocalBackend, *, master: str) -> None:
        self.tracker = tracker
        self.master = master

    def submit(self, submission: Submission) -> str:
        """Check that the master holds the executors, then start spark-submit detached under the tag's lock
        (the secrets reach it through a private properties file, deleted when it ends)."""
        check_local_master(
            self.master,
            num_nodes=submission.num_nodes,
            executor_cores=submission.executor_cores,
            executor_memory=submission.executor_memory,
        )
        secrets = Path(self.tracker.tracker_dir) / "secrets"
        props = private_properties(
            submission.properties_file, env_conf(submission.secret_env, backend=self.name), secrets
        )
        spark = spark_submit_for(submission, deploy_mode="client", properties_file=props)
        return self.tracker.submit(
            spark.command(submission.application),
            tag=submission.tag,
            name=submission.name,
            run_dir=submission.run_dir,
            master=self.master,
            env={**submission.env_vars, **submission.secret_env},
            remove_after=[props] if props and props != submission.properties_file else [],
        )

    def get_state(self, app_id: str) -> AppState:
        return self.tracker.get_state(app_id)

    def find_by_tag(self, tag: str) -> list[AppState]:
        return self.tracker.find_by_tag(tag)

    def find_live(self, tag: str) -> list[AppState]:
        return self.tracker.find_live(tag)

    def kill(self, app_id: str, grace_secs: float = 30) -> AppState:
        """SIGTERM the application's processes, then SIGKILL what is left after ``grace_secs``."""
        return self.tracker.kill(app_id, grace_secs)
