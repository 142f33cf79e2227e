"""The protocol of one request to a run directory, as the operators that start Spark applications use it.

:class:`ApplicationRun` holds what every such request does: check the spec, find out whether the work is
done already, reattach to a live application of the same spec or write the spec and submit one (two tries
that race both keep the earliest application and kill the other), and name the application that did the
work. :class:`TrainingRun` adds what training means by done (an export of this spec), its result and its
failure; batch inference has its own (``airflow_tfos.operators.inference.InferenceRun``).

Every application it adopts (reattaching, waiting out another worker's lease, after a submission refused for
a live tag, or the winner of a race) is one that the backend finds by the run's tag (of this connection's
user, where the cluster is shared) and that works on this spec (:meth:`ApplicationRun.works_on_spec`).

It does no waiting and knows nothing of Airflow's task machinery: the operators wait, defer and push
XComs, and call these steps in order (``already_done``, ``reattach_or_submit``, ``finish``).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.backends.local_tracker import ApplicationAlreadyRunningError
from airflow_tfos.hooks.run_dir import pick_winner, progress_line, run_tag
from airflow_tfos.shared.errors import DRIVER_EXIT_TOKEN_REFUSED
from airflow_tfos.shared.events import SUBMIT, SUBMITTED
from airflow_tfos.shared.fingerprint import carry_tables, changes, pending_tables, run_fingerprint, unseen
from airflow_tfos.shared.lease import Lease, lease_timeout, take_lease, wait_for_lease
from airflow_tfos.shared.rundir import REPORT_HTML
from airflow_tfos.shared.spec import RunSpec, parse_spec, spec_digest, spec_hash
from airflow_tfos.shared.storage import Storage, storage_for

if TYPE_CHECKING:
    from airflow_tfos.hooks.backends.state import AppState
    from airflow_tfos.hooks.tfos import TFoSHook
    from airflow_tfos.shared.rundir import RunDir


@dataclass(frozen=True)
class AppResources:
    """How the Spark application of a run is submitted (what the spec does not say): the keyword arguments
    of ``TFoSHook.submit``.

    :param name: the application's name.
    :param num_nodes: executors it asks for (one per TF node).
    :param executor_cores: cores per executor.
    :param executor_memory: JVM heap per executor.
    :param tf_memory_mb: memory of each TF node process, off the JVM heap.
    :param gpus_per_node: GPUs per executor.
    :param conf: extra Spark settings.
    """

    name: str
    num_nodes: int
    executor_cores: int = 1
    executor_memory: str = "2g"
    tf_memory_mb: int | None = None
    gpus_per_node: int = 0
    conf: dict[str, str] = field(default_factory=dict)


def last_submitted(rundir: RunDir) -> str | None:
    """The application submitted last for a run (as the backend names it), from the run's events."""
    submitted = rundir.events(SUBMITTED)
    return submitted[-1].get("application_id") if submitted else None


#: What YARN's diagnostics of a failed application say besides the cause (pointers to its UI, the verdict).
_BOILERPLATE = re.compile(
    r"For more detailed output, check the application tracking page.*|Then click on links to logs.*|"
    r"^\.?\s*Failing the application\.\s*$|Failing this attempt\.",
    re.MULTILINE,
)


def cluster_reason(diagnostics: str, limit: int = 600) -> str:
    """The cause in a cluster's diagnostics of a failed application, on one line: YARN's ``... due to AM Container
    for appattempt_... exited with exitCode: -1000`` with its ``Diagnostics:`` (e.g. ``Failed to download resource
    ...``), without the pointers to its UI; or the last line of the local backend's."""
    text = _BOILERPLATE.sub("", diagnostics)
    text = re.sub(r"\[\d{4}-\d\d-\d\d [\d:.]+\]", "", text)  # YARN's timestamps
    lines = [line.strip() for line in text.splitlines() if line.strip(" .")]
    if not lines:
        return ""
    due = next((m.group(1) for line in lines if (m := re.search(r"\bdue to (.+)", line))), None)
    said = next((line.split("Diagnostics:", 1)[1].strip() for line in lines if "Diagnostics:" in line), None)
    reason = "; ".join(part for part in (due, said) if part) or lines[-1]
    reason = re.sub(r"\s+", " ", reason)
    return reason if len(reason) <= limit else reason[: limit - 3] + "..."


