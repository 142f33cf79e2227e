"""Failure drills: Airflow run as users run it, Spark applications killed and tasks acted on from outside.

One real Airflow stack (api-server, scheduler, dag-processor, triggerer; LocalExecutor on SQLite)
runs the DAGs in tests/drills/dags. DAG runs are triggered, cleared and marked through the REST API.
Three runs start at once, each for its own logical date:

- ``drill_driver_kill``: its Spark driver is killed at a checkpoint mid-training; the task's retry
  must resume from the latest checkpoint and succeed (drill 1);
- ``drill_executor_kill``: one executor JVM is killed mid-training; the application must recover by
  itself and the task succeed on its first try (drill 2);
- ``drill_mark_failed`` (a longer training): marked failed while deferred; its application must be
  killed (drill 4).

The first two show that runs for different dates keep to their own run directories (drill 5); the first
is then cleared, as the UI's "Clear" does (drill 3). Last, headless Chromium takes screenshots of the grid
and of the task's extra links, and the links are checked against the application and the report.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest

from airflow_tfos.hooks.backends.local_tracker import LocalBackend
from airflow_tfos.plugins.report_urls import report_link
from airflow_tfos.shared.rundir import RunDir
from tests.conftest import REPO
from tests.drills import browser
from tests.drills.faults import RunWatch, kill_driver, kill_executor, mark_failed
from tests.drills.stack import AirflowStack, StackError, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.drills]

log = logging.getLogger(__name__)


@pytest.fixture(autouse=True)
def _log_measurements(caplog):
    """Keep this module's INFO lines (what each drill measured), so that ``pytest -rA`` shows them."""
    caplog.set_level(logging.INFO, logger=__name__)


DAG_ID = "tfos_drill"
LONG_DAG_ID = "tfos_drill_long"
TASK_ID = "train"
#: tfos_drill trains 6 epochs of 10 steps.
TOTAL_STEPS = 60
#: The driver and the executor are killed at the first checkpoint at or after this step.
KILL_AT_STEP = 15
#: The long run is marked failed once it has published a checkpoint at or after this step.
MARK_AT_STEP = 5
#: All three runs must end within this many seconds of being triggered.
RUNS_TIMEOUT_SECS = 540
#: Events left out of the drills' timelines (one per step or per node).
NOISE = ("step_metrics", "worker_steps", "metrics", "node_memory", "feed")
#: Where the screenshots go (build/ is not tracked).
SCREENSHOTS = REPO / "build" / "drills"


@dataclass
class Drill:
    """One DAG run of the drills, what was done to it, and how it ended."""

    dag_id: str
    run_id: str
    logical_date: datetime
    run_dir: str
    watch: RunWatch
    run: dict[str, Any] | None = None
    error: str | None = None
    measured: dict[str, float] = field(default_factory=dict)

    def check_ended(self) -> None:
        log.info("%s:\n%s", self.run_id, self.timeline())
        assert self.watch.error is None, f"{self.run_id}: the watch failed: {self.watch.error}"
        assert self.error is None, self.error

    def timeline(self) -> str:
        """What happened to the run, in seconds since it was triggered: events, and the watch's action."""
        start = self.measured.get("triggered", 0.0)
        lines = []
        try:
            events = RunDir(self.run_dir).events()
        except Exception as exc:
            events = [{"kind": f"(cannot read the events: {exc})", "time": start}]
        for event in sorted(events, key=lambda e: e["time"]):
            if event["kind"] in NOISE or (event["kind"] == "checkpoint" and event.get("step", 0) % 20):
                continue
            shown = {k: v for k, v in event.items() if k in ("step", "attempt", "try_number", "resume_step", "reason")}
            lines.append(f"{event['time'] - start:7.1f} s  {event['kind']} {shown}")
        done = self.watch.done
        if done:
            lines.append(
                f"{done.time - start:7.1f} s  WATCH: {done.kind} at checkpoint {done.checkpoint} ({done.app_id})"
            )
        return "\n".join(sorted(lines, key=lambda line: float(line.split(" s ")[0])))


