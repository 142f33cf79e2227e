"""Kerberos against a real MIT KDC: SPNEGO on both emulators, the clients' logins (keytab, ticket cache),
WebHDFS delegation tokens, and the errors a user meets (no ticket, a stale keytab, clock skew, an expired
token): each names the principal, the service and the fix, fast, without falling back to simple auth."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import sys
import time

import pytest
import requests

from airflow_tfos.shared.errors import KerberosAuthError
from airflow_tfos.shared.storage import kerberos
from airflow_tfos.shared.storage.kerberos import KerberosLogin
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.testing.spnego import Unauthenticated, short_name
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from airflow_tfos.testing.yarn import ResourceManagerEmulator

SERVICE = "HTTP/127.0.0.1"


@pytest.fixture(scope="module")
def hdfs(kdc):
    with WebHDFSEmulator(kerberos_keytab=kdc.http_keytab) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def rm(kdc):
    with ResourceManagerEmulator(kerberos_keytab=kdc.http_keytab) as emulator:
        yield emulator


@pytest.fixture
def alice(kdc):
    return KerberosLogin(kdc.principal("alice"), kdc.alice_keytab)


@pytest.fixture(autouse=True)
def _no_process_token():
    kerberos.use_delegation_token(None)
    yield
    kerberos.use_delegation_token(None)


def storage(emulator, login=None, **settings) -> WebHDFSStorage:
    return WebHDFSStorage(emulator.config(user=None, auth="kerberos", retries=0, **settings), login=login)


def test_unauthenticated_requests_get_401_negotiate_from_both_emulators(hdfs, rm):
    for url in (f"{hdfs.url}/webhdfs/v1/?op=LISTSTATUS&user.name=hdfs", f"{rm.url()}/ws/v1/cluster/apps?user.name=x"):
        answer = requests.get(url, timeout=10)
        assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Negotiate", url
    forged = {"Authorization": "Negotiate " + "QUFBQQ=="}  # not a Kerberos token
    assert requests.get(f"{hdfs.url}/webhdfs/v1/?op=LISTSTATUS", headers=forged, timeout=10).status_code == 401


def test_a_keytab_login_writes_as_the_principals_short_name(hdfs, alice, kdc):
    store = storage(hdfs, alice)
    store.write_bytes(hdfs.uri("/k/a.txt"), b"secret data")
    assert store.read_bytes(hdfs.uri("/k/a.txt")) == b"secret data"
    assert store._status(hdfs.uri("/k/a.txt"))["owner"] == "alice"
    assert kdc.principal("alice") in hdfs.kerberos.principals
    # The datanode's step was authenticated by a token the namenode put into its redirect, not by SPNEGO.
    assert {r.query.get("delegation") is not None for r in hdfs.requests if r.server == "datanode"} == {True}


def test_a_ticket_cache_login_works_and_a_missing_one_is_a_clear_error(hdfs, kdc, tmp_path, monkeypatch):
    cache = f"FILE:{tmp_path}/ccache"
    kdc.kinit("alice", kdc.alice_keytab, cache)
    monkeypatch.setenv("KRB5CCNAME", cache)
    assert storage(hdfs).exists(hdfs.uri("/")) is True

    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/none")
    hdfs.requests.clear()
    started = time.monotonic()
    with pytest.raises(KerberosAuthError) as failure:
        storage(hdfs, KerberosLogin(kdc.principal("alice"))).exists(hdfs.uri("/"))
    message = str(failure.value)
    # the principal, and where its ticket was looked for
    assert message.startswith(f"no Kerberos ticket for alice@TFOS.TEST (ticket cache FILE:{tmp_path}/none): run kinit")
    assert SERVICE in message and "keytab" in message
    assert time.monotonic() - started < 5
    assert not hdfs.requests  # nothing was sent, least of all a request as a simple-auth user


def test_the_rm_emulator_knows_the_principal_and_the_yarn_hook_logs_in_from_a_keytab(rm, kdc, monkeypatch):
    from airflow_tfos.hooks.yarn import YarnAuthError, YarnHook

    app_id = rm.add_application("a", user="alice")
    conn = {"conn_type": "yarn", "host": rm.addresses[0], "extra": {"auth": "kerberos", "max_retries": 0}}
    keyed = {**conn, "extra": {**conn["extra"], "principal": "alice@TFOS.TEST", "keytab": kdc.alice_keytab}}
    monkeypatch.setenv("AIRFLOW_CONN_YARN_KRB", json.dumps(keyed))
    assert YarnHook(yarn_conn_id="yarn_krb").get_application(app_id).state == "RUNNING"
    assert asyncio.run(YarnHook(yarn_conn_id="yarn_krb").aget_application(app_id)).state == "RUNNING"
    assert rm.principals[-2:] == ["alice@TFOS.TEST", "alice@TFOS.TEST"]

    monkeypatch.setenv("AIRFLOW_CONN_YARN_NOKRB", json.dumps(conn))  # no keytab, and the ticket cache is empty
    with pytest.raises(YarnAuthError) as failure:
        YarnHook(yarn_conn_id="yarn_nokrb").get_application(app_id)
    assert str(failure.value).startswith("no Kerberos ticket") and SERVICE in str(failure.value)
    assert "'principal' and 'keytab'" in str(failure.value)


def test_a_stale_keytab_names_the_principal_and_the_fix(hdfs, kdc):
    stale = kdc.user_keytab("bob")
    shutil.copy(stale, stale + ".old")
    kdc.keytab("bob", create=False)  # a new key: the copy is now out of date
    with pytest.raises(KerberosAuthError) as failure:
        storage(hdfs, KerberosLogin(kdc.principal("bob"), stale + ".old")).exists(hdfs.uri("/"))
    message = str(failure.value)
    assert message.startswith("the keytab does not hold the current key of bob@TFOS.TEST")
    assert SERVICE in message and "ktadd" in message
    assert f"bob@TFOS.TEST (keytab {stale}.old)" in message  # which keytab: the one to replace


@pytest.mark.skipif(shutil.which("faketime") is None, reason="LOUD: the faketime package is not installed here")
def test_clock_skew_beyond_the_realms_limit_is_named(hdfs, kdc):
    code = (
        "from airflow_tfos.shared.storage.kerberos import KerberosLogin, negotiate_header\n"
        f"negotiate_header('127.0.0.1', KerberosLogin('alice@TFOS.TEST', {kdc.alice_keytab!r}))\n"
    )
    done = subprocess.run(
        ["faketime", "-f", "+20m", sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "KerberosAuthError: clock skew too great" in done.stderr and "alice@TFOS.TEST" in done.stderr
    assert "NTP" in done.stderr and SERVICE in done.stderr


def test_short_names_follow_hadoops_default_rule():
    assert short_name("alice@TFOS.TEST", "TFOS.TEST") == "alice"
    assert short_name("nn/host.example@TFOS.TEST", "TFOS.TEST") == "nn"
    with pytest.raises(Unauthenticated, match="No rules applied to eve@OTHER.REALM"):
        short_name("eve@OTHER.REALM", "TFOS.TEST")


def test_delegation_tokens_are_issued_used_renewed_expire_and_are_cancelled(kdc, alice):
    with WebHDFSEmulator(kerberos_keytab=kdc.http_keytab, token_renew_interval=1.0, token_max_lifetime=2.5) as hdfs:
        owner = storage(hdfs, alice)
        token = owner.get_delegation_token()
        # A process with no Kerberos login at all reads and writes with the token alone.
        kerberos.use_delegation_token(token)
        nobody = storage(hdfs, KerberosLogin("nobody@TFOS.TEST"))
        nobody.write_bytes(hdfs.uri("/t/x"), b"1")
        assert nobody._status(hdfs.uri("/t/x"))["owner"] == "alice"
        assert all(r.query.get("delegation") == token for r in hdfs.requests if r.path == "/t/x")
        time.sleep(0.6)
        expiry = owner.renew_delegation_token(token)
        assert 0.8 < expiry - time.time() <= 1.0
        time.sleep(0.6)
        assert nobody.read_bytes(hdfs.uri("/t/x")) == b"1"  # alive past its first expiry thanks to the renewal
        time.sleep(1.2)
        with pytest.raises(PermissionError, match=r"refused the delegation token .*is expired"):
            nobody.read_bytes(hdfs.uri("/t/x"))
        with pytest.raises(PermissionError, match="expired token"):
            owner.renew_delegation_token(token)  # past the maximum lifetime

        fresh = owner.get_delegation_token()
        kerberos.use_delegation_token(fresh)
        assert nobody.exists(hdfs.uri("/t/x"))
        # A token cannot get another one: the token operations need Kerberos.
        answer = requests.get(f"{hdfs.url}/webhdfs/v1/?op=GETDELEGATIONTOKEN&delegation={fresh}", timeout=10)
        assert answer.status_code == 403 and "only with kerberos" in answer.json()["RemoteException"]["message"]
        owner.cancel_delegation_token(fresh)
        with pytest.raises(PermissionError, match="cancelled"):
            nobody.exists(hdfs.uri("/t/x"))


def test_a_keytab_login_outlives_its_tickets_and_an_expired_ticket_cache_is_named(tmp_path, monkeypatch):
    from airflow_tfos.testing.kdc import KDC

    # A realm of its own whose tickets live 4 s, with 1 s of clock tolerance (the session's realm is restored).
    with KDC(realm="SHORT.TEST", ticket_lifetime="4s", clockskew=1) as short:
        short.activate()
        http, user = short.service_keytab("HTTP/127.0.0.1"), short.user_keytab("carol")
        with WebHDFSEmulator(kerberos_keytab=http) as hdfs:
            keyed = storage(hdfs, KerberosLogin("carol@SHORT.TEST", user))
            cache = f"FILE:{tmp_path}/ccache"
            short.kinit("carol", user, cache)
            monkeypatch.setenv("KRB5CCNAME", cache)
            cached = storage(hdfs, KerberosLogin())
            assert keyed.exists(hdfs.uri("/")) and cached.exists(hdfs.uri("/"))
            time.sleep(5.5)  # both tickets have expired
            assert keyed.exists(hdfs.uri("/"))  # new tickets from the keytab, obtained by MIT Kerberos
            with pytest.raises(KerberosAuthError, match="^the ticket of .* has expired: run kinit again"):
                cached.exists(hdfs.uri("/"))
        assert hdfs.kerberos.principals.count("carol@SHORT.TEST") == 3


def test_the_processs_token_is_kept_out_of_debug_logs_of_the_http_libraries(kdc, alice, caplog):
    with WebHDFSEmulator(kerberos_keytab=kdc.http_keytab) as hdfs:
        token = storage(hdfs, alice).get_delegation_token()
        kerberos.use_delegation_token(token)
        with caplog.at_level(logging.DEBUG, logger="urllib3.connectionpool"):
            storage(hdfs).exists(hdfs.uri("/"))
        assert "delegation=<delegation token>" in caplog.text and token not in caplog.text


def test_the_driver_moves_the_submitted_token_from_its_environment_into_memory():
    from airflow_tfos.shared.storage.kerberos import SUBMITTED_TOKEN_ENV, delegation_token, take_submitted_token

    environ = {SUBMITTED_TOKEN_ENV: "opaque-token", "OTHER": "x"}
    try:
        assert take_submitted_token(environ) and environ == {"OTHER": "x"}  # a child started now inherits none
        assert delegation_token() == "opaque-token"
        assert not take_submitted_token(environ)  # none there: the process keeps its Kerberos login
    finally:
        kerberos.use_delegation_token(None)
