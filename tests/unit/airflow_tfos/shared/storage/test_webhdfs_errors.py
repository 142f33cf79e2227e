"""Which error a NameNode's refusal becomes: the answers below are the real NameNode's (Hadoop 3.5, secure mode,
seen in tests/integration/hadoop/test_secure_hadoop.py), each turned into an error that starts with its cause."""

from __future__ import annotations

import pytest
from hdfs import HdfsError

from airflow_tfos.shared.storage.webhdfs_config import WebHDFSConfig
from airflow_tfos.shared.storage.webhdfs_errors import translate

URL = "http://127.0.0.1:9870"
KERBEROS = WebHDFSConfig(namenodes=(URL,), auth="kerberos")
EXPIRED = (
    "Failed to obtain user group information: org.apache.hadoop.security.token.SecretManager$InvalidToken: Token  has "
    "expired, current time: 2026-11-28 11:50:26,140+0000 expected renewal time: 2026-11-28 11:50:21,128+0000"
)
CANCELLED = (
    "Failed to obtain user group information: org.apache.hadoop.security.token.SecretManager$InvalidToken: Token for "
    "real user: , can't be found in cache"
)
DENIED = 'Permission denied: user=mallory, access=WRITE, inode="/teams/alice/runs":alice:supergroup:drwx------'
IMPERSONATION = "User: mallory is not allowed to impersonate alice"


def _error(message: str, remote: str, config: WebHDFSConfig = KERBEROS) -> Exception:
    return translate(HdfsError(message, exception=remote), "OPEN", "/teams/alice/runs/x", URL, config)


@pytest.mark.parametrize("message", [EXPIRED, CANCELLED])
def test_a_refused_token_on_an_operation_is_named_as_the_token(message):
    error = _error(message, "SecurityException")
    assert isinstance(error, PermissionError)
    assert error.strerror.startswith("HDFS refused the delegation token of this process"), error.strerror
    assert message.split("InvalidToken: ", 1)[1] in error.strerror and "kinit" not in error.strerror


def test_a_permission_denied_to_a_kerberos_user_starts_with_the_namenodes_words():
    error = _error(DENIED, "AccessControlException")
    assert isinstance(error, PermissionError) and error.strerror.startswith(DENIED), error.strerror
    assert "auth_to_local" in error.strerror and "kinit" not in error.strerror


def test_a_permission_denied_under_simple_auth_keeps_naming_the_user_to_grant():
    simple = WebHDFSConfig(namenodes=(URL,), user="mallory")
    error = _error(DENIED, "AccessControlException", simple)
    assert error.strerror.startswith("HDFS refused OPEN to user mallory"), error.strerror
    assert "hdfs dfs -chmod" in error.strerror


def test_a_refused_impersonation_starts_with_hadoops_words_and_names_the_proxy_settings():
    error = _error(IMPERSONATION, "SecurityException", WebHDFSConfig(namenodes=(URL,), user="alice", auth="kerberos"))
    assert isinstance(error, PermissionError) and error.strerror.startswith(IMPERSONATION), error.strerror
    assert "hadoop.proxyuser.<user>.hosts" in error.strerror