def expected_run_dir(base: str, dag_id: str, logical_date: datetime) -> str:
    """The default run directory: ``<run_dir_base>/<dag_id>/<task_id>/<logical date>``."""
    return f"{base}/{dag_id}/{TASK_ID}/{logical_date:%Y%m%dT%H%M%S.%f}"


def app_gone(backend: LocalBackend, app_id: str) -> bool:
    return backend.get_state(app_id).is_terminal and not backend.processes(app_id)


def describe(drill: Drill, stack: AirflowStack) -> str:
    """The state of a drill's run, for the message of a wait that timed out."""
    parts = [f"run {drill.run_id}"]
    try:
        ti = stack.task_instance(drill.dag_id, drill.run_id, TASK_ID)
        parts.append(f"task {ti['state']} (try {ti['try_number']})")
    except StackError as exc:
        parts.append(str(exc))
    sample = drill.watch.samples[-1] if drill.watch.samples else None
    if sample:
        parts.append(f"app {sample.app_id}, checkpoint {sample.checkpoint}, step {sample.progress}")
    parts.append(f"action {drill.watch.done}")
    return ", ".join(parts) + "\n" + stack.tails(15)


@pytest.fixture(scope="module")
def drills(stack: AirflowStack):
    """Trigger the three runs at once, do to each what its drill does, and wait until they end."""
    base = stack.env["AIRFLOW__TFOS__RUN_DIR_BASE"]
    tracker = stack.env["AIRFLOW_TFOS_LOCAL_DIR"]
    backend = LocalBackend(tracker)

    def drill(dag_id: str, run_id: str, day: int, **watch: Any) -> Drill:
        logical_date = datetime(2026, 3, day)
        run_dir = expected_run_dir(base, dag_id, logical_date)
        return Drill(dag_id, run_id, logical_date, run_dir, RunWatch(run_dir, tracker, **watch))

    def deferred() -> bool:
        return stack.task_instance(LONG_DAG_ID, "drill_mark_failed", TASK_ID)["state"] == "deferred"

    found = {
        "driver": drill(DAG_ID, "drill_driver_kill", 1, at_step=KILL_AT_STEP, action=kill_driver),
        "executor": drill(DAG_ID, "drill_executor_kill", 2, at_step=KILL_AT_STEP, action=kill_executor),
        "mark": drill(
            LONG_DAG_ID,
            "drill_mark_failed",
            3,
            at_step=MARK_AT_STEP,
            ready=deferred,
            action=mark_failed(lambda: stack.mark(LONG_DAG_ID, "drill_mark_failed", TASK_ID, "failed")),
        ),
    }
    started = time.monotonic()
    for each in found.values():
        each.watch.start()
        stack.trigger(each.dag_id, each.logical_date.strftime("%Y-%m-%dT%H:%M:%S+00:00"), each.run_id)
        each.measured["triggered"] = time.time()

    def left() -> float:
        return max(10.0, RUNS_TIMEOUT_SECS - (time.monotonic() - started))

    mark = found["mark"]
    try:
        wait_for(
            lambda: mark.watch.done or mark.watch.error,
            timeout=left(),
            what=f"the long run to publish checkpoint step {MARK_AT_STEP} while deferred, to mark it failed",
            state=lambda: describe(mark, stack),
        )
        if mark.watch.done:
            app_id = mark.watch.done.app_id
            wait_for(
                lambda: app_gone(backend, app_id),
                timeout=90,
                what=f"application {app_id} and all its processes to end after the task was marked failed",
                state=lambda: f"{backend.get_state(app_id)}; processes {backend.processes(app_id)}",
            )
            mark.measured["killed_after_secs"] = time.time() - mark.watch.done.time
            mark.run = stack.wait_run_ended(mark.dag_id, mark.run_id, timeout=60)
    except StackError as exc:
        mark.error = str(exc)
    for name in ("driver", "executor"):
        each = found[name]
        try:
            each.run = stack.wait_run_ended(each.dag_id, each.run_id, timeout=left())
            each.measured["run_secs"] = each.run["duration"]
        except StackError as exc:
            each.error = str(exc)
    for each in found.values():
        each.watch.stop()
    return found


