"""Idempotency and failure logic of the operators, at the hook boundary (a scripted backend, a real run directory)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred

from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.errors import RunConfigError
from airflow_tfos.hooks.run_dir import run_tag
from airflow_tfos.operators import (
    TFoSFeedOperator,
    TFoSInferenceOperator,
    TFoSLaunchClusterOperator,
    TFoSShutdownClusterOperator,
    TFoSTrainOperator,
    application,
)
from airflow_tfos.operators.application import STATE_APPLICATION_ID
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import parse_spec
from airflow_tfos.triggers.tfos import TFoSApplicationTrigger, TFoSRunDirTrigger
from tests.support.fakes import FakeBackend, FakeStateStore, make_context, use_backend

DATA = {"format": "parquet", "path": "/data/day"}
FEED = {"features": ["x"], "label": "y", "batch_size": 32}


def train_op(run_dir, **kwargs) -> TFoSTrainOperator:
    options = {
        "task_id": "train",
        "train_fn": "pkg.mod:main_fun",
        "args": {"epochs": 2},
        "num_workers": 2,
        "data": DATA,
        "feed": FEED,
        "run_dir": str(run_dir),
        "poll_interval": 0.01,
        "deferrable": False,
        "ship_code": False,  # pkg.mod is not importable here: nothing to ship
        **kwargs,
    }
    return TFoSTrainOperator(**options)


def export(rundir: RunDir, digest: str, step: int = 40, accuracy: float = 0.97) -> None:
    staging = rundir.export_staging()
    rundir.publish_export(staging, spec_hash=digest, step=step, metrics={"accuracy": accuracy})


def trains(op, backend: FakeBackend, run_dir, *, write_spec: bool = True) -> None:
    """Make ``backend`` behave as a real run of ``op``'s spec: the run directory holds the spec its live
    applications work on, and an application that succeeds leaves an export of that spec behind."""
    rundir, digest = RunDir(str(run_dir)), op.request_hash()
    if write_spec:
        rundir.write_spec(op.build_spec().to_json())

    def export_once(app_id):
        if (rundir.export_success() or {}).get("spec_hash") != digest:
            export(rundir, digest)

    backend.on_success = export_once


def exporting(backend: FakeBackend, rundir: RunDir, digest: str):
    """Make every submitted application leave an export behind, as a real training run would."""
    backend.on_submit = lambda app_id: export(rundir, digest)


class TestParseTimeChecks:
    def test_train_fn_must_be_module_colon_function(self, tmp_path):
        with pytest.raises(RunConfigError, match="package.module:function"):
            train_op(tmp_path, train_fn="pkg.mod.main_fun")

    def test_nodes_must_be_at_least_one(self, tmp_path):
        with pytest.raises(RunConfigError, match="num_workers must be at least 1, got 0"):
            train_op(tmp_path, num_workers=0)

    def test_unknown_input_mode(self, tmp_path):
        with pytest.raises(RunConfigError, match="input_mode must be one of SPARK, TENSORFLOW"):
            train_op(tmp_path, input_mode="STREAM")

    def test_run_dir_must_be_a_uri_or_absolute_path(self):
        with pytest.raises(RunConfigError, match="absolute path or a URI"):
            train_op("runs/relative")

    def test_spark_data_needs_a_feed(self, tmp_path):
        with pytest.raises(RunConfigError, match="needs 'feed'"):
            train_op(tmp_path, feed=None)

    def test_templated_fields_are_checked_only_after_rendering(self):
        op = train_op("{{ var.value.runs }}/x", data={"format": "parquet", "path": "{{ ds }}"})
        assert op.run_dir.startswith("{{")

    def test_constructor_does_no_io(self, tmp_path):
        train_op(tmp_path / "not-created")
        assert not (tmp_path / "not-created").exists()


class TestTrainIdempotency:
    def test_fresh_run_submits_once_and_returns_the_export(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        rundir = RunDir(str(tmp_path))
        exporting(backend, rundir, op.request_hash())
        context = make_context()
        result = op.execute(context)
        assert len(backend.submitted) == 1
        assert backend.submitted[0]["tag"] == run_tag(str(tmp_path))
        assert result["export_path"] == rundir.path("export")
        assert result["metrics"] == {"accuracy": 0.97}
        assert context["ti"].xcoms["application_id"] == result["application_id"]
        assert context["task_state_store"].get(STATE_APPLICATION_ID) == result["application_id"]
        assert rundir.read_spec()["spec_hash"] == result["spec_hash"]

    def test_the_submitting_task_instance_is_recorded_as_the_owner(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        rundir = RunDir(str(tmp_path))
        exporting(backend, rundir, op.request_hash())
        context = make_context()
        context["ti"].run_id = "scheduled__2026-11-21T00:00:00+00:00"  # as Airflow's task instance has it
        op.execute(context)
        assert rundir.read_owner() == {
            "dag_id": "nightly",
            "task_id": "train",
            "run_id": "scheduled__2026-11-21T00:00:00+00:00",
            "map_index": -1,
        }
        assert "owner" not in rundir.read_spec()  # not part of the spec, nor of its hash

    def test_rerun_after_success_submits_nothing_and_returns_the_same_result(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        exporting(backend, RunDir(str(tmp_path)), op.request_hash())
        first = op.execute(make_context())
        again, backend2 = train_op(tmp_path), FakeBackend()
        use_backend(again, backend2)
        context = make_context()
        second = again.execute(context)
        assert backend2.submitted == []
        assert second == first  # the application that trained is still named (as after a UI "Clear")
        assert context["ti"].xcoms["application_id"] == first["application_id"]

    def test_an_export_of_another_spec_does_not_count(self, tmp_path):
        export(RunDir(str(tmp_path)), "someotherhash")
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        exporting(backend, RunDir(str(tmp_path)), op.request_hash())
        op.execute(make_context())
        assert len(backend.submitted) == 1

    def test_live_application_with_the_run_tag_is_reattached(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path)
        tag = run_tag(str(tmp_path))
        live = backend.add("application_1_0007", "RUNNING", tags=[tag])
        backend.script[live.app_id] = [live, AppStateFactory.finished("application_1_0007", tag)]
        result = op.execute(make_context())
        assert backend.submitted == []
        assert result["application_id"] == "application_1_0007"

    def test_application_kept_in_durable_state_is_reattached(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path)
        backend.add("application_1_0003", "RUNNING")  # no tag: found only through the durable state
        store = FakeStateStore()
        store.set(STATE_APPLICATION_ID, "application_1_0003")
        backend.script["application_1_0003"] = [
            backend.apps["application_1_0003"],
            backend.apps["application_1_0003"],
            AppStateFactory.finished("application_1_0003", "other-tag"),
        ]
        op.execute(make_context(store=store))
        assert backend.submitted == []

    def test_a_failed_earlier_application_leads_to_a_new_submission(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path)
        backend.add("application_1_0003", "FAILED", "FAILED", tags=[run_tag(str(tmp_path))])
        store = FakeStateStore()
        store.set(STATE_APPLICATION_ID, "application_1_0003")
        op.execute(make_context(store=store))
        assert len(backend.submitted) == 1
        assert store.get(STATE_APPLICATION_ID) != "application_1_0003"

    def test_racing_tries_keep_the_earliest_application(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path)
        tag = run_tag(str(tmp_path))
        # another try submitted application ..._0001 meanwhile; it shows up after ours was submitted
        backend.on_submit = lambda app_id: setattr(
            backend, "racer", AppStateFactory.running("application_1700000000000_0001", tag)
        )
        backend.script["application_1700000000000_0001"] = [
            AppStateFactory.running("application_1700000000000_0001", tag),
            AppStateFactory.finished("application_1700000000000_0001", tag),
        ]
        result = op.execute(make_context())
        assert backend.killed == ["application_1700000000000_0100"]
        assert result["application_id"] == "application_1700000000000_0001"

    def test_a_submission_refused_for_a_live_tag_attaches_to_that_application(self, tmp_path):
        from airflow_tfos.hooks.backends.local_tracker import ApplicationAlreadyRunningError

        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path)
        tag = run_tag(str(tmp_path))

        def refuse(run_dir, **kwargs):
            backend.add("application_1_0002", "RUNNING", tags=[tag])
            backend.script["application_1_0002"] = [AppStateFactory.finished("application_1_0002", tag)]
            raise ApplicationAlreadyRunningError(tag, ["application_1_0002"])

        backend.submit = refuse
        assert op.execute(make_context())["application_id"] == "application_1_0002"

    def test_a_mapped_instance_gets_its_own_default_run_directory(self, tmp_path, monkeypatch):
        monkeypatch.setenv("AIRFLOW_TFOS_RUN_DIR_BASE", str(tmp_path))
        dirs = []
        for index in (0, 1):
            op, backend = train_op(tmp_path), FakeBackend()
            op.run_dir = None  # the default one
            use_backend(op, backend)
            context = make_context()
            context["ti"].map_index = index
            backend.on_submit = lambda app_id, op=op: export(op.run_dir_contents, op.request_hash())
            dirs.append(op.execute(context)["run_dir"])
        assert dirs[0] != dirs[1] and dirs[1].endswith("-map1")
        assert dirs[0].startswith(str(tmp_path)) and RunDir(dirs[0]).export_success() is not None

    def test_a_live_application_of_another_spec_is_killed_not_adopted(self, tmp_path):
        rundir = RunDir(str(tmp_path))
        old = train_op(tmp_path, args={"epochs": 1})
        rundir.write_spec(old.build_spec().to_json())  # the live application was submitted for this older spec
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path, write_spec=False)
        tag = run_tag(str(tmp_path))
        backend.add("application_1_0007", "RUNNING", tags=[tag])
        backend.script["application_1_0007"] = [AppStateFactory.finished("application_1_0007", tag)]
        result = op.execute(make_context())
        assert backend.killed == ["application_1_0007"]
        assert len(backend.submitted) == 1 and result["application_id"] == "application_1700000000000_0100"
        assert result["spec_hash"] == op.request_hash() == rundir.export_success()["spec_hash"]

    def test_the_driver_s_own_record_of_its_spec_decides_over_spec_json(self, tmp_path):
        """On YARN the driver writes status.json under the application's id, with the spec hash it read."""
        rundir = RunDir(str(tmp_path))
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path)  # spec.json holds this spec, but the live driver read another
        rundir.write_status("RUNNING", application_id="application_1_0007", spec_hash="an-older-spec")
        tag = run_tag(str(tmp_path))
        backend.add("application_1_0007", "RUNNING", tags=[tag])
        backend.script["application_1_0007"] = [AppStateFactory.finished("application_1_0007", tag)]
        op.execute(make_context())
        assert backend.killed == ["application_1_0007"] and len(backend.submitted) == 1

    def test_an_application_kept_in_durable_state_of_another_spec_is_killed_and_replaced(self, tmp_path):
        rundir = RunDir(str(tmp_path))
        rundir.write_spec(train_op(tmp_path, args={"epochs": 1}).build_spec().to_json())
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path, write_spec=False)
        backend.add("application_1_0003", "RUNNING")
        backend.script["application_1_0003"] = [
            backend.apps["application_1_0003"],
            AppStateFactory.finished("application_1_0003", ""),
        ]
        store = FakeStateStore()
        store.set(STATE_APPLICATION_ID, "application_1_0003")
        op.execute(make_context(store=store))
        assert backend.killed == ["application_1_0003"] and len(backend.submitted) == 1
        assert store.get(STATE_APPLICATION_ID) == "application_1700000000000_0100"

    def test_changed_spec_is_written_and_warned_about(self, tmp_path, capsys):
        rundir = RunDir(str(tmp_path))
        rundir.write_spec({"train_fn": "pkg.mod:main_fun", "num_nodes": 2, "args": {"epochs": 1}})
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path, write_spec=False)
        op.execute(make_context())
        assert rundir.read_spec()["args"] == {"epochs": 2}
        out = capsys.readouterr().out
        assert "spec in" in out and "changed" in out


