"""Extra links lead only to http(s) URLs with a host: a tensorboard.json or a tracking URL written by someone
else (``javascript:``, ``file:``, ``data:``) is never pushed nor shown, and the task says why in its log.

The operators run at the hook boundary (a scripted backend) on real run directories, as in test_links.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.run_dir import run_tag
from airflow_tfos.links.tfos import SparkApplicationLink, TensorBoardLink, link_url
from airflow_tfos.operators import TFoSFeedOperator
from airflow_tfos.shared.rundir import RunDir
from tests.support.fakes import FakeBackend, make_context, use_backend
from tests.unit.airflow_tfos.links.test_tfos import recording_context, scripted_run
from tests.unit.airflow_tfos.test_operators import export, train_op

HOSTILE = [
    "javascript:alert(document.cookie)",
    "JavaScript:alert(1)",
    "file:///etc/passwd",
    "data:text/html,<script>alert(1)</script>",
    "//attacker.example/x",
    "http:///no-host",
    "http://user:secret@board.example:6006/",
]


@pytest.mark.parametrize("url", HOSTILE)
def test_only_http_urls_with_a_host_make_a_link(url, caplog):
    with caplog.at_level(logging.WARNING):
        assert link_url(url, "TensorBoard") is None
    assert "not linking TensorBoard" in caplog.text
    assert "secret" not in caplog.text  # the refused URL is not logged
    assert link_url("http://board.example:6006/") == "http://board.example:6006/"
    assert link_url("HTTPS://rm.example:8090/proxy/application_1_0001/") is not None
    assert link_url("") is None and link_url(None) is None


@pytest.mark.parametrize("url", ["javascript:alert(1)", "file:///etc/passwd", "data:text/html,x"])
def test_a_tensorboard_json_that_is_not_http_is_never_pushed(url, tmp_path, capsys):
    op = train_op(tmp_path, tensorboard=True)
    scripted_run(op, tmp_path, running_polls=4, on_poll=lambda poll, rundir: rundir.write_tensorboard(url))
    context, pushed = recording_context()
    op.execute(context)
    log = capsys.readouterr().out
    assert url not in pushed.get(TensorBoardLink().xcom_key, [])
    assert url not in pushed.get("tensorboard_url", [])
    assert TensorBoardLink().get_link(op, ti_key=None) == ""
    assert log.count("not linking TensorBoard") == 1  # once, not on every poll


def test_a_tracking_url_that_is_not_http_is_never_pushed(tmp_path, capsys):
    op = train_op(tmp_path)
    backend = scripted_run(op, tmp_path, running_polls=3)
    polled = backend.get_state

    def hostile(app_id):
        state = polled(app_id)
        return replace(state, tracking_url="javascript:alert(1)")

    backend.get_state = hostile
    context, pushed = recording_context()
    op.execute(context)
    assert "javascript:alert(1)" not in pushed.get(SparkApplicationLink().xcom_key, [])
    assert "javascript:alert(1)" not in pushed.get("tracking_url", [])
    assert SparkApplicationLink().get_link(op, ti_key=None) == ""
    assert capsys.readouterr().out.count("not linking the application's UI") == 1


def test_a_deferred_task_drops_a_tracking_url_that_is_not_http(tmp_path):
    op = train_op(tmp_path)
    use_backend(op, FakeBackend())
    export(RunDir(str(tmp_path)), op.request_hash())
    app = AppState("application_1_0001", "FINISHED", "SUCCEEDED", tracking_url="file:///etc/passwd")
    context = make_context()
    op.execute_complete(context, {"status": "done", "app": app.to_json(), "tracking_url": "file:///etc/passwd"})
    assert "tracking_url" not in context["ti"].xcoms
    assert SparkApplicationLink().get_link(op, ti_key=None) == ""


def test_a_feed_task_does_not_link_a_tracking_url_that_is_not_http(tmp_path):
    backend = FakeBackend()
    tag = run_tag(str(tmp_path))
    live = backend.add("application_1_0001", "RUNNING", tags=[tag])
    backend.apps[live.app_id] = replace(live, tracking_url="data:text/html,<b>x</b>")
    op = TFoSFeedOperator(task_id="feed", run_dir=str(tmp_path), poll_interval=0.01, feed_timeout=0.05)
    use_backend(op, backend)
    op.resolve(make_context("feed"))
    assert op.live_application().app_id == "application_1_0001"
    assert SparkApplicationLink().get_link(op, ti_key=None) == ""
    backend.apps[live.app_id] = replace(live, tracking_url="http://rm.example:8088/proxy/application_1_0001/")
    op.live_application()
    assert SparkApplicationLink().get_link(op, ti_key=None) == "http://rm.example:8088/proxy/application_1_0001/"
