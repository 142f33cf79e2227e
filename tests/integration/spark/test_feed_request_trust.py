"""A planted feed request (``feeds/<id>.json``) naming a function with a command, given to a real serving driver
on a local Spark master: refused unimported, recorded, and the driver serves on. What the driver's checks
allow: tests/unit/airflow_tfos/runtime/driver/test_entry_feed_request_trust.py."""

from __future__ import annotations

import subprocess

import pytest

from airflow_tfos.shared.events import FEED_REFUSED
from airflow_tfos.shared.rundir import RunDir
from tests.conftest import REPO
from tests.integration.spark.test_driver_serving import wait_for
from tests.support.helpers import driver_command
from tests.unit.airflow_tfos.runtime.driver.test_entry_feed_request_trust import SERVING


@pytest.mark.integration
def test_a_planted_function_request_does_not_run_and_its_refusal_is_recorded(tmp_path):
    """The attack as reported: a request naming ``pydoc:pipepager`` with a command. The serving driver (its
    spec verified with --spec-hash) refuses it unimported, records the refusal, and serves on."""
    rundir = RunDir(str(tmp_path / "run"))
    digest = rundir.write_spec(SERVING)
    marker = tmp_path / "command-ran"
    rundir.request_feed(
        "planted",
        {"data": {"format": "function", "function": "pydoc:pipepager", "options": {"cmd": f"id > {marker}"}}},
    )
    command = driver_command(rundir.uri)
    command[command.index("local-cluster[2,1,1024]")] = "local[1]"  # no TF cluster starts: one JVM is enough
    driver = subprocess.Popen([*command, "--spec-hash", digest], cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: rundir.feed_result("planted") is not None, 180, driver)
        assert rundir.read_status()["state"] == "RUNNING"  # it serves on: nothing of the request ran
        rundir.request_stop("test")
        _, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert not marker.exists(), "the planted command ran"
    done = rundir.feed_result("planted")
    assert done["refused"] is True and done["exit_code"] == 2
    assert done["error"].startswith("feed data.function 'pydoc:pipepager' is not a data function the run's spec")
    assert [e["feed_id"] for e in rundir.events(FEED_REFUSED)] == ["planted"]
    assert driver.returncode == 0, err[-4000:]
