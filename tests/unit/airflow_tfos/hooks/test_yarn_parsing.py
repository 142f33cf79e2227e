"""The pure parts of the YARN hook: connection fields, JSON into AppState, answers classified. No server."""

from __future__ import annotations

import json

import pytest

from airflow_tfos.hooks.yarn import (
    YARN_CONNECTION_TYPE,
    ContainerLimit,
    Reply,
    YarnApplicationNotFound,
    YarnAuthError,
    YarnError,
    YarnHook,
    YarnProtocolError,
    app_state_from_json,
    app_states_from_json,
    classify_reply,
    conf_value,
    container_limit_from_new_application,
    decode_reply,
    parse_connection,
    parse_rm_addresses,
)

APP = {
    "id": "application_1326821518301_0005",
    "user": "user1",
    "name": "job",
    "queue": "a1",
    "state": "FINISHED",
    "finalStatus": "SUCCEEDED",
    "progress": 100,
    "trackingUI": "History",
    "trackingUrl": "http://host.domain.com:8088/proxy/application_1326821518301_0005/jobhistory/job/job_1",
    "diagnostics": "",
    "applicationTags": "run-1,nightly",
}


def reply(status: int, body: object, **headers: str) -> Reply:
    text = body if isinstance(body, str) else json.dumps(body)
    return Reply("http://rm1:8088", status, {k.lower(): v for k, v in headers.items()}, text)


class TestAddresses:
    def test_hosts_ports_and_urls(self):
        assert parse_rm_addresses("rm1, rm2:9000", scheme="http", port=None, conn_id="c") == (
            "http://rm1:8088",
            "http://rm2:9000",
        )
        assert parse_rm_addresses(["https://rm1"], scheme="http", port=None, conn_id="c") == ("https://rm1:8090",)
        assert parse_rm_addresses("rm1,rm1", scheme="https", port=7000, conn_id="c") == ("https://rm1:7000",)

    def test_rm_addresses_extra_replaces_host(self):
        settings = parse_connection(
            "c", host="ignored", port=None, schema=None, login="bob", extra={"rm_addresses": ["a:1", "b:2"]}
        )
        assert settings.addresses == ("http://a:1", "http://b:2")
        assert (settings.user, settings.auth, settings.verify, settings.timeout) == ("bob", "simple", True, 10.0)

    def test_extras_are_read_and_checked(self):
        settings = parse_connection(
            "c",
            host="rm",
            port=8088,
            schema="HTTPS",
            login=None,
            extra={"auth": "Kerberos", "verify": "false", "timeout": "3", "max_retries": 0},
        )
        assert (settings.auth, settings.verify, settings.timeout, settings.max_retries) == ("kerberos", False, 3.0, 0)
        assert settings.addresses == ("https://rm:8088",)
        assert parse_connection(
            "c", host="rm", port=None, schema=None, login=None, extra={"verify": "/ca.pem"}
        ).verify == ("/ca.pem")
        with pytest.raises(YarnError, match="timeout must be > 0"):
            parse_connection("c", host="rm", port=None, schema=None, login=None, extra={"timeout": 0})
        with pytest.raises(YarnError, match="'c'.*not a ResourceManager address"):
            parse_connection("c", host="ftp://rm", port=None, schema=None, login=None, extra={})


