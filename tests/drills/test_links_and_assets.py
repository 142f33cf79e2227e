"""On the drills' real Airflow stack: every extra link of a training task leads somewhere, and a published model
starts the DAG scheduled on its Asset, once per model put in service and never for a rejected one.

The DAGs are in tests/drills/dags: ``tfos_drill_links`` trains with TensorBoard on (waiting in the worker, so
that its links follow the run) and publishes by loss; ``tfos_drill_scoring`` is scheduled on the registry's
model Asset and scores the drill data with the model the event names; ``tfos_drill_publish`` publishes the
run directory its run's conf names (here a candidate with a worse loss: the gate rejects it).
"""

from __future__ import annotations

import logging
import shutil
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from airflow_tfos.operators.publish import model_asset
from airflow_tfos.plugins.report_urls import report_link
from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.rundir import SUCCESS, RunDir
from tests.drills.stack import AirflowStack, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.drills]

log = logging.getLogger(__name__)

LINKS_DAG, PUBLISH_DAG, SCORING_DAG = "tfos_drill_links", "tfos_drill_publish", "tfos_drill_scoring"
RUN_ID = "links_and_assets"
LIVE_LINKS = ("Spark application", "TensorBoard")


@pytest.fixture(autouse=True)
def _log_measurements(caplog):
    caplog.set_level(logging.INFO, logger=__name__)


def fetch(url: str, token: str | None = None) -> tuple[int, str]:
    """Open ``url`` as a browser would (redirects followed); the status and the page."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as reply:
        return reply.status, reply.read().decode(errors="replace")


def runs_of(stack: AirflowStack, dag_id: str) -> list[dict]:
    return stack.get(f"/api/v2/dags/{dag_id}/dagRuns")["dag_runs"]


def asset_events(stack: AirflowStack, source_dag_id: str) -> list[dict]:
    return stack.get("/api/v2/assets/events", source_dag_id=source_dag_id)["asset_events"]


@pytest.fixture(scope="module")
def links_run(stack: AirflowStack):
    """Trigger tfos_drill_links; while ``train`` runs, open each of its links that leads anywhere; wait for the
    run's end. Returns what was opened while it ran and when the run ended."""
    stack.trigger(LINKS_DAG, "2026-04-01T00:00:00+00:00", RUN_ID)
    opened: dict[str, tuple[str, str]] = {}  # link name -> (address, page) opened with HTTP 200 while it ran
    errors: dict[str, str] = {}
    seen: dict[str, float] = {}  # when train was first seen running, and when its links were all open

    def look() -> bool:
        stack.check_alive()
        state = stack.task_instance(LINKS_DAG, RUN_ID, "train")["state"]
        if state != "running":
            return state in ("success", "failed", "up_for_retry")  # ended: stop looking
        seen.setdefault("running", time.monotonic())
        for name, url in stack.links(LINKS_DAG, RUN_ID, "train")["extra_links"].items():
            if name in LIVE_LINKS and url and name not in opened:
                try:
                    status, page = fetch(url)
                except OSError as exc:  # TensorBoard takes a few seconds to listen after its address is known
                    errors[name] = f"{url}: {exc}"
                    continue
                if status == 200:
                    opened[name] = (url, page)
        if all(name in opened for name in LIVE_LINKS):
            seen["opened"] = time.monotonic()
            return True
        return False

    wait_for(look, timeout=300, what="the training task to run with its links opened", every=0.5)
    wait_for(
        lambda: stack.task_instance(LINKS_DAG, RUN_ID, "train")["state"] != "running",
        timeout=300,
        what="the training task to end",
        every=0.5,
    )
    train_ended = time.monotonic()
    run = stack.wait_run_ended(LINKS_DAG, RUN_ID, timeout=300)
    if "opened" in seen:
        log.info(
            "the links opened %.1f s after the training task was seen running, %.1f s before it ended",
            seen["opened"] - seen["running"],
            train_ended - seen["opened"],
        )
    return {"run": run, "opened": opened, "errors": errors, "ended": time.monotonic()}


@pytest.mark.timeout(700)
def test_the_links_of_the_running_training_task_open(links_run):
    opened = links_run["opened"]
    assert set(opened) == set(LIVE_LINKS), f"opened {sorted(opened)}; failures {links_run['errors']}"
    assert "<title>TensorBoard" in opened["TensorBoard"][1], opened["TensorBoard"][1][:500]
    assert "Spark" in opened["Spark application"][1], opened["Spark application"][1][:500]
    assert links_run["run"]["state"] == "success", links_run["run"]


@pytest.mark.timeout(120)
def test_every_link_of_the_finished_task_opens_or_is_absent(links_run, stack):
    links = stack.links(LINKS_DAG, RUN_ID, "train")["extra_links"]
    assert set(links) == {"Spark application", "TensorBoard", "Training report"}, links
    # both ended with the application (a local one: no history server keeps its UI): no link, rather than a dead one
    assert not links["Spark application"] and not links["TensorBoard"], links
    for name in LIVE_LINKS:
        with pytest.raises(OSError):
            fetch(links_run["opened"][name][0])  # what they led to while it ran is gone indeed
    run_dir = stack.xcom(LINKS_DAG, RUN_ID, "train", "run_dir")
    assert links["Training report"] == report_link(run_dir, dag_id=LINKS_DAG)
    status, page = fetch(urllib.parse.urljoin(stack.base_url + "/", links["Training report"]), stack.token())
    assert status == 200 and page == Path(run_dir, "report", "report.html").read_text(errors="replace")
    assert stack.links(LINKS_DAG, RUN_ID, "publish")["extra_links"] == {}