def log_measured(name: str, **values: Any) -> None:
    """Log what a drill measured (``pytest -rA`` shows it)."""
    log.info("drill %s: %s", name, ", ".join(f"{k}={v}" for k, v in values.items()))


@pytest.mark.timeout(900)
def test_drill1_retry_after_the_driver_is_killed_resumes_from_the_checkpoint(drills, stack):
    drill = drills["driver"]
    drill.check_ended()
    killed = drill.watch.done
    assert killed is not None and killed.detail != "no target found", f"the driver was not killed: {killed}"
    assert drill.run["state"] == "success", describe(drill, stack)

    tries = stack.tries(DAG_ID, drill.run_id, TASK_ID)
    assert [t["try_number"] for t in tries] == [1, 2], tries
    assert tries[0]["state"] == "failed" and tries[1]["state"] == "success", tries

    rundir = RunDir(drill.run_dir)
    submits = sorted(rundir.events("submit"), key=lambda e: e["time"])
    assert [(s["try_number"], s["resume_step"] > 0) for s in submits] == [(1, False), (2, True)], submits
    resumed = submits[1]["resume_step"]
    # the retry starts from the checkpoint published before the kill (or one published as it died)
    assert killed.checkpoint <= resumed < TOTAL_STEPS, (killed, submits)
    restores = [e for e in rundir.events("restore") if e["time"] > submits[1]["time"]]
    assert restores and restores[0]["step"] == resumed, restores

    records = drill.watch.records()
    assert len(records) == 2 and records[0]["app_id"] == killed.app_id, records
    retry_app = records[1]["app_id"]
    seen = drill.watch.progress_while(retry_app)
    assert seen and min(seen) >= resumed, f"the retry trained steps {seen} (resumed at {resumed}): it started over"
    later = sorted(e["step"] for e in rundir.events("checkpoint") if e["time"] > restores[0]["time"])
    assert later and later[0] > resumed, later
    assert rundir.export_success()["step"] == TOTAL_STEPS

    assert f"the next try resumes from checkpoint step {resumed}" in stack.task_log(DAG_ID, drill.run_id, TASK_ID, 1)
    assert f"resuming from checkpoint step {resumed}" in stack.task_log(DAG_ID, drill.run_id, TASK_ID, 2)
    log_measured(
        "1 driver killed",
        checkpoint_at_kill=killed.checkpoint,
        step_at_kill=killed.progress,
        retry_resumed_at=resumed,
        first_step_seen_in_retry=seen[0],
        final_step=rundir.export_success()["step"],
        run_secs=round(drill.measured["run_secs"]),
    )


@pytest.mark.timeout(300)
def test_drill2_an_executor_killed_is_recovered_inside_the_application(drills, stack):
    drill = drills["executor"]
    drill.check_ended()
    killed = drill.watch.done
    assert killed is not None and killed.detail != "no target found", f"no executor was killed: {killed}"
    assert drill.run["state"] == "success", describe(drill, stack)

    # Airflow saw one try that succeeded, and one application
    tries = stack.tries(DAG_ID, drill.run_id, TASK_ID)
    assert [(t["try_number"], t["state"]) for t in tries] == [(1, "success")], tries
    records = drill.watch.records()
    assert [r["app_id"] for r in records] == [killed.app_id], records
    rundir = RunDir(drill.run_dir)
    assert len(rundir.events("submit")) == 1

    # inside it, the TF cluster failed once and came back from the latest checkpoint
    failed = rundir.events("attempt_failed")
    assert len(failed) == 1 and failed[0]["retrying"] is True, failed
    assert sorted(e["attempt"] for e in rundir.events("attempt")) == [0, 1]
    restores = [e for e in rundir.events("restore") if e["time"] > failed[0]["time"]]
    assert restores and killed.checkpoint <= restores[0]["step"] < TOTAL_STEPS, (killed, restores)
    after = [s.progress for s in drill.watch.samples if s.time > restores[0]["time"] and s.progress is not None]
    assert after and min(after) >= restores[0]["step"], after
    assert rundir.export_success()["step"] == TOTAL_STEPS
    log_measured(
        "2 executor killed",
        checkpoint_at_kill=killed.checkpoint,
        step_at_kill=killed.progress,
        recovered_at=restores[0]["step"],
        recovery_secs=round(restores[0]["time"] - killed.time, 1),
        final_step=rundir.export_success()["step"],
        airflow_tries=len(tries),
        run_secs=round(drill.measured["run_secs"]),
    )