class ApplicationRun:
    """One request (a spec) to one run directory, and the application that works on it.

    :param run_dir: the run directory (resolved).
    :param spec: what this request asks for.
    :param hook: the backend that submits, finds and kills applications.
    :param run_dir_contents: the run directory's contents (what :mod:`~airflow_tfos.shared.rundir` reads and writes).
    :param log: where the steps say what they do (the operator's task log).
    :param input_storage: the storage that lists an input path for the fingerprint (default: by the path's scheme).
    """

    def __init__(
        self,
        *,
        run_dir: str,
        spec: RunSpec,
        hook: TFoSHook,
        run_dir_contents: RunDir,
        log: logging.Logger,
        input_storage: Callable[[str], Storage] | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.spec = spec
        self.spec_json = spec.to_json()
        self.digest = spec_hash(self.spec_json)
        self.hook = hook
        self.run_dir_contents = run_dir_contents
        self.log = log
        #: the latest result a step returned (what the task returns)
        self.outcome: dict[str, Any] | None = None
        self.input_storage = input_storage or storage_for
        self._fingerprint: dict[str, Any] | None = None

    def check(self) -> None:
        """Raise :class:`~airflow_tfos.shared.spec.SpecError` naming the field unless the driver can run the spec."""
        parse_spec(self.spec_json)

    # --- what subclasses say -----------------------------------------------------------------------------

    def measure_fingerprint(self) -> dict[str, Any]:
        """The fingerprint of what this request reads and runs, as it is now (listings, not contents)."""
        return run_fingerprint(self.spec_json, self.input_storage)

    @property
    def computed_fingerprint(self) -> dict[str, Any] | None:
        """The fingerprint if this try computed it already, else None (no listing is made for asking)."""
        return self._fingerprint

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The fingerprint of this try's input and code (computed on first use)."""
        if self._fingerprint is None:
            found = self.measure_fingerprint()
            self.log.info(
                "fingerprint %s of the input and code (%s) in %.2f s",
                found["hash"],
                ", ".join(f"{n}: {i.get('count', i.get('kind'))} files" for n, i in found["inputs"].items())
                or "no input",
                found["seconds"],
            )
            for what in unseen(found):
                self.log.warning("a change of the input %s cannot be detected: a rerun will not see it", what)
            self._fingerprint = found
        return self._fingerprint

    def already_done(self) -> dict[str, Any] | None:
        """The result, if this request's work is there already (then nothing is submitted)."""
        raise NotImplementedError

    def result(self, app: AppState | None) -> dict[str, Any]:
        """What the task returns once the work is done (by ``app``, or found done)."""
        raise NotImplementedError

    def before_submit(self) -> None:
        """What is done in the run directory before the spec is written and an application submitted."""

    def finish(self, app: AppState) -> dict[str, Any]:
        """The result of an application that ended, or an error saying what failed."""
        raise NotImplementedError

    # --- submit, with its race handling ------------------------------------------------------------------

    def reattach_or_submit(self, ti: Any, resources: AppResources) -> AppState:
        """Reattach to a live application carrying the run's tag that works on this spec, else write the spec
        and submit one (a live application of another spec is killed first)."""
        live = self.live_on_spec()
        if not live:  # another worker's lease: adopt its application if visible, else wait for the lease to lapse
            owner, timeout = self.hook.lease_owner, lease_timeout(ti)
            adopted = wait_for_lease(
                self.run_dir_contents,
                owner=owner,
                find_live=self.live_on_spec,
                timeout_secs=timeout,
                ended=self.lease_application_ended,
                logger=self.log,
            )
            return adopted or self.submit(ti, resources)
        winner = pick_winner([a.app_id for a in live])
        self.log.info("reattaching to application %s, which already works on %s", winner, self.run_dir)
        return next(a for a in live if a.app_id == winner)

    def lease_application_ended(self, lease: Lease) -> bool:
        """Whether this task's backend knows that the application ``lease`` names has ended (False when it cannot
        tell: another backend's, or one it does not find)."""
        if lease.backend != self.hook.backend or not lease.application_id:
            return False
        try:
            return self.hook.get_state(lease.application_id).is_terminal
        except Exception as exc:  # not found, not reachable: no early lapse
            self.log.debug("cannot tell whether %s has ended: %s", lease.application_id, exc)
            return False

    def live_on_spec(self) -> list[AppState]:
        """The live applications carrying the run's tag that work on this spec (others are killed)."""
        return [app for app in self.hook.find_live(run_tag(self.run_dir)) if self.works_on_spec(app)]

    def works_on_spec(self, app: AppState) -> bool:
        """Whether the live ``app`` works on this spec; if it works on another one, kill it (False)."""
        found = self.run_dir_contents.application_spec_hash(app.app_id)
        if found == self.digest:
            return True
        self.log.warning(
            "application %s works on spec %s of %s, not on this task's spec %s: killing it (a new one resumes "
            "from the latest checkpoint)",
            app.app_id,
            found,
            self.run_dir,
            self.digest,
        )
        self.hook.kill(app.app_id)
        return False

    def record_owner(self, ti: Any) -> None:
        """Write owner.json: the Dag whose readers may read this run's report on the api-server."""
        dag_id, task_id, run_id = (getattr(ti, name, None) for name in ("dag_id", "task_id", "run_id"))
        if not all(isinstance(value, str) for value in (dag_id, task_id, run_id)):
            return  # not a task instance (the runs API used directly): the report is for readers of every Dag
        map_index = getattr(ti, "map_index", -1)
        self.run_dir_contents.write_owner(
            dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index if isinstance(map_index, int) else -1
        )

    def submit(self, ti: Any, resources: AppResources) -> AppState:
        """Write the spec and submit an application; when another try submitted one for this run too, keep the
        earliest and kill the other."""
        rundir = self.run_dir_contents
        current = rundir.read_spec()
        if current and current.get("spec_hash") != self.digest:
            self.log.warning(
                "the spec in %s changed (%s -> %s): checkpoints of the old spec are resumed only if the model matches",
                self.run_dir,
                current.get("spec_hash"),
                self.digest,
            )
        self.before_submit()
        rundir.write_spec(self.spec_json)
        self.record_owner(ti)
        rundir.clear_stop()  # a stop request left for an earlier application must not stop this one
        latest = rundir.latest_checkpoint() if self.spec.kind == "train" else None
        if latest:
            self.log.info("resuming from checkpoint step %d (%s)", latest.step, latest.path)
        elif self.spec.kind == "train":
            self.log.info("no checkpoint in %s: training starts from the beginning", self.run_dir)
        tag = run_tag(self.run_dir)
        rundir.add_event(SUBMIT, try_number=ti.try_number, resume_step=latest.step if latest else 0)
        take_lease(rundir, owner=self.hook.lease_owner, backend=self.hook.backend)
        try:
            app_id = self.hook.submit(self.run_dir, tag=tag, spec_hash=spec_digest(self.spec_json), **vars(resources))
        except ApplicationAlreadyRunningError as exc:
            # another try of this task submitted first (the local backend's per-tag lock said so): attach to it
            # only if it works on this spec
            live = self.live_on_spec()
            if not live:
                self.log.warning("%s, and none works on this task's spec %s", exc, self.digest)
                raise
            winner = pick_winner([a.app_id for a in live])
            self.log.warning("%s: attaching to application %s, which works on this spec", exc, winner)
            return next(a for a in live if a.app_id == winner)
        self.log.info("submitted application %s for %s (tag %s)", app_id, self.run_dir, tag)
        racers = [a.app_id for a in self.hook.find_live(tag) if a.app_id != app_id and self.works_on_spec(a)]
        winner = pick_winner(sorted({*racers, app_id}))
        if winner != app_id:
            self.log.warning(
                "another try submitted %s for this run first: killing %s and attaching to it", winner, app_id
            )
            self.hook.kill(app_id)
            app_id = winner
        rundir.add_event(SUBMITTED, application_id=app_id, try_number=ti.try_number)
        take_lease(rundir, owner=self.hook.lease_owner, backend=self.hook.backend, application_id=app_id)
        return self.hook.get_state(app_id)

    def submitted_application(self) -> str | None:
        """The application submitted last for this run (as the backend names it), from the run's events."""
        return last_submitted(self.run_dir_contents)


class TrainingRun(ApplicationRun):
    """A training (or serving) request: done means an export of this spec, input and code in the run directory.

    The input and code are told by their fingerprint (:mod:`airflow_tfos.shared.fingerprint`), computed once
    per try where the input is readable (here, through ``input_storage``). An export of this spec but of
    another fingerprint is not the result: the run trains again from scratch, after its old export and
    checkpoints are moved to ``previous/<time of the export>/`` (:meth:`before_submit`), so that no checkpoint
    of other data or code is resumed.

    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: the export's ``_SUCCESS`` record, once the result holds an export of this spec (for lineage)
        self.export_record: dict[str, Any] | None = None

    def already_done(self) -> dict[str, Any] | None:
        done = self.run_dir_contents.export_success()
        if not done or done.get("spec_hash") != self.digest:
            return None
        learned_from = done.get("fingerprint")
        tables = pending_tables(self.fingerprint)
        if tables:
            self.log.info(
                "%s holds an export of this spec (%s); whether the table input (%s) changed since is seen by the "
                "Spark driver: submitting an application, which trains only if it did",
                self.run_dir,
                self.digest,
                ", ".join(self.fingerprint["inputs"][name]["table"] for name in tables),
            )
            return None
        if learned_from is not None and learned_from != self.fingerprint["hash"]:
            self.log.warning(
                "%s holds an export of this spec (%s), but of other input or code (fingerprint %s, now %s): "
                "training again",
                self.run_dir,
                self.digest,
                learned_from,
                self.fingerprint["hash"],
            )
            return None
        self.log.info(
            "%s already holds an export of this spec (%s) and input (fingerprint %s) at step %s: nothing to do",
            self.run_dir,
            self.digest,
            learned_from or "not recorded",
            done.get("step"),
        )
        return self.result(None)

    def works_on_spec(self, app: AppState) -> bool:
        """Also: the live ``app`` learns from this input and code (fingerprint.json, written when it was
        submitted); one started before the input was rewritten or the code edited is killed, and the new
        submission moves its checkpoints aside."""
        if not super().works_on_spec(app):
            return False
        previous = self.run_dir_contents.read_fingerprint()
        changed = changes(previous, carry_tables(previous, self.fingerprint))
        if not changed:
            return True
        self.log.warning(
            "application %s works on this spec but on input or code that changed since it was submitted (%s): "
            "killing it (a new one trains from scratch)",
            app.app_id,
            "; ".join(changed),
        )
        self.hook.kill(app.app_id)
        return False

    def before_submit(self) -> None:
        """Write fingerprint.json; when the input or code changed since the last one, first move the old
        export and checkpoints aside, saying what changed and where they are."""
        rundir = self.run_dir_contents
        previous = rundir.read_fingerprint()
        current = carry_tables(previous, self.fingerprint)  # tables: as the last driver saw them, until it looks
        changed = changes(previous, current)
        if changed:
            export = rundir.export_success()
            since = (export or {}).get("time") or (previous or {}).get("time") or time.time()
            label = datetime.fromtimestamp(since, tz=UTC).strftime("%Y%m%dT%H%M%SZ")
            kept = rundir.set_aside(label)
            what = "export" if export else "run"
            self.log.warning(
                "input or code changed since the %s of %s: %s. Training starts from scratch; the old export and "
                "checkpoints are kept in %s",
                what,
                datetime.fromtimestamp(since, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                "; ".join(changed),
                kept,
            )
        rundir.write_fingerprint(current)

    def result(self, app: AppState | None) -> dict[str, Any]:
        """Application id, run directory, spec hash, step, export path, metrics and the report's path."""
        rundir = self.run_dir_contents
        done = rundir.export_success()
        status = rundir.read_status() or {}
        exported = bool(done and done.get("spec_hash") == self.digest)
        latest = rundir.latest_checkpoint()
        self.outcome = {
            "application_id": app.app_id if app else self.submitted_application() or status.get("application_id"),
            "run_dir": self.run_dir,
            "spec_hash": self.digest,
            "step": (done or {}).get("step") if exported else (latest.step if latest else status.get("step", 0)),
            "export_path": rundir.path("export") if exported else None,
            "metrics": (done or {}).get("metrics", {}) if exported else {},
            "report": rundir.path(REPORT_HTML),
            "fingerprint": (done or {}).get("fingerprint") if exported else None,
        }
        self.export_record = done if exported else None
        if pending_tables(self._fingerprint):  # the driver fingerprinted the tables: lineage carries its listing
            resolved = rundir.read_fingerprint()
            if resolved and not pending_tables(resolved):
                self._fingerprint = resolved
        return self.outcome

    def finish(self, app: AppState) -> dict[str, Any]:
        """The result of a successful application, or an error that says what failed and where a retry resumes."""
        line = progress_line(self.run_dir_contents.read_status())
        if line:
            self.log.info("application %s ended %s: %s", app.app_id, app.state, line)
        if app.is_successful:
            result = self.result(app)
            if result["export_path"] is None and not self.spec.serve:
                self.no_export(app, "")
            return result
        status = self.run_dir_contents.read_status() or {}
        latest = self.run_dir_contents.latest_checkpoint()
        resume = f"the next try resumes from checkpoint step {latest.step}" if latest else "no checkpoint was published"
        error = status.get("error")
        diagnostics = (app.diagnostics or "").strip().splitlines()
        ended = f"application {app.app_id} ended {app.state}/{app.final_status}"
        if app.state == "KILLED":  # killed from outside (the RM's REST API, yarn application -kill): that first
            who = re.search(r"killed by user (\S+)", app.diagnostics or "")
            by = f" by user {who.group(1)}" if who else ""
            raise AirflowException(
                f"application {app.app_id} was killed{by} ({ended}{'; ' + diagnostics[0] if diagnostics else ''}); "
                f"{resume}"
            )
        if error:  # the driver's own words first
            raise AirflowException(f"{error} ({ended}{'; ' + diagnostics[0] if diagnostics else ''}); {resume}")
        reason = cluster_reason(app.diagnostics or "")
        logs = (
            f"; its containers' logs: yarn logs -applicationId {app.app_id}"
            if app.app_id.startswith("application_")
            else ""
        )
        if re.search(rf"exited with status {DRIVER_EXIT_TOKEN_REFUSED}\b", app.diagnostics or ""):
            raise AirflowException(
                f"the run directory's HDFS refused the delegation token of application {app.app_id}'s driver (expired "
                "or cancelled), so it could not record its error: a run cannot outlive the token's maximum lifetime "
                "(dfs.namenode.delegation.token.max-lifetime), and the ResourceManager (its renewer) or an "
                f"administrator may have cancelled it ({ended}; {reason}); {resume}{logs}"
            )
        raise AirflowException(
            f"application {app.app_id} failed before its driver recorded an error"
            f"{': ' + reason if reason else ''} ({ended}; nothing in status.json); {resume}{logs}"
        )

    def no_export(self, app: AppState, when: str) -> None:
        """Fail: ``app`` ended (``when``: before what) without an export of this spec."""
        state = (self.run_dir_contents.read_status() or {}).get("state")
        ended = f"application {app.app_id} ended {app.state}/{app.final_status} (run state {state})"
        if when:
            raise AirflowException(
                f"{ended} {when}, without an export of this task's spec {self.digest}: clear the task to launch it "
                "again"
            )
        raise AirflowException(
            f"{ended} without an export of this task's spec {self.digest} in "
            f"{self.run_dir_contents.path('export')}: call export_model in train_fn; if it was stopped, clear the "
            "task to resume from the latest checkpoint"
        )
