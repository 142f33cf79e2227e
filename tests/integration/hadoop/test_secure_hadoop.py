"""Hadoop's own NameNode and ResourceManager in secure mode (the lab's ``--kerberos``, against the session's MIT
KDC): what the project's clients meet there, and what the NameNode answers that the emulators did not.

- Anonymous requests are refused with ``401 Negotiate`` by WebHDFS and by the ResourceManager's REST API; a keytab's
  login passes SPNEGO on both.
- A delegation token is issued by the real NameNode (kind ``WEBHDFS delegation`` over WebHDFS), serves a client
  that has no ticket, is renewed (the NameNode's new expiry: the renew interval from now) and cancelled (the
  NameNode no longer knows it); past its renew interval unrenewed it is refused, and the error says it is the token.
- A principal that the NameNode maps to a user without access gets the NameNode's ``Permission denied`` first.
- ``proxy_user``: the principal with Hadoop's proxy right writes as the proxied user (the files are theirs, as
  Hadoop's own client reads them); one without it is refused by Hadoop, whose words come first.
"""

from __future__ import annotations

import base64
import getpass
import time

import pytest
import requests

from airflow_tfos.shared.storage import kerberos
from airflow_tfos.shared.storage.kerberos import KerberosLogin, negotiate_header
from tests.integration.hadoop.conftest import SECURE_PROXY_USER, SECURE_SERVICE, TOKEN_RENEW_SECS, set_owner
from tests.integration.hadoop.conftest import secure_storage as storage

pytestmark = [pytest.mark.real_hadoop, pytest.mark.kerberos]


@pytest.fixture(autouse=True)
def _no_process_token():
    kerberos.use_delegation_token(None)
    yield
    kerberos.use_delegation_token(None)


@pytest.fixture(scope="module")
def logins(kdc) -> dict[str, KerberosLogin]:
    """Keytab logins: the lab's daemons' principal (HDFS's superuser), alice, mallory and the proxy user."""
    found = {
        "superuser": KerberosLogin(kdc.principal(SECURE_SERVICE), kdc.shared_keytab("lab-super.keytab", SECURE_SERVICE))
    }
    for name in ("mallory", SECURE_PROXY_USER):
        found[name] = KerberosLogin(kdc.principal(name), kdc.keytab(name))
    found["alice"] = KerberosLogin(kdc.principal("alice"), kdc.alice_keytab)
    return found


@pytest.fixture(scope="module")
def alice_home(secure_lab, logins) -> str:
    """``/teams/alice``, alice's, 0700 (as a run directory's parent is), made by the superuser."""
    home = "/teams/alice"
    storage(secure_lab, logins["superuser"]).makedirs(home)
    set_owner(secure_lab, logins["superuser"], home, "alice")
    storage(secure_lab, logins["alice"]).make_private_dir(f"{home}/runs")
    return home


def test_the_secure_lab_refuses_anonymous_requests_and_a_keytab_login_passes_spnego(secure_lab, logins):
    namenode, rm = f"http://{secure_lab.description['namenode_http']}", secure_lab.description["rm_web"]
    for url in (f"{namenode}/webhdfs/v1/?op=LISTSTATUS&user.name=alice", f"{rm}/ws/v1/cluster/info"):
        answer = requests.get(url, timeout=30)
        assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Negotiate", url
    assert storage(secure_lab, logins["superuser"]).exists("/")  # SPNEGO to WebHDFS
    info = requests.get(
        f"{rm}/ws/v1/cluster/info",
        headers={"Authorization": negotiate_header("127.0.0.1", logins["alice"])},
        timeout=30,
    )
    assert info.status_code == 200, info.text
    assert info.json()["clusterInfo"]["state"] == "STARTED"
    # Hadoop's own client logs in from the daemons' keytab (a secure lab's inspect), and the NameNode's owner is the
    # daemons' principal as auth_to_local maps it: the user the lab runs as
    assert secure_lab.inspect("/")["/"][0]["owner"] == getpass.getuser()