@pytest.mark.timeout(120)
def test_the_task_logs_have_no_failed_xcom_lookups(links_run, stack):
    for task_id in ("train", "publish"):
        text = stack.task_log(LINKS_DAG, RUN_ID, task_id, 1)
        assert "XCom not found" not in text, text[-3000:]
    train_log = stack.task_log(LINKS_DAG, RUN_ID, "train", 1)
    assert "TensorBoard serves the run at http://" in train_log, train_log[-3000:]


@pytest.mark.timeout(60)
def test_no_task_log_of_the_session_has_a_failed_xcom_lookup(links_run, stack):
    """Every try of every task the stack ran so far (the drills' deferred ones too, when they ran first)."""
    logs = sorted((stack.home / "logs").glob("dag_id=*/run_id=*/task_id=*/attempt=*.log"))
    assert any(f"dag_id={LINKS_DAG}" in str(path) for path in logs), logs
    failed = [str(path) for path in logs if "XCom not found" in path.read_text(errors="replace")]
    assert failed == [], failed
    log.info("no failed XCom lookup in %d task logs", len(logs))


@pytest.fixture(scope="module")
def first_scoring(links_run, stack: AirflowStack):
    """The scoring run that the links run's publish started, once it ended; and how long it took to appear."""
    registry = stack.env["TFOS_DRILL_REGISTRY"]
    started = wait_for(
        lambda: runs_of(stack, SCORING_DAG),
        timeout=120,
        what=f"a {SCORING_DAG} run after the model was published",
        state=lambda: f"asset events {asset_events(stack, LINKS_DAG)}\n{stack.tails(20)}",
    )
    appeared_after = time.monotonic() - links_run["ended"]
    (run,) = started
    ended = stack.wait_run_ended(SCORING_DAG, run["dag_run_id"], timeout=300)
    return {"run": ended, "appeared_after": appeared_after, "registry": registry}


@pytest.mark.timeout(600)
def test_one_publish_starts_exactly_one_scoring_run_that_scores_with_the_published_version(
    links_run, first_scoring, stack
):
    run, registry = first_scoring["run"], first_scoring["registry"]
    assert run["state"] == "success", run
    assert len(runs_of(stack, SCORING_DAG)) == 1
    published = stack.xcom(LINKS_DAG, RUN_ID, "publish", "return_value")
    in_service = ModelRegistry(registry).current()
    assert published["published"] and published["version"] == in_service["version"]
    (event,) = asset_events(stack, LINKS_DAG)
    assert event["uri"] == model_asset(registry).uri
    assert event["extra"]["version"] == in_service["version"]
    assert event["extra"]["model_path"] == in_service["model_path"]
    score_run_dir = stack.xcom(SCORING_DAG, run["dag_run_id"], "score", "run_dir")
    spec = RunDir(score_run_dir).read_spec()
    assert spec["inference"]["model_path"] == in_service["model_path"]  # scored with the published version
    result = stack.xcom(SCORING_DAG, run["dag_run_id"], "score", "return_value")
    assert Path(result["output_path"], SUCCESS).exists(), result
    log.info("the scoring run appeared %.1f s after the publishing run ended", first_scoring["appeared_after"])


@pytest.mark.timeout(300)
def test_a_rejected_model_starts_no_scoring_run(links_run, first_scoring, stack, tmp_path):
    registry = ModelRegistry(first_scoring["registry"])
    in_service = registry.current()
    # the candidate: the model in service, exported again with a loss ten times worse
    trained = RunDir(stack.xcom(LINKS_DAG, RUN_ID, "train", "run_dir"))
    done = trained.export_success()
    candidate = RunDir(f"{stack.env['AIRFLOW__TFOS__RUN_DIR_BASE']}/rejected-candidate")
    staging = candidate.export_staging()
    shutil.copytree(trained.path("export"), staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(SUCCESS))
    worse = {"loss": float(done["metrics"]["loss"]) * 10 + 1.0}
    candidate.publish_export(staging, spec_hash=done["spec_hash"], step=done["step"], metrics=worse)

    run_id = "rejected_candidate"
    stack.request(
        "POST",
        f"/api/v2/dags/{PUBLISH_DAG}/dagRuns",
        {"dag_run_id": run_id, "logical_date": "2026-04-02T00:00:00+00:00", "conf": {"run_dir": candidate.uri}},
    )
    run = stack.wait_run_ended(PUBLISH_DAG, run_id, timeout=180)
    assert run["state"] == "success", run
    decision = stack.xcom(PUBLISH_DAG, run_id, "publish", "return_value")
    assert not decision["published"] and "worse" in decision["reason"], decision
    assert registry.current()["version"] == in_service["version"]
    # a scoring run appeared within appeared_after of the accepted publish: wait five times that (at least 10 s)
    wait = max(10.0, 5 * first_scoring["appeared_after"])
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        assert len(runs_of(stack, SCORING_DAG)) == 1, runs_of(stack, SCORING_DAG)
        time.sleep(1.0)
    assert asset_events(stack, PUBLISH_DAG) == []
    log.info("no scoring run in the %.0f s after the rejected publish", wait)
