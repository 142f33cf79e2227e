"""The standalone master's view of applications: the run's tag in the application name, the master's web UI
and its application states as YARN's (no master runs here; tests/integration/spark/test_lease_standalone.py
starts one)."""

from __future__ import annotations

import socket

import pytest

from airflow_tfos.hooks.backends.standalone import (
    StandaloneMaster,
    carries_tag,
    map_master_app,
    master_webui_url,
    name_with_tag,
)
from airflow_tfos.hooks.errors import LocalBackendError


def test_the_tag_rides_in_the_application_name_once():
    name = name_with_tag("tfos dag.task run", "tfos-abc")
    assert name == "tfos dag.task run [tfos-abc]" and name_with_tag(name, "tfos-abc") == name
    assert carries_tag(name, "tfos-abc") and not carries_tag(name, "tfos-ab") and not carries_tag("", "tfos-abc")


def test_the_master_web_ui_is_port_8080_unless_configured(monkeypatch):
    monkeypatch.delenv("AIRFLOW_TFOS_MASTER_WEBUI", raising=False)
    assert master_webui_url("spark://m1:7077") == "http://m1:8080"
    assert master_webui_url("spark://m1:7077", port=18080) == "http://m1:18080"
    assert master_webui_url("local-cluster[2,1,1024]") is None and master_webui_url("spark://a:7077,b:7077") is None
    monkeypatch.setenv("AIRFLOW_TFOS_MASTER_WEBUI", "http://ui-host:9090/")
    assert master_webui_url("spark://m1:7077") == "http://ui-host:9090"


@pytest.mark.parametrize(
    ("state", "active", "expected"),
    [
        ("WAITING", True, ("ACCEPTED", "UNDEFINED")),
        ("RUNNING", True, ("RUNNING", "UNDEFINED")),
        ("FINISHED", False, ("FINISHED", "SUCCEEDED")),
        ("KILLED", False, ("KILLED", "KILLED")),
        ("FAILED", False, ("FAILED", "FAILED")),
        ("KILLED", True, ("RUNNING", "UNDEFINED")),
    ],
)
def test_the_masters_application_states_map_onto_yarns(state, active, expected):
    app = map_master_app({"id": "app-1", "name": "n [t]", "state": state}, active=active, webui_url="http://m:8080")
    assert (app.state, app.final_status) == expected
    assert app.tracking_url == "http://m:8080/app/?appId=app-1" and app.name == "n [t]"


def test_an_unreachable_master_web_ui_fails_naming_the_url_and_the_setting():
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(LocalBackendError, match=rf"127\.0\.0\.1:{port}/json/.*AIRFLOW_TFOS_MASTER_WEBUI"):
        StandaloneMaster(f"http://127.0.0.1:{port}", timeout=2).find_by_tag("tfos-abc")