class TestDurableState:
    """The application id kept in the task's durable state (ResumableJobMixin), beside the tag-based reattach."""

    def test_the_mixin_runs_the_train_operator_under_our_key(self):
        from airflow.sdk import ResumableJobMixin

        assert issubclass(TFoSTrainOperator, ResumableJobMixin)
        assert TFoSTrainOperator.external_id_key == STATE_APPLICATION_ID == "tfos_application_id"

    def test_reattaching_through_the_durable_state_returns_the_full_result(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        rundir = RunDir(str(tmp_path))
        rundir.write_spec(op.build_spec().to_json())  # what the stored application was submitted for
        backend.add("application_1_0003", "RUNNING")  # no tag: found only through the durable state
        backend.script["application_1_0003"] = [
            backend.apps["application_1_0003"],
            AppStateFactory.finished("application_1_0003", "other-tag"),
        ]
        store = FakeStateStore()
        store.set(STATE_APPLICATION_ID, "application_1_0003")
        digest, original = op.request_hash(), backend.get_state

        def exporting_when_finished(app_id):
            state = original(app_id)
            if state.is_terminal and rundir.export_success() is None:
                export(rundir, digest, step=12)
            return state

        backend.get_state = exporting_when_finished
        context = make_context(store=store)
        result = op.execute(context)
        assert backend.submitted == []
        assert result["application_id"] == "application_1_0003"
        assert result["step"] == 12 and result["export_path"] == rundir.path("export")
        assert context["ti"].xcoms["application_id"] == "application_1_0003"

    def test_an_application_the_cluster_forgot_leads_to_the_tag_then_a_submission(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path)
        store = FakeStateStore()
        store.set(STATE_APPLICATION_ID, "application_1_0042")  # unknown to the backend: get_state raises
        op.execute(make_context(store=store))
        assert len(backend.submitted) == 1
        assert store.get(STATE_APPLICATION_ID) == "application_1700000000000_0100"

    def test_a_stored_application_that_succeeded_without_this_export_is_not_done(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        backend.add("application_1_0005", "FINISHED", "SUCCEEDED", tags=[run_tag(str(tmp_path))])
        store = FakeStateStore()
        store.set(STATE_APPLICATION_ID, "application_1_0005")
        rundir = RunDir(str(tmp_path))
        export(rundir, "an-older-spec")
        exporting(backend, rundir, op.request_hash())
        result = op.execute(make_context(store=store))
        assert len(backend.submitted) == 1
        assert result["application_id"] == store.get(STATE_APPLICATION_ID) == "application_1700000000000_0100"
        assert rundir.export_success()["spec_hash"] == op.request_hash()

    def test_the_durable_state_keeps_the_winner_of_a_race(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path)
        tag = run_tag(str(tmp_path))
        backend.on_submit = lambda app_id: setattr(
            backend, "racer", AppStateFactory.running("application_1700000000000_0001", tag)
        )
        backend.script["application_1700000000000_0001"] = [
            AppStateFactory.finished("application_1700000000000_0001", tag)
        ]
        context = make_context()
        op.execute(context)
        assert context["task_state_store"].get(STATE_APPLICATION_ID) == "application_1700000000000_0001"

    def test_durable_false_neither_reads_nor_writes_the_state(self, tmp_path):
        op, backend = train_op(tmp_path, durable=False), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path)
        backend.add("application_1_0003", "RUNNING")  # untagged: only the durable state could name it
        store = FakeStateStore()
        store.set(STATE_APPLICATION_ID, "application_1_0003")
        op.execute(make_context(store=store))
        assert len(backend.submitted) == 1
        assert store.get(STATE_APPLICATION_ID) == "application_1_0003"
        assert backend.polls.get("application_1_0003") is None

    def test_launch_reattaches_through_the_durable_state(self, tmp_path):
        op = TFoSLaunchClusterOperator(
            task_id="launch",
            train_fn="pkg.mod:main_fun",
            num_workers=2,
            run_dir=str(tmp_path),
            poll_interval=0.01,
            ship_code=False,
        )
        backend = FakeBackend()
        backend.add("application_1_0008", "RUNNING")
        RunDir(str(tmp_path)).write_status("RUNNING", application_id="application_1_0008", serving=True)
        use_backend(op, backend)
        RunDir(str(tmp_path)).write_spec(op.build_spec().to_json())
        store = FakeStateStore()
        store.set(STATE_APPLICATION_ID, "application_1_0008")
        result = op.execute(make_context("launch", store=store))
        assert result == {"application_id": "application_1_0008", "run_dir": str(tmp_path)}
        assert backend.submitted == []


class AppStateFactory:
    @staticmethod
    def running(app_id: str, tag: str):
        from airflow_tfos.hooks.backends.state import AppState

        return AppState(app_id, "RUNNING", tags=(tag,))

    @staticmethod
    def finished(app_id: str, tag: str):
        from airflow_tfos.hooks.backends.state import AppState

        return AppState(app_id, "FINISHED", "SUCCEEDED", tags=(tag,))


class TestTrainFailure:
    def test_failed_application_names_the_error_and_the_checkpoint_to_resume_from(self, tmp_path):
        rundir = RunDir(str(tmp_path))
        rundir.publish_checkpoint(rundir.checkpoint_staging(30), 30)
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        backend.next_script = [("RUNNING", "UNDEFINED"), ("FAILED", "FAILED")]

        def fail(app_id):
            rundir.write_status("FAILED", error="node worker:1 failed: OOM")

        backend.on_submit = fail
        with pytest.raises(AirflowException) as failed:
            op.execute(make_context())
        message = str(failed.value)
        assert message.startswith("node worker:1 failed: OOM (application "), message  # the driver's words first
        assert "ended FAILED/FAILED" in message and message.endswith("resumes from checkpoint step 30")
        assert backend.cleaned == list(backend.apps)  # what the failed application left is cleaned up

    def test_success_without_an_export_of_this_spec_fails_the_task(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        with pytest.raises(AirflowException, match="without an export of this task's spec"):
            op.execute(make_context())

    def test_an_application_stopped_by_a_stale_request_does_not_turn_the_task_green(self, tmp_path):
        """The driver stopped at once (exit 0, run state STOPPED) and left only an export of another spec."""
        rundir = RunDir(str(tmp_path))
        export(rundir, "an-older-spec")
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        backend.on_submit = lambda app_id: rundir.write_status("STOPPED", application_id=app_id)
        with pytest.raises(AirflowException, match=r"run state STOPPED\) without an export"):
            op.execute(make_context())

    def test_a_submission_clears_a_stop_request_left_for_an_earlier_application(self, tmp_path):
        rundir = RunDir(str(tmp_path))
        rundir.request_stop("shutdown task", application_id="application_1_0001")
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        seen = []

        def submitted(app_id):
            seen.append(rundir.stop_requested())
            export(rundir, op.request_hash())

        backend.on_submit = submitted
        op.execute(make_context())
        assert seen == [None]

    def test_on_kill_kills_the_live_application(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        backend.add("application_1_0009", "RUNNING", tags=[run_tag(str(tmp_path))])
        op.on_kill()
        assert backend.killed == ["application_1_0009"]


class TestDeferrable:
    def test_defers_to_an_application_trigger_that_kills_on_kill(self, tmp_path):
        op, backend = train_op(tmp_path, deferrable=True), FakeBackend()
        use_backend(op, backend)
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(make_context())
        trigger = deferred.value.trigger
        assert isinstance(trigger, TFoSApplicationTrigger)
        assert trigger.kill_on_kill and trigger.application_id == "application_1700000000000_0100"
        assert trigger.run_dir == str(tmp_path)

    def test_execute_complete_maps_events(self, tmp_path):
        op = train_op(tmp_path, deferrable=True)
        export(RunDir(str(tmp_path)), op.request_hash())
        event = {
            "status": "done",
            "app": {"app_id": "application_1_0001", "state": "FINISHED", "final_status": "SUCCEEDED"},
        }
        assert op.execute_complete(make_context(), event)["export_path"].endswith("/export")
        with pytest.raises(AirflowException, match="lost track"):
            op.execute_complete(make_context(), {"status": "error", "message": "RM down"})
        killed = {
            "status": "done",
            "app": {"app_id": "application_1_0001", "state": "KILLED", "final_status": "KILLED"},
        }
        with pytest.raises(AirflowException, match="KILLED/KILLED"):
            op.execute_complete(make_context(), killed)

    def test_resumed_without_an_event_it_finds_the_live_application_again_and_submits_nothing(
        self, tmp_path, monkeypatch
    ):
        """The process that waited died; the task is run again while deferred (``airflow tasks test``): Airflow
        calls execute_complete with no event."""
        monkeypatch.setattr(application, "TRACKING_URL_WAIT_SECS", 0.0)  # this fake RM gives no UI address
        op, backend = train_op(tmp_path, deferrable=True), FakeBackend()
        use_backend(op, backend)
        trains(op, backend, tmp_path)
        backend.add("application_1_0007", "RUNNING", tags=[run_tag(str(tmp_path))])
        with pytest.raises(TaskDeferred) as deferred:
            op.execute_complete(make_context())
        assert deferred.value.trigger.application_id == "application_1_0007"
        assert backend.submitted == []


class TestLifecycle:
    def test_launch_returns_once_the_driver_serves(self, tmp_path):
        op = TFoSLaunchClusterOperator(
            task_id="launch",
            train_fn="pkg.mod:main_fun",
            num_workers=2,
            run_dir=str(tmp_path),
            poll_interval=0.01,
            ship_code=False,
        )
        backend = FakeBackend()
        backend.next_script = [("RUNNING", "UNDEFINED")]
        backend.on_submit = lambda app_id: RunDir(str(tmp_path)).write_status(
            "RUNNING", application_id=app_id, serving=True
        )
        use_backend(op, backend)
        result = op.execute(make_context("launch"))
        assert result == {"application_id": "application_1700000000000_0100", "run_dir": str(tmp_path)}
        assert RunDir(str(tmp_path)).read_spec()["serve"] is True

    def test_launch_fails_when_the_application_dies_before_ready(self, tmp_path):
        op = TFoSLaunchClusterOperator(
            task_id="launch",
            train_fn="pkg.mod:main_fun",
            num_workers=2,
            run_dir=str(tmp_path),
            poll_interval=0.01,
            ship_code=False,
        )
        backend = FakeBackend()
        backend.next_script = [("FAILED", "FAILED")]
        use_backend(op, backend)
        with pytest.raises(AirflowException, match="FAILED/FAILED"):
            op.execute(make_context("launch"))

    def test_a_launch_not_ready_in_time_stops_what_it_submitted(self, tmp_path):
        op = TFoSLaunchClusterOperator(
            task_id="launch",
            train_fn="pkg.mod:main_fun",
            num_workers=2,
            run_dir=str(tmp_path),
            poll_interval=0.01,
            ship_code=False,
            ready_timeout=0.05,
        )
        backend = FakeBackend()
        backend.next_script = [("RUNNING", "UNDEFINED")]  # up, but its driver never serves
        use_backend(op, backend)
        with pytest.raises(AirflowException, match=r"not ready within 0 s \(ready_timeout\): it was stopped"):
            op.execute(make_context("launch"))
        (app_id,) = backend.apps
        assert backend.killed == [app_id] and backend.apps[app_id].is_terminal
        assert [e["application_id"] for e in RunDir(str(tmp_path)).events("launch_failed")] == [app_id]

    def test_a_deferred_launch_that_timed_out_stops_what_it_submitted(self, tmp_path):
        op = TFoSLaunchClusterOperator(
            task_id="launch", train_fn="pkg.mod:main_fun", num_workers=2, run_dir=str(tmp_path), ship_code=False
        )
        backend = FakeBackend()
        app = backend.add("application_1_0007", "RUNNING")
        RunDir(str(tmp_path)).add_event("submitted", application_id=app.app_id, try_number=1)
        use_backend(op, backend)
        with pytest.raises(AirflowException, match="did not become ready: timed out"):
            op.launch_complete(make_context("launch"), {"status": "timeout", "message": "timed out"})
        assert backend.killed == [app.app_id]

    def test_launch_fails_when_the_application_stops_before_serving_without_an_export(self, tmp_path):
        op = TFoSLaunchClusterOperator(
            task_id="launch",
            train_fn="pkg.mod:main_fun",
            num_workers=2,
            run_dir=str(tmp_path),
            poll_interval=0.01,
            ship_code=False,
        )
        backend = FakeBackend()
        backend.next_script = [("FINISHED", "SUCCEEDED")]  # the driver stopped at its first heartbeat, exit 0
        backend.on_submit = lambda app_id: RunDir(str(tmp_path)).write_status("STOPPED", application_id=app_id)
        use_backend(op, backend)
        with pytest.raises(AirflowException, match=r"run state STOPPED\) before it served feeds"):
            op.execute(make_context("launch"))

    def _feed_op(self, tmp_path, **kwargs):
        return TFoSFeedOperator(
            task_id="feed",
            run_dir=str(tmp_path),
            data=DATA,
            args={"epochs": 1},
            poll_interval=0.01,
            deferrable=False,
            **kwargs,
        )

    def test_feed_requests_once_and_waits_for_done(self, tmp_path):
        rundir = RunDir(str(tmp_path))
        backend = FakeBackend()
        app = backend.add("application_1_0001", "RUNNING", tags=[run_tag(str(tmp_path))])
        op = self._feed_op(tmp_path)
        use_backend(op, backend)
        polls = iter(range(1000))

        def served(app_id):
            if next(polls) == 2:
                rundir.mark_feed_done("feed-20261121T000000", step=12)
            return app

        backend.get_state = served
        assert op.execute(make_context("feed"))["step"] == 12
        assert rundir.pending_feeds() == []
        # a rerun finds it done and requests nothing
        again = self._feed_op(tmp_path)
        use_backend(again, FakeBackend())
        assert again.execute(make_context("feed"))["step"] == 12

    def test_a_waiting_feed_logs_progress_and_each_lost_node_once(self, tmp_path, capsys):
        rundir = RunDir(str(tmp_path))
        backend = FakeBackend()
        app = backend.add("application_1_0001", "RUNNING", tags=[run_tag(str(tmp_path))])
        op = self._feed_op(tmp_path)
        use_backend(op, backend)
        polls = iter(range(1000))
        progress = {"step": 12, "total_steps": 40, "epoch": 1, "epochs": 4, "loss": 0.5}

        def served(app_id):  # the driver's side, as the feed is trained on
            poll = next(polls)
            if poll == 1:
                rundir.write_status("RUNNING", step=10, progress=progress)
                rundir.add_event("attempt_failed", run_id="r1", attempt=0, reason="worker:0 lost", retrying=True)
            if poll == 5:
                rundir.mark_feed_done("feed-20261121T000000", step=40)
            return app

        backend.get_state = served
        assert op.execute(make_context("feed"))["step"] == 40
        out = capsys.readouterr().out
        lost = "TF cluster attempt 0 failed: worker:0 lost; a new attempt resumes from the latest checkpoint"
        assert out.count(lost) == 1
        assert out.count("state RUNNING, checkpoint step 10, step 12/40 (30%), epoch 1/4, loss 0.5000") == 1

    def test_feed_without_live_application_says_to_launch_first(self, tmp_path):
        op = self._feed_op(tmp_path)
        use_backend(op, FakeBackend())
        with pytest.raises(AirflowException, match="TFoSLaunchClusterOperator first"):
            op.execute(make_context("feed"))

    def test_feed_fails_when_the_application_ends_first(self, tmp_path):
        backend = FakeBackend()
        tag = run_tag(str(tmp_path))
        backend.add("application_1_0001", "RUNNING", tags=[tag])
        failed = AppState("application_1_0001", "FAILED", "FAILED", diagnostics="executor lost", tags=(tag,))
        backend.script["application_1_0001"] = [AppStateFactory.running("application_1_0001", tag), failed]
        op = self._feed_op(tmp_path)
        use_backend(op, backend)
        with pytest.raises(AirflowException, match="executor lost"):
            op.execute(make_context("feed"))

    def test_a_feed_the_driver_refused_fails_the_task_with_the_cause_first(self, tmp_path):
        rundir = RunDir(str(tmp_path))
        backend = FakeBackend()
        app = backend.add("application_1_0001", "RUNNING", tags=[run_tag(str(tmp_path))])
        cause = "column 'y' is not in the training DataFrame (its columns: x, labels); fix Feed(features=...)"

        def refused(app_id):
            if rundir.feed_result("feed-20261121T000000") is None:
                rundir.mark_feed_done("feed-20261121T000000", step=0, error=cause, exit_code=2)
            return app

        backend.get_state = refused
        op = self._feed_op(tmp_path)
        use_backend(op, backend)
        with pytest.raises(AirflowException) as failed:
            op.execute(make_context("feed"))
        assert str(failed.value).startswith(cause + " (feed feed-20261121T000000 failed on its input")
        with pytest.raises(AirflowException, match=r"^column 'y' is not in the training DataFrame"):
            op.execute_complete(make_context("feed"), {"status": "done", "result": rundir.feed_result(op_id(op))})

    def test_a_corrected_feed_task_is_requested_again_and_succeeds(self, tmp_path):
        rundir = RunDir(str(tmp_path))
        rundir.request_feed("feed-20261121T000000", {"data": {"format": "parquet", "path": "/data/wrong"}})
        rundir.mark_feed_done("feed-20261121T000000", step=0, error="cannot read data '/data/wrong'", exit_code=2)
        backend = FakeBackend()
        app = backend.add("application_1_0001", "RUNNING", tags=[run_tag(str(tmp_path))])
        requested = []

        def serves(app_id):
            for request in rundir.pending_feeds():
                requested.append(request["data"])
                rundir.mark_feed_done(request["feed_id"], step=12, result=None)
            return app

        backend.get_state = serves
        op = self._feed_op(tmp_path)  # the same task, its data corrected, cleared and run again
        use_backend(op, backend)
        done = op.execute(make_context("feed"))
        assert done["step"] == 12 and "error" not in done
        assert requested == [DATA]

    def test_a_feed_done_for_an_earlier_spec_is_requested_again(self, tmp_path):
        # the DAG run's spec changed, it was cleared, and the launch started an application of the new spec
        rundir = RunDir(str(tmp_path))
        old = rundir.write_spec({"args": {"epochs": 1}})
        rundir.request_feed("feed-20261121T000000", {"data": DATA})
        rundir.mark_feed_done("feed-20261121T000000", step=10, result=None, spec_hash=old)
        new = rundir.write_spec({"args": {"epochs": 2}})
        backend = FakeBackend()
        app = backend.add("application_1_0002", "RUNNING", tags=[run_tag(str(tmp_path))])
        requested = []

        def serves(app_id):
            for request in rundir.pending_feeds():
                requested.append(request["feed_id"])
                rundir.mark_feed_done(request["feed_id"], step=30, result=None, spec_hash=new)
            return app

        backend.get_state = serves
        op = self._feed_op(tmp_path)
        use_backend(op, backend)
        assert op.execute(make_context("feed"))["step"] == 30
        assert requested == ["feed-20261121T000000"]
        # done for the run's spec: a rerun requests nothing
        again = self._feed_op(tmp_path)
        use_backend(again, FakeBackend())
        assert again.execute(make_context("feed"))["step"] == 30

    def test_a_feed_whose_application_failed_names_the_driver_error_first(self, tmp_path):
        backend = FakeBackend()
        tag = run_tag(str(tmp_path))
        backend.add("application_1_0001", "RUNNING", tags=[tag])
        failed = AppState("application_1_0001", "FAILED", "FAILED", diagnostics="spark-submit exited with code 1")
        backend.script["application_1_0001"] = [AppStateFactory.running("application_1_0001", tag), failed]
        RunDir(str(tmp_path)).write_status("FAILED", error="TF node worker:1 failed: ResourceExhaustedError: OOM")
        op = self._feed_op(tmp_path)
        use_backend(op, backend)
        with pytest.raises(AirflowException, match=r"^TF node worker:1 failed: ResourceExhaustedError: OOM \(feed "):
            op.execute(make_context("feed"))

    def test_deferred_feed_watches_the_run_dir_and_the_application(self, tmp_path):
        backend = FakeBackend()
        backend.add("application_1_0001", "RUNNING", tags=[run_tag(str(tmp_path))])
        op = self._feed_op(tmp_path)
        op.deferrable = True
        use_backend(op, backend)
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(make_context("feed"))
        trigger = deferred.value.trigger
        assert isinstance(trigger, TFoSRunDirTrigger)
        assert trigger.condition == {"feed": "feed-20261121T000000"} and trigger.application_id == "application_1_0001"

    def _shutdown_op(self, tmp_path, grace=5.0):
        return TFoSShutdownClusterOperator(task_id="stop", run_dir=str(tmp_path), grace_secs=grace, poll_interval=0.01)

    def test_shutdown_stops_gracefully(self, tmp_path):
        backend = FakeBackend()
        tag = run_tag(str(tmp_path))
        backend.add("application_1_0001", "RUNNING", tags=[tag])
        backend.script["application_1_0001"] = [
            AppStateFactory.running("application_1_0001", tag),
            AppStateFactory.finished("application_1_0001", tag),
        ]
        op = self._shutdown_op(tmp_path)
        use_backend(op, backend)
        result = op.execute(make_context("stop"))
        assert result["state"] == "FINISHED" and backend.killed == []
        assert RunDir(str(tmp_path)).stop_requested()["application_id"] == "application_1_0001"  # scoped to it

    def test_shutdown_kills_after_the_grace(self, tmp_path):
        backend = FakeBackend()
        backend.add("application_1_0001", "RUNNING", tags=[run_tag(str(tmp_path))])
        op = self._shutdown_op(tmp_path, grace=0.05)
        use_backend(op, backend)
        assert op.execute(make_context("stop"))["state"] == "KILLED"
        assert backend.killed == ["application_1_0001"]

    def test_shutdown_finds_the_launch_tasks_run_with_no_xcom(self, tmp_path, monkeypatch):
        from airflow_tfos.hooks.run_dir import resolve_run_dir

        monkeypatch.setenv("AIRFLOW_TFOS_RUN_DIR_BASE", str(tmp_path))
        launched = resolve_run_dir(None, make_context("launch"))  # where the launch task put its run
        assert launched.startswith(str(tmp_path)) and "/launch/" in launched
        backend = FakeBackend()
        backend.add("application_1_0002", "RUNNING", tags=[run_tag(launched)])
        op = TFoSShutdownClusterOperator(task_id="stop", launch_task_id="launch", grace_secs=0.05, poll_interval=0.01)
        use_backend(op, backend)
        assert op.execute(make_context("stop"))["state"] == "KILLED"
        assert backend.killed == ["application_1_0002"] and op.run_dir == launched
        assert RunDir(launched).stop_requested() is not None

    def test_a_run_task_needs_run_dir_or_launch_task_id(self):
        with pytest.raises(RunConfigError, match="give run_dir .* or launch_task_id"):
            TFoSShutdownClusterOperator(task_id="stop")
        with pytest.raises(RunConfigError, match="not both or neither"):
            TFoSFeedOperator(task_id="feed", run_dir="/runs/x", launch_task_id="launch")

    def test_shutdown_twice_is_a_no_op(self, tmp_path):
        backend = FakeBackend()
        backend.add("application_1_0001", "KILLED", "KILLED", tags=[run_tag(str(tmp_path))])
        op = self._shutdown_op(tmp_path)
        use_backend(op, backend)
        assert op.execute(make_context("stop"))["stopped"] is False
        assert backend.killed == []


class TestInference:
    def _op(self, tmp_path):
        return TFoSInferenceOperator(
            task_id="score",
            model_path=str(tmp_path / "model"),
            data=DATA,
            features=["x"],
            output_path=str(tmp_path / "out"),
            run_dir=str(tmp_path / "run"),
            poll_interval=0.01,
            deferrable=False,
        )

    def test_done_when_the_output_has_its_success_marker(self, tmp_path):
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "_SUCCESS").write_text("")
        op, backend = self._op(tmp_path), FakeBackend()
        use_backend(op, backend)
        assert op.execute(make_context("score"))["output_path"] == str(tmp_path / "out")
        assert backend.submitted == []

    def test_several_model_outputs_go_into_the_spec_and_one_or_several_is_a_choice(self, tmp_path):
        kwargs = {"task_id": "score", "model_path": "/m", "data": DATA, "features": ["x"], "run_dir": str(tmp_path)}
        op = TFoSInferenceOperator(output_path="/o", model_outputs=("probabilities", "embedding"), **kwargs)
        spec = parse_spec(op.build_spec().to_json())
        assert spec.inference["outputs"] == ["probabilities", "embedding"] and "output" not in spec.inference
        assert "outputs" not in TFoSInferenceOperator(output_path="/o", **kwargs).build_spec().to_json()["inference"]
        with pytest.raises(RunConfigError, match="model_output .* or model_outputs .*, not both"):
            TFoSInferenceOperator(output_path="/o", model_output="a", model_outputs="*", **kwargs)

    def test_submits_an_inference_spec(self, tmp_path, capsys):
        op, backend = self._op(tmp_path), FakeBackend()
        use_backend(op, backend)

        def write_output(app_id):
            (tmp_path / "out").mkdir()
            (tmp_path / "out" / "_SUCCESS").write_text("")

        backend.on_submit = write_output
        op.execute(make_context("score"))
        spec = RunDir(str(tmp_path / "run")).read_spec()
        assert spec["kind"] == "inference" and spec["inference"]["features"] == ["x"]
        out = capsys.readouterr().out
        assert "submitted application" in out  # it logs, but only about inference
        assert "checkpoint" not in out and "training starts" not in out

    def test_fails_when_no_output_was_written(self, tmp_path):
        op, backend = self._op(tmp_path), FakeBackend()
        use_backend(op, backend)
        with pytest.raises(AirflowException, match="without writing"):
            op.execute(make_context("score"))


class TestSparkApplicationLink:
    UI = "http://127.0.0.1:4041"

    def test_the_ui_address_is_pushed_once_the_running_application_has_one(self, tmp_path):
        op, backend = train_op(tmp_path), FakeBackend()
        use_backend(op, backend)
        exporting(backend, RunDir(str(tmp_path)), op.request_hash())
        backend.next_script = [("ACCEPTED", "UNDEFINED"), ("RUNNING", "UNDEFINED"), ("FINISHED", "SUCCEEDED")]
        original = backend.get_state

        def with_ui(app_id):  # the UI shows up while it runs (the driver logs it), gone once it ended
            state = original(app_id)
            return replace(state, tracking_url=self.UI) if state.state == "RUNNING" else state

        backend.get_state = with_ui
        context = make_context()
        op.execute(context)
        assert context["ti"].xcoms["tracking_url"] == self.UI

    def test_a_deferred_task_pushes_the_last_address_the_trigger_saw(self, tmp_path):
        op = train_op(tmp_path)
        context = make_context()
        export(RunDir(str(tmp_path)), op.request_hash())
        app = AppState("local-1", "FINISHED", "SUCCEEDED")
        op.execute_complete(context, {"status": "done", "app": app.to_json(), "tracking_url": self.UI})
        assert context["ti"].xcoms["tracking_url"] == self.UI

    def test_the_links_read_what_the_try_pushed_and_never_look_up_a_missing_xcom(self, tmp_path, monkeypatch):
        from airflow.sdk.execution_time.xcom import XCom

        from airflow_tfos.links.tfos import SparkApplicationLink, TensorBoardLink

        def no_lookup(**kwargs):  # in a worker, a lookup of an XCom never pushed logs "[error] XCom not found"
            raise AssertionError(f"XCom looked up: {kwargs}")

        monkeypatch.setattr(XCom, "get_value", no_lookup)
        op = train_op(tmp_path)
        assert SparkApplicationLink().get_link(op, ti_key=None) == ""
        assert TensorBoardLink().get_link(op, ti_key=None) == ""
        context = make_context()
        op._ti = context["ti"]
        op.push_tracking_url(self.UI)
        assert SparkApplicationLink().get_link(op, ti_key=None) == self.UI
        # pushed under the link's own key as well: the UI reads that one, also while the task runs
        assert context["ti"].xcoms[SparkApplicationLink().xcom_key] == self.UI


def op_id(op: TFoSFeedOperator) -> str:
    """The feed id a feed task of the test context uses."""
    return op.feed_id or "feed-20261121T000000"


def test_inference_takes_its_own_arguments_and_no_training_settings(tmp_path):
    common = {"task_id": "score", "model_path": "/m", "data": DATA, "features": ["x"], "output_path": "/out"}
    op = TFoSInferenceOperator(**common, output_col="p", num_executors=3, executor_memory="1g", conf={"a": "b"})
    assert op.num_executors() == 3 and op.executor_memory == "1g"
    with pytest.raises(TypeError):
        TFoSInferenceOperator(**common, train_fn="pkg.mod:main_fun")
    with pytest.raises(RunConfigError, match="num_executors must be an integer >= 1"):
        TFoSInferenceOperator(**common, num_executors=0)