@pytest.mark.timeout(300)
def test_drill5_two_dates_at_once_keep_to_their_own_run_directories(drills, stack):
    first, second = drills["driver"], drills["executor"]
    first.check_ended()
    second.check_ended()
    # at once: both had a live application at the same time
    spans = {d.run_id: [d.watch.live_between(r["app_id"]) for r in d.watch.records()] for d in (first, second)}
    overlap = max(
        min(a[1], b[1]) - max(a[0], b[0])
        for a in filter(None, spans[first.run_id])
        for b in filter(None, spans[second.run_id])
    )
    assert overlap > 10, f"the two runs did not train at the same time: {spans}"

    assert first.run_dir != second.run_dir
    apps = {}
    for drill in (first, second):
        assert stack.xcom(DAG_ID, drill.run_id, TASK_ID, "run_dir") == drill.run_dir
        assert stack.xcom(DAG_ID, drill.run_id, TASK_ID, "return_value")["run_dir"] == drill.run_dir
        records = drill.watch.records()
        assert len({r["tag"] for r in records}) == 1, records
        apps[drill.run_id] = {r["app_id"] for r in records}
        assert RunDir(drill.run_dir).export_success()["step"] == TOTAL_STEPS
        assert stack.xcom(DAG_ID, drill.run_id, TASK_ID, "application_id") in apps[drill.run_id]
    assert first.watch.records()[0]["tag"] != second.watch.records()[0]["tag"]
    assert not apps[first.run_id] & apps[second.run_id]

    # nothing of one run is named in the other's files; the executor loss stayed in its own run
    for mine, other in ((first, second), (second, first)):
        for path in Path(mine.run_dir).rglob("*"):
            if path.is_file() and path.suffix in (".json", ".html", ".txt", ".csv"):
                text = path.read_text(errors="replace")
                assert other.run_dir not in text, f"{path} names the other run's directory"
                for app_id in apps[other.run_id]:
                    assert app_id not in text, f"{path} names {app_id} of the other run"
    # the executor lost in the second run cost the first run nothing: its only failed attempt is its killed driver's
    killed = first.watch.done.time
    assert all(e["time"] >= killed for e in RunDir(first.run_dir).events("attempt_failed"))
    clusters = [{e["run_id"] for e in RunDir(d.run_dir).events("attempt")} for d in (first, second)]
    assert not clusters[0] & clusters[1], clusters
    log_measured(
        "5 two dates",
        run_dirs=[first.run_dir, second.run_dir],
        trained_together_secs=round(overlap),
        apps={k: sorted(v) for k, v in apps.items()},
    )