def test_a_delegation_token_of_the_real_namenode_serves_without_a_ticket_is_renewed_and_cancelled(
    secure_lab, logins, alice_home
):
    alice = storage(secure_lab, logins["alice"])
    alice.write_bytes(f"{alice_home}/runs/data.txt", b"rows")
    token = alice.get_delegation_token(renewer="alice")
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    # Over WebHDFS the NameNode gives its delegation token the kind "WEBHDFS delegation" (not HDFS_DELEGATION_TOKEN,
    # which Hadoop's RPC client asks for) and its RPC address as the service; alice owns it
    rpc = secure_lab.description["namenode_rpc"].encode()
    assert raw.endswith(b"\x12WEBHDFS delegation" + bytes([len(rpc)]) + rpc), raw
    assert raw[1:].startswith(b"\x00\x05alice\x05alice"), raw  # owner and renewer

    kerberos.use_delegation_token(token)
    no_ticket = storage(secure_lab, None)  # the session's ticket cache is empty: only the token can authenticate
    assert no_ticket.read_bytes(f"{alice_home}/runs/data.txt") == b"rows"
    no_ticket.write_bytes(f"{alice_home}/runs/written-with-the-token", b"x")
    kerberos.use_delegation_token(None)
    (entry,) = secure_lab.inspect(f"{alice_home}/runs/written-with-the-token").values()
    assert entry[0]["owner"] == "alice"  # the token acts as its owner

    before = time.time()
    expiry = alice.renew_delegation_token(token)
    assert before + TOKEN_RENEW_SECS - 2 <= expiry <= time.time() + TOKEN_RENEW_SECS + 2, (before, expiry)

    alice.cancel_delegation_token(token)
    with pytest.raises(PermissionError, match="unknown token"):  # the NameNode no longer knows it
        alice.renew_delegation_token(token)
    kerberos.use_delegation_token(token)
    with pytest.raises(PermissionError) as refused:
        no_ticket.read_bytes(f"{alice_home}/runs/data.txt")
    assert str(refused.value).startswith("[Errno 13] HDFS refused the delegation token of this process"), refused.value
    assert "can't be found in cache" in str(refused.value)  # the NameNode's words


def test_a_token_left_unrenewed_past_its_renew_interval_is_refused_as_expired(secure_lab, logins, alice_home):
    alice = storage(secure_lab, logins["alice"])
    alice.write_bytes(f"{alice_home}/runs/expiring.txt", b"rows")
    token = alice.get_delegation_token(renewer="alice")
    time.sleep(TOKEN_RENEW_SECS + 1)
    kerberos.use_delegation_token(token)
    with pytest.raises(PermissionError) as refused:
        storage(secure_lab, None).read_bytes(f"{alice_home}/runs/expiring.txt")
    message = str(refused.value)
    assert message.startswith("[Errno 13] HDFS refused the delegation token of this process"), message
    assert "has expired" in message and "kinit" not in message


def test_a_principal_mapped_to_a_user_without_access_gets_the_namenodes_permission_error_first(
    secure_lab, logins, alice_home
):
    with pytest.raises(PermissionError) as refused:
        storage(secure_lab, logins["mallory"]).write_bytes(f"{alice_home}/runs/mallory.txt", b"x")
    message = str(refused.value)
    assert message.startswith("[Errno 13] Permission denied: user=mallory, access="), message
    assert "auth_to_local" in message and "kinit" not in message
    assert secure_lab.inspect(f"{alice_home}/runs/mallory.txt") == {f"{alice_home}/runs/mallory.txt": None}


def test_proxy_user_writes_as_the_proxied_user_and_hadoop_refuses_a_principal_without_the_right(
    secure_lab, logins, alice_home
):
    as_alice = storage(secure_lab, logins[SECURE_PROXY_USER], user="alice")
    as_alice.write_bytes(f"{alice_home}/runs/by-proxy.txt", b"p")
    (entries,) = secure_lab.inspect(f"{alice_home}/runs/by-proxy.txt").values()
    assert entries[0]["owner"] == "alice"  # Hadoop's own client: the file is the proxied user's

    with pytest.raises(PermissionError) as refused:
        storage(secure_lab, logins["mallory"], user="alice").listdir(alice_home)
    message = str(refused.value)
    assert message.startswith("[Errno 13] User: mallory is not allowed to impersonate alice"), message
    assert "hadoop.proxyuser" in message
