"""Airflow ``webhdfs`` connections become WebHDFS settings (connections from AIRFLOW_CONN_* variables, no DB)."""

from __future__ import annotations

import json
import logging

import pytest

from airflow_tfos.hooks.webhdfs_connection import storage_from_connection, webhdfs_config_from_connection
from airflow_tfos.shared.errors import WebHDFSConfigError
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.shared.storage.webhdfs_config import WebHDFSConfig
from airflow_tfos.testing.webhdfs import WebHDFSEmulator


def set_connection(monkeypatch, conn_id: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "webhdfs", **fields}))


def test_one_namenode_with_login(monkeypatch):
    set_connection(monkeypatch, "webhdfs_default", host="nn1.example.com", port=9870, login="etl")
    config = webhdfs_config_from_connection()
    assert config.namenodes == ("http://nn1.example.com:9870",)
    assert (config.user, config.auth, config.verify) == ("etl", "simple", True)


def test_ha_namenodes_ssl_verify_and_tuning_extras(monkeypatch):
    extra = {"use_ssl": "True", "verify": "/etc/ssl/ca.pem", "retries": "5", "timeout": 10, "nameservice": "prod"}
    set_connection(monkeypatch, "hdfs_prod", host="nn1, nn2:50470", port=9871, login="etl", extra=extra)
    config = webhdfs_config_from_connection("hdfs_prod", proxy_user="alice")
    assert config.namenodes == ("https://nn1:9871", "https://nn2:50470")
    assert config.user == "alice"  # proxy_user wins over the login, as in WebHDFSHook
    assert (config.verify, config.retries, config.timeout, config.nameservice) == ("/etc/ssl/ca.pem", 5, 10.0, "prod")
    assert WebHDFSConfig.from_json(config.to_json()) == config


def test_defaults_ports_schema_prefix_and_verify_false(monkeypatch):
    set_connection(
        monkeypatch, "knox", host="knox", schema="gateway/default", extra={"use_ssl": True, "verify": "false"}
    )
    config = webhdfs_config_from_connection("knox")
    assert config.namenodes == ("https://knox:9871/gateway/default",)
    assert config.verify is False and config.user is None


def test_the_password_never_reaches_the_settings(monkeypatch, caplog):
    set_connection(monkeypatch, "secret", host="nn", port=9870, login="etl", password="s3cr3t-pw")
    with caplog.at_level(logging.WARNING):
        config = webhdfs_config_from_connection("secret")
    assert "s3cr3t-pw" not in config.to_json() and "s3cr3t-pw" not in repr(config)
    assert "s3cr3t-pw" not in caplog.text and "has a password" in caplog.text


def test_kerberos_from_airflow_security_or_the_extra(monkeypatch):
    set_connection(monkeypatch, "krb", host="nn", port=9871, login="ignored", extra={"auth": "kerberos"})
    config = webhdfs_config_from_connection("krb", proxy_user="svc")
    assert (config.auth, config.user) == ("kerberos", "svc")
    monkeypatch.setenv("AIRFLOW__CORE__SECURITY", "kerberos")
    set_connection(monkeypatch, "krb2", host="nn", port=9871, login="ignored")
    assert webhdfs_config_from_connection("krb2").auth == "kerberos"
    assert webhdfs_config_from_connection("krb2").user is None


def test_bad_connections_say_what_to_change(monkeypatch):
    set_connection(monkeypatch, "nohost", port=9870)
    with pytest.raises(WebHDFSConfigError, match="has no host"):
        webhdfs_config_from_connection("nohost")
    set_connection(monkeypatch, "badextra", host="nn", extra={"retries": "many"})
    with pytest.raises(WebHDFSConfigError, match="extra 'retries' must be a number"):
        webhdfs_config_from_connection("badextra")


def test_storage_from_connection_reaches_hdfs(monkeypatch):
    with WebHDFSEmulator(namenodes=2) as emu:
        hosts = ",".join(u.split("://", 1)[1] for u in emu.urls)  # host:port entries
        set_connection(monkeypatch, "emu", host=hosts, login="etl", extra={"retries": 1, "backoff": 0.05})
        storage = storage_from_connection("emu")
        assert isinstance(storage, WebHDFSStorage)
        storage.write_bytes("hdfs://prod/runs/r/status.json", b"{}")
        assert storage.read_bytes("webhdfs://anything/runs/r/status.json") == b"{}"
        assert {r.user for r in emu.requests if r.server.startswith("namenode")} == {"etl"}