@pytest.mark.timeout(300)
def test_drill4_marking_a_deferred_task_failed_kills_its_application(drills, stack):
    drill = drills["mark"]
    drill.check_ended()
    marked = drill.watch.done
    assert marked is not None and marked.kind == "mark failed", marked
    assert len(marked.pids) >= 5, f"the application was not fully up when marked failed: {marked}"
    backend = LocalBackend(stack.env["AIRFLOW_TFOS_LOCAL_DIR"])
    state = backend.get_state(marked.app_id)
    assert state.state == "KILLED", state
    assert Path(stack.env["AIRFLOW_TFOS_LOCAL_DIR"], "apps", f"{marked.app_id}.kill.json").exists()
    left = [p for p in marked.pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    assert not left, f"processes of {marked.app_id} still run: {left}"

    ti = stack.task_instance(LONG_DAG_ID, drill.run_id, TASK_ID)
    assert (ti["state"], ti["try_number"]) == ("failed", 1), ti
    assert drill.run["state"] == "failed"
    rundir = RunDir(drill.run_dir)
    assert rundir.export_success() is None
    step = rundir.latest_checkpoint().step
    time.sleep(3)
    assert rundir.latest_checkpoint().step == step, "training went on after the application was killed"
    assert f"killing application {marked.app_id}" in stack.task_log(LONG_DAG_ID, drill.run_id, TASK_ID, 1)
    log_measured(
        "4 marked failed",
        checkpoint_when_marked=marked.checkpoint,
        processes_when_marked=len(marked.pids),
        killed_after_secs=round(drill.measured["killed_after_secs"], 1),
        last_checkpoint=step,
    )


@pytest.mark.timeout(300)
def test_drill3_clearing_the_finished_task_submits_nothing_and_succeeds_quickly(drills, stack):
    drill = drills["driver"]
    drill.check_ended()
    assert drill.run["state"] == "success"
    rundir = RunDir(drill.run_dir)
    apps_before = [r["app_id"] for r in drill.watch.records()]
    export_before = rundir.export_success()
    success_file = Path(drill.run_dir, "export", "_SUCCESS")
    mtime_before = success_file.stat().st_mtime_ns
    submits_before = len(rundir.events("submit"))

    started = time.monotonic()
    stack.clear(DAG_ID, drill.run_id, [TASK_ID])
    run = stack.wait_run_ended(DAG_ID, drill.run_id, timeout=180)
    took = time.monotonic() - started
    assert run["state"] == "success", describe(drill, stack)

    ti = stack.task_instance(DAG_ID, drill.run_id, TASK_ID)
    assert (ti["state"], ti["try_number"]) == ("success", 3), ti
    assert ti["duration"] < 30, f"the cleared task took {ti['duration']} s"
    assert [r["app_id"] for r in drill.watch.records()] == apps_before, "clearing submitted a new application"
    assert len(rundir.events("submit")) == submits_before
    assert rundir.export_success() == export_before
    assert success_file.stat().st_mtime_ns == mtime_before
    assert "nothing to do" in stack.task_log(DAG_ID, drill.run_id, TASK_ID, 3)
    log_measured("3 cleared", task_secs=ti["duration"], clear_to_success_secs=round(took, 1), apps=apps_before)


@pytest.mark.timeout(120)
def test_cleared_task_still_names_the_application_that_trained(drills, stack):
    drill = drills["driver"]
    drill.check_ended()
    if stack.task_instance(DAG_ID, drill.run_id, TASK_ID)["try_number"] < 3:
        pytest.skip("needs the clear of test_drill3")
    trained = drill.watch.records()[-1]["app_id"]
    returned = stack.xcom(DAG_ID, drill.run_id, TASK_ID, "return_value")
    log.info("the cleared task returned application_id %s (trained by %s)", returned["application_id"], trained)
    try:
        pushed = stack.xcom(DAG_ID, drill.run_id, TASK_ID, "application_id")
    except StackError as exc:
        pushed = f"no XCom ({exc})"
    assert pushed == trained


# --- the UI ----------------------------------------------------------------------------------------


def ui_url(stack: AirflowStack, drill: Drill, tail: str = "") -> str:
    return f"{stack.base_url}/dags/{drill.dag_id}/runs/{urllib.parse.quote(drill.run_id)}{tail}"


def check_image(path: Path, size: tuple[int, int]) -> None:
    """A screenshot of the window's size that is not blank."""
    from PIL import Image

    with Image.open(path) as image:
        assert image.size == size, image.size
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 50, f"{path} is nearly blank ({len(colours)} colours)"


@pytest.mark.timeout(300)
def test_screenshots_of_the_grid_and_the_extra_links(drills, stack, tmp_path):
    drill = drills["executor"]
    drill.check_ended()
    links = stack.links(DAG_ID, drill.run_id, TASK_ID)["extra_links"]
    profile = tmp_path / "chromium"
    size = (1400, 900)

    grid = browser.dom(ui_url(stack, drill), profile, size)
    assert drill.run_id in grid and ">train<" in grid and "Success" in grid, grid[-3000:]
    assert "TFoSTrainOperator" in grid
    details = browser.dom(ui_url(stack, drill, f"/tasks/{TASK_ID}/details"), profile, size)
    assert "Extra Links" in details, details[-3000:]
    assert f'href="{links["Training report"]}"' in details and ">Training report</a>" in details

    shots = {
        "grid": ui_url(stack, drill),
        "task-log": ui_url(stack, drill, f"/tasks/{TASK_ID}"),
        "extra-links": ui_url(stack, drill, f"/tasks/{TASK_ID}/details"),
    }
    for name, url in shots.items():
        path = browser.screenshot(url, SCREENSHOTS / f"{name}.png", profile, size)
        check_image(path, size)
        log.info("screenshot of %s: %s", url, path)


@pytest.mark.timeout(120)
def test_report_link_points_at_the_report_of_the_runs_directory(drills, stack):
    for drill in (drills["driver"], drills["executor"]):
        drill.check_ended()
        links = stack.links(DAG_ID, drill.run_id, TASK_ID)["extra_links"]
        report = f"{drill.run_dir}/report/report.html"
        assert links["Training report"] == report_link(drill.run_dir, dag_id=DAG_ID), links  # served by the api-server
        assert Path(report).is_file(), f"{report} was not written"


@pytest.mark.timeout(120)
def test_spark_application_link_followed_the_application_and_is_gone_with_its_ui(drills, stack):
    drill = drills["executor"]
    drill.check_ended()
    (record,) = drill.watch.records()
    seen = drill.watch.ui.get(record["app_id"], {})
    pushed = stack.xcom(DAG_ID, drill.run_id, TASK_ID, "tracking_url")
    assert pushed, f"no tracking URL was pushed; while it ran the backend reported {seen}"
    assert pushed == seen.get("tracking_url")
    # the local application's UI ended with it, and no history server is named: no link to a dead page
    assert not stack.links(DAG_ID, drill.run_id, TASK_ID)["extra_links"]["Spark application"]


@pytest.mark.timeout(120)
def test_local_tracking_url_is_the_applications_own_ui(drills):
    drill = drills["executor"]
    drill.check_ended()
    (record,) = drill.watch.records()
    seen = drill.watch.ui.get(record["app_id"], {})
    assert seen.get("tracking_url") and seen.get("spark_ui_port"), seen
    assert urllib.parse.urlsplit(seen["tracking_url"]).port == seen["spark_ui_port"], seen
    assert record["name"] in seen.get("serves", []), seen


@pytest.mark.timeout(120)
def test_report_link_opens_the_report_from_the_ui(drills, stack, tmp_path):
    drill = drills["executor"]
    drill.check_ended()
    link = stack.links(DAG_ID, drill.run_id, TASK_ID)["extra_links"]["Training report"]
    opened = urllib.parse.urljoin(stack.base_url + "/", link)  # what the UI's <a href> leads to
    profile = tmp_path / "chromium"
    browser.dom(ui_url(stack, drill), profile)  # signed in to the UI, as the user who clicks the link is
    page = browser.dom(opened, profile)
    assert "Training report" in page and ".png" in page, page[:2000]
    browser.screenshot(opened, SCREENSHOTS / "report-link-target.png", profile, (1200, 900))
    request = urllib.request.Request(opened, headers={"Authorization": f"Bearer {stack.token()}"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        body = reply.read()
    assert body == Path(drill.run_dir, "report", "report.html").read_bytes(), f"{opened} did not serve the report"
