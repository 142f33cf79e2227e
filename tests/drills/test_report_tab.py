"""The training report as a tab of the task instance and of the Dag run, inside the Airflow UI.

A finished tfos_drill run of the shared stack is used (one the drills finished, else one trained here;
every user is an admin on that stack, as the UI logs in by itself). The tab routes must lead to the run
directory's own report, the UI must show it as a tab (a Chromium screenshot goes to
docs/images/report-tab.png), and the numbers the report shows must be those of the run directory's export
and progress records. A second api-server on the same metadata database, with an auth manager that lets
each user read one Dag only, shows that a user who may not read the Dag's task instances gets no report
through the tab, while a reader of the Dag does.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import secrets
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from airflow_tfos.plugins.report_urls import report_link
from airflow_tfos.plugins.reports import NOT_FOUND, RUN_TAB_ROUTE, TASK_TAB_ROUTE
from airflow_tfos.shared.rundir import OWNER
from tests.conftest import REPO
from tests.drills import browser
from tests.drills.stack import AirflowStack, StackError
from tests.support.api_server import dag_readers_env, running_api_server, sign_in

pytestmark = [pytest.mark.integration, pytest.mark.drills]

DAG_ID = "tfos_drill"
OTHER_DAG_ID = "tfos_drill_long"
TASK_ID = "train"
RUN_ID = "report_tab"
#: tfos_drill trains 6 epochs of 10 steps.
TOTAL_STEPS = 60
IMAGE = REPO / "docs" / "images" / "report-tab.png"
PASSWORDS = {"alice": "alice-secret", "bob": "bob-secret"}
ROLES = {"alice": "viewer", "bob": "viewer"}


def finished_run(stack: AirflowStack) -> dict[str, str] | None:
    """A successful tfos_drill run of this session whose run directory holds a report and owner.json (the
    drills' runs, when they ran first), else None."""
    runs = stack.get(f"/api/v2/dags/{DAG_ID}/dagRuns", state="success", order_by="-end_date")["dag_runs"]
    for run in runs:
        try:
            run_dir = stack.xcom(DAG_ID, run["dag_run_id"], TASK_ID, "run_dir")
        except StackError:
            continue
        if all(Path(run_dir, name).is_file() for name in ("report/report.html", OWNER, "export/_SUCCESS")):
            return {"run_id": run["dag_run_id"], "run_dir": run_dir}
    return None


@pytest.fixture(scope="module")
def trained(stack: AirflowStack) -> dict[str, str]:
    """A finished tfos_drill run: its run id and run directory (from the task's XCom). A run the drills
    finished is used when there is one (the training takes minutes on two cores); else one is triggered."""
    found = finished_run(stack)
    if found is None:
        stack.trigger(DAG_ID, "2026-05-01T00:00:00+00:00", RUN_ID)
        run = stack.wait_run_ended(DAG_ID, RUN_ID, timeout=360)
        assert run["state"] == "success", stack.tails()
        found = finished_run(stack)
        assert found and found["run_id"] == RUN_ID, found
    return found


def open_url(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    """GET ``url`` following redirects; the status, the final URL and the body."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, reply.url, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, url, exc.read()


def task_tab(base_url: str, dag_id: str, run_id: str) -> str:
    """The task instance tab's address, as the UI fills in the plugin's href (an unmapped task's {MAP_INDEX}
    stays as written)."""
    query = urllib.parse.urlencode({"dag_id": dag_id, "run_id": run_id, "task_id": TASK_ID})
    return f"{base_url}/tfos/tab/task?{query}&map_index=%7BMAP_INDEX%7D"


def report_cells(page: str) -> dict[str, str]:
    """The two-column rows of the report's tables (summary and export metrics), name -> text shown."""
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td></tr>", page)
    return {html.unescape(name): html.unescape(value) for name, value in rows}


@pytest.mark.timeout(420)
def test_task_and_run_tabs_lead_to_the_run_directorys_report(stack, trained):
    run_id, run_dir = trained["run_id"], Path(trained["run_dir"])
    report = (run_dir / "report" / "report.html").read_bytes()
    owner = json.loads((run_dir / OWNER).read_text())
    assert owner == {"dag_id": DAG_ID, "task_id": TASK_ID, "run_id": run_id, "map_index": -1}

    auth = {"Authorization": f"Bearer {stack.token()}"}
    code, final, body = open_url(task_tab(stack.base_url, DAG_ID, run_id), auth)
    assert code == 200 and body == report, body[:500]
    assert final == f"{stack.base_url}/{report_link(str(run_dir), dag_id=DAG_ID)}"  # the extra link's address, kept
    query = urllib.parse.urlencode({"dag_id": DAG_ID, "run_id": run_id})
    code, final, body = open_url(f"{stack.base_url}/tfos/tab/run?{query}", auth)
    assert code == 200 and body == report  # one training task in the run: its report

    # the numbers shown are the run directory's: the export's step and metrics, the chief's latest loss
    cells = report_cells(report.decode())
    export = json.loads((run_dir / "export" / "_SUCCESS").read_text())
    progress = json.loads((run_dir / "progress.json").read_text())
    assert export["step"] == TOTAL_STEPS
    assert cells["final step"] == f"{export['step']} of {progress['total_steps']}" == f"{TOTAL_STEPS} of {TOTAL_STEPS}"
    assert float(cells["loss (latest)"]) == pytest.approx(progress["loss"], rel=1e-5)
    assert export["metrics"], export
    for name, value in export["metrics"].items():
        assert float(cells[name]) == pytest.approx(value, rel=1e-5), name


@pytest.mark.timeout(300)
def test_the_report_tab_inside_the_airflow_ui(stack, trained, tmp_path):
    run_id = trained["run_id"]
    ui = f"{stack.base_url}/dags/{DAG_ID}/runs/{urllib.parse.quote(run_id)}"
    profile = tmp_path / "chromium"
    page = browser.dom(f"{ui}/tasks/{TASK_ID}/plugin/{TASK_TAB_ROUTE}", profile)
    frame = re.search(r'<iframe[^>]*src="([^"]*)"', page)
    assert frame, page[-3000:]
    src = html.unescape(frame.group(1))
    assert (
        src.startswith("tfos/tab/task?")
        and f"dag_id={DAG_ID}" in src
        and urllib.parse.urlencode({"run_id": run_id}) in src
    ), src
    assert ">Training report<" in page  # the tab's name among the task instance's tabs
    run_page = browser.dom(f"{ui}/plugin/{RUN_TAB_ROUTE}", profile)
    assert "tfos/tab/run?" in html.unescape(run_page), run_page[-3000:]

    size = (1400, 1000)
    browser.screenshot(f"{ui}/tasks/{TASK_ID}/plugin/{TASK_TAB_ROUTE}", IMAGE, profile, size)
    from PIL import Image

    with Image.open(IMAGE) as image:
        assert image.size == size
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
        assert colours is None or len(colours) > 50, f"{IMAGE} is nearly blank"


@contextlib.contextmanager
def secure_api_server(stack: AirflowStack, tmp_path: Path):
    """A second api-server on the stack's metadata database, whose users may each read one Dag only
    (``tests.support.dag_readers``); its own signing key, so the stack's admin tokens mean nothing there."""
    env = {
        **stack.env,
        **dag_readers_env(tmp_path, PASSWORDS, ROLES, f"alice={OTHER_DAG_ID};bob={DAG_ID}"),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
    }
    with running_api_server(env, tmp_path / "secure-api-server.log") as server:
        yield server.url


@pytest.mark.timeout(300)
def test_a_user_who_may_not_read_the_dag_sees_no_report_in_the_tab(stack, trained, tmp_path):
    run_id, run_dir = trained["run_id"], trained["run_dir"]
    report = Path(run_dir, "report", "report.html").read_bytes()
    not_found = json.dumps({"detail": NOT_FOUND}, separators=(",", ":")).encode()
    with secure_api_server(stack, tmp_path) as base_url:
        alice, bob = (sign_in(base_url, user, PASSWORDS[user]) for user in ("alice", "bob"))
        query = urllib.parse.urlencode({"dag_id": DAG_ID, "run_id": run_id})
        for url in (task_tab(base_url, DAG_ID, run_id), f"{base_url}/tfos/tab/run?{query}"):
            assert open_url(url, bob)[::2] == (200, report), url  # a reader of tfos_drill
            assert open_url(url, alice)[::2] == (404, not_found), url  # a reader of tfos_drill_long only
        # the extra link's address, written by hand, says no more
        assert open_url(f"{base_url}/{report_link(run_dir)}", alice)[::2] == (404, not_found)
        assert open_url(f"{base_url}/{report_link(run_dir)}", bob)[::2] == (200, report)
        assert open_url(task_tab(base_url, DAG_ID, run_id))[0] == 401
