"""The feed operator writes no request the application would refuse, and a refused feed fails its task for good."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_tfos.hooks.run_dir import run_tag
from airflow_tfos.operators import TFoSFeedOperator, TFoSLaunchClusterOperator
from airflow_tfos.operators.lifecycle import feed_outcome
from airflow_tfos.shared.rundir import RunDir
from tests.support.fakes import FakeBackend, make_context, use_backend

FEED = {"features": ["x"], "label": "y", "batch_size": 32}
PLANTED = {"format": "function", "function": "pydoc:pipepager", "options": {"cmd": "id > /tmp/planted"}}


def launch(tmp_path, **kwargs) -> TFoSLaunchClusterOperator:
    return TFoSLaunchClusterOperator(
        task_id="launch", train_fn="pkg.mod:main_fun", feed=FEED, run_dir=str(tmp_path), ship_code=False, **kwargs
    )


def feed_op(tmp_path, data: dict) -> TFoSFeedOperator:
    op = TFoSFeedOperator(
        task_id="feed", run_dir=str(tmp_path), data=data, poll_interval=0.01, feed_timeout=0.05, deferrable=False
    )
    backend = FakeBackend()
    backend.add("application_1_0001", "RUNNING", tags=[run_tag(str(tmp_path))])
    use_backend(op, backend)
    return op


def test_a_rendered_data_function_the_launch_does_not_allow_is_never_requested(tmp_path):
    """What a DAG run's conf renders into the feed's data cannot name a function the launch did not allow."""
    rundir = RunDir(str(tmp_path))
    rundir.write_spec(launch(tmp_path).build_spec().to_json())
    op = feed_op(tmp_path, PLANTED)
    with pytest.raises(AirflowFailException, match=r"^TFoSFeedOperator 'feed': data.function 'pydoc:pipepager' is"):
        op.execute(make_context("feed"))
    assert rundir.pending_feeds() == [] and rundir.feed_result("feed-20261121T000000") is None


def test_a_data_function_the_launch_allows_is_requested(tmp_path):
    allowed = "pkg.frames:day"
    rundir = RunDir(str(tmp_path))
    rundir.write_spec(launch(tmp_path, feed_functions=[allowed]).build_spec().to_json())
    data = {"format": "function", "function": allowed, "options": {"day": "2026-11-21"}}
    op = feed_op(tmp_path, data)
    with pytest.raises(Exception, match="was not done within"):
        op.execute(make_context("feed"))
    assert [r["data"] for r in rundir.pending_feeds()] == [data]


def test_feed_functions_are_in_the_spec_and_not_templated(tmp_path):
    assert "feed_functions" not in launch(tmp_path).build_spec().to_json()  # the hash of a launch without them
    spec = launch(tmp_path, feed_functions=("pkg.frames:day",)).build_spec().to_json()
    assert spec["feed_functions"] == ["pkg.frames:day"]
    assert "feed_functions" not in TFoSLaunchClusterOperator.template_fields


def test_a_feed_the_application_refused_fails_without_retry():
    error = "feed data.function 'pydoc:pipepager' is not ..."
    record = {"feed_id": "f", "error": error, "exit_code": 2, "refused": True}
    with pytest.raises(AirflowFailException, match=r"^feed data.function 'pydoc:pipepager' is not .* was refused"):
        feed_outcome("f", record)
