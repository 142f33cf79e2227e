"""SPNEGO over HTTPS (``swebhdfs://`` and a YARN ResourceManager on ``https``), against the session's real MIT
KDC: both emulators serve TLS with a throwaway certificate and require Kerberos. The clients negotiate inside
TLS, follow the namenode's redirect to the datanode over HTTPS, and a certificate they cannot check is named
as a TLS error, before any credential is sent."""

from __future__ import annotations

import asyncio
import json

import pytest
import requests

from airflow_tfos.shared.storage import kerberos
from airflow_tfos.shared.storage.kerberos import KerberosLogin
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.testing.tls import self_signed
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from airflow_tfos.testing.yarn import ResourceManagerEmulator


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    return self_signed(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def hdfs(kdc, tls):
    with WebHDFSEmulator(kerberos_keytab=kdc.http_keytab, ssl_context=tls[0]) as emulator:
        yield emulator


@pytest.fixture(autouse=True)
def _no_process_token():
    kerberos.use_delegation_token(None)
    yield
    kerberos.use_delegation_token(None)


def test_swebhdfs_negotiates_inside_tls_and_follows_the_redirect_over_https(hdfs, kdc, tls, monkeypatch):
    # as on many machines: a system bundle named in the environment must not replace the connection's own CA
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", requests.certs.where())
    assert hdfs.url.startswith("https://") and hdfs.datanode_url.startswith("https://")
    answer = requests.get(f"{hdfs.url}/webhdfs/v1/?op=LISTSTATUS", verify=tls[1], timeout=10)
    assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Negotiate"

    alice = KerberosLogin(kdc.principal("alice"), kdc.alice_keytab)
    store = WebHDFSStorage(hdfs.config(user=None, auth="kerberos", verify=tls[1], retries=0), login=alice)
    uri = hdfs.uri("/tls/model.bin", scheme="swebhdfs")
    store.write_bytes(uri, b"weights")
    assert store.read_bytes(uri) == b"weights"
    assert store._status(uri)["owner"] == "alice"
    written = [r for r in hdfs.requests if r.path == "/tls/model.bin"]
    assert {r.server for r in written} == {"namenode0", "datanode"}
    assert all(r.query.get("delegation") for r in written if r.server == "datanode")

    # a process without any login, with the token the driver would hand it, over HTTPS too
    token = store.get_delegation_token()
    kerberos.use_delegation_token(token)
    nobody = WebHDFSStorage(hdfs.config(user=None, auth="kerberos", verify=tls[1], retries=0))
    assert nobody.read_bytes(uri) == b"weights"
    store.cancel_delegation_token(token)


def test_a_certificate_the_client_cannot_check_is_a_tls_error_and_nothing_is_negotiated(hdfs, kdc):
    before = len(hdfs.kerberos.principals)
    alice = KerberosLogin(kdc.principal("alice"), kdc.alice_keytab)
    store = WebHDFSStorage(hdfs.config(user=None, auth="kerberos", retries=0), login=alice)  # verify: system CAs
    with pytest.raises(Exception) as failure:
        store.exists(hdfs.uri("/tls", scheme="swebhdfs"))
    assert "CERTIFICATE_VERIFY_FAILED" in str(failure.value), failure.value
    assert len(hdfs.kerberos.principals) == before  # no SPNEGO token reached the server


def test_the_yarn_hook_negotiates_with_an_https_resource_manager(kdc, tls, monkeypatch):
    from airflow_tfos.hooks.yarn import YarnHook

    with ResourceManagerEmulator(kerberos_keytab=kdc.http_keytab, ssl_context=tls[0]) as rm:
        app_id = rm.add_application("a", user="alice")
        extra = {
            "auth": "kerberos",
            "principal": kdc.principal("alice"),
            "keytab": kdc.alice_keytab,
            "verify": tls[1],
            "max_retries": 0,
        }
        conn = {"conn_type": "yarn", "host": rm.addresses[0], "schema": "https", "extra": extra}
        monkeypatch.setenv("AIRFLOW_CONN_YARN_TLS_KRB", json.dumps(conn))
        assert YarnHook(yarn_conn_id="yarn_tls_krb").get_application(app_id).state == "RUNNING"
        assert asyncio.run(YarnHook(yarn_conn_id="yarn_tls_krb").aget_application(app_id)).state == "RUNNING"
        assert rm.principals[-2:] == [kdc.principal("alice")] * 2
        unauthenticated = requests.get(f"https://{rm.addresses[0]}/ws/v1/cluster/apps", verify=tls[1], timeout=10)
        assert unauthenticated.status_code == 401