class TestApplicationJson:
    def test_one_application(self):
        state = app_state_from_json({"app": APP})
        assert (state.app_id, state.state, state.final_status) == (APP["id"], "FINISHED", "SUCCEEDED")
        assert state.tags == ("run-1", "nightly") and state.is_successful
        assert state.tracking_url == APP["trackingUrl"] and state.name == "job"
        assert app_state_from_json(APP) == state

    def test_defaults_for_missing_fields(self):
        state = app_state_from_json({"app": {"id": "application_1_0001", "state": "ACCEPTED"}})
        assert (state.final_status, state.diagnostics, state.tracking_url, state.tags) == ("UNDEFINED", "", None, ())

    def test_list_null_and_single_object(self):
        assert app_states_from_json({"apps": None}) == []
        assert app_states_from_json({"apps": {}}) == []
        assert [a.app_id for a in app_states_from_json({"apps": {"app": [APP, {**APP, "id": "x_2"}]}})] == [
            APP["id"],
            "x_2",
        ]
        assert len(app_states_from_json({"apps": {"app": APP}})) == 1

    @pytest.mark.parametrize(
        "payload",
        [{"app": {"state": "RUNNING"}}, {"app": {**APP, "state": "SLEEPING"}}, ["x"], {"apps": [1]}],
    )
    def test_what_is_not_an_application_is_a_protocol_error(self, payload):
        with pytest.raises(YarnProtocolError):
            app_state_from_json(payload)

    def test_apps_missing_is_a_protocol_error(self):
        with pytest.raises(YarnProtocolError, match="rm9"):
            app_states_from_json({"clusterInfo": {}}, source="rm9")

    def test_conf_and_new_application(self):
        assert conf_value({"property": {"key": "k", "value": "8"}}, "k") == "8"
        assert conf_value({"properties": [{"key": "a", "value": "1"}, {"key": "k", "value": 9}]}, "k") == "9"
        assert conf_value({"properties": []}, "k") is None
        payload = {"application-id": "a", "maximum-resource-capability": {"memory": 8192, "vCores": 4}}
        assert container_limit_from_new_application(payload) == ContainerLimit(8192, 4)
        with pytest.raises(YarnProtocolError):
            container_limit_from_new_application({"application-id": "a"})


class TestReplies:
    def test_classification(self):
        assert classify_reply(reply(307, "This is standby RM.", Location="http://rm2:8088/ws/v1/x?a=1")) == (
            "redirect",
            "http://rm2:8088",
        )
        assert classify_reply(reply(307, ""))[0] == "next"
        assert classify_reply(reply(503, "This is standby RM. Redirecting"))[0] == "next"
        assert classify_reply(reply(200, "This is standby RM. Redirecting to the current active RM"))[0] == "next"
        assert classify_reply(reply(502, "bad gateway")) == ("next", "HTTP 502")
        assert classify_reply(reply(404, {"RemoteException": {}})) == ("done", "")
        assert classify_reply(reply(200, {"app": APP})) == ("done", "")

    def test_decode_errors(self):
        not_found = reply(404, {"RemoteException": {"exception": "NotFoundException", "message": "app not found"}})
        with pytest.raises(YarnApplicationNotFound, match="application_1_0001"):
            decode_reply(not_found, conn_id="c", what="GET", app_id="application_1_0001")
        with pytest.raises(YarnAuthError, match="'c'"):
            decode_reply(reply(401, "Authentication required"), conn_id="c", what="GET")
        with pytest.raises(YarnProtocolError, match="http://rm1:8088"):
            decode_reply(reply(200, '{"app": {'), conn_id="c", what="GET")
        bad = {"RemoteException": {"exception": "BadRequestException", "message": "Only 'KILLED'"}}
        with pytest.raises(YarnError, match="BadRequestException: Only 'KILLED'"):
            decode_reply(reply(400, bad), conn_id="c", what="PUT")
        assert decode_reply(reply(202, {"state": "RUNNING"}), conn_id="c", what="PUT") == {"state": "RUNNING"}


def test_hook_identity_and_connection_form():
    assert (YarnHook.conn_name_attr, YarnHook.default_conn_name, YarnHook.conn_type) == (
        "yarn_conn_id",
        "yarn_default",
        "yarn",
    )
    assert YARN_CONNECTION_TYPE["connection-type"] == YarnHook.conn_type
    assert YARN_CONNECTION_TYPE["hook-class-name"] == f"{YarnHook.__module__}.{YarnHook.__name__}"
    assert "password" in YarnHook.get_ui_field_behaviour()["hidden_fields"]
    assert {"auth", "verify", "timeout", "rm_addresses"} <= set(YARN_CONNECTION_TYPE["conn-fields"])
    hook = YarnHook()  # the constructor reads nothing
    assert hook.yarn_conn_id == "yarn_default"
