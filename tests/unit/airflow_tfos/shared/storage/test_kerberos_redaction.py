"""Credentials in URLs and the process's delegation token are redacted from text and from every log record
(pure; a Kerberized run that fails with a token, searched for it everywhere:
tests/integration/kerberos/test_token_redaction.py)."""

from __future__ import annotations

import logging

import pytest

from airflow_tfos.shared.storage import kerberos


@pytest.mark.parametrize(
    ("text", "kept", "gone"),
    [
        (
            "Max retries exceeded with url: /webhdfs/v1/a?op=OPEN&delegation=SECRET1 (Caused by SSLError(...))",
            "/webhdfs/v1/a?op=OPEN&delegation=",
            "SECRET1",
        ),
        ("https://nn:9871/webhdfs/v1/?op=RENEWDELEGATIONTOKEN&token=SECRET2&user.name=a", "user.name=a", "SECRET2"),
        ("'https://alice:SECRET3@nn:9871/webhdfs/v1/x'", "https://alice:", "SECRET3"),
        ("url=/webhdfs/v1/x?DELEGATION=SECRET4;", "/webhdfs/v1/x?DELEGATION=", "SECRET4"),
        ("url=/webhdfs/v1/x?delegation%3DSECRET5", "/webhdfs/v1/x?delegation", "SECRET5"),
    ],
)
def test_credentials_in_urls_are_redacted_wherever_they_appear(text, kept, gone):
    redacted = kerberos.redact_credentials(text)
    assert kept in redacted and gone not in redacted, redacted


def test_log_records_of_any_logger_lose_the_process_token_and_url_credentials(caplog, tmp_path):
    kerberos.use_delegation_token("PROCESSTOKEN42")
    try:
        caplog.set_level(logging.DEBUG)
        logging.getLogger("some.library").warning("GET %s failed", "/x?op=OPEN&delegation=URLTOKEN7")
        logging.getLogger("airflow_tfos.anything").info("token %s", "PROCESSTOKEN42")
        try:
            raise ValueError("at https://nn/webhdfs/v1/?op=OPEN&delegation=CHAINED9")
        except ValueError:
            logging.getLogger("other").exception("failed")
    finally:
        kerberos.use_delegation_token(None)
    text = caplog.text
    assert "GET /x?op=OPEN&delegation=" in text and "failed" in text
    assert "URLTOKEN7" not in text and "PROCESSTOKEN42" not in text and "CHAINED9" not in text, text
