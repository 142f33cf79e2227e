"""Hadoop's token file as YARN gives it to a container, read byte by byte as Hadoop's ``Credentials`` writes it
(``WritableUtils`` numbers, ``Text`` strings), and the token re-encoded as WebHDFS's ``delegation=`` takes it."""

from __future__ import annotations

import base64

import pytest

from airflow_tfos.shared.errors import TokenFileError
from airflow_tfos.shared.storage import hadoop_tokens
from airflow_tfos.shared.storage.hadoop_tokens import HDFS_TOKEN_KIND, container_hdfs_token, read_token_file

# A delegation token identifier as the NameNode writes it: version 0, owner, renewer, real user (Text: a one-byte
# length, then the bytes), issue and max dates (6-byte VLongs: 0x8a = -118, i.e. 6 bytes follow), sequence
# number 10 and master key 2 (one byte each).
IDENTIFIER = (
    b"\x00" + b"\x0falice@TFOS.TEST" + b"\x04yarn" + b"\x00"
    + b"\x8a" + (1795876494012).to_bytes(6, "big") + b"\x8a" + (1795876614012).to_bytes(6, "big")
    + b"\x0a" + b"\x02"
)  # fmt: skip
PASSWORD = bytes(range(20))
SERVICE = b"127.0.0.1:8020"
# Token.write: VInt length + identifier, VInt length + password, Text kind, Text service
TOKEN = bytes([len(IDENTIFIER)]) + IDENTIFIER + b"\x14" + PASSWORD + b"\x15HDFS_DELEGATION_TOKEN" + b"\x0e" + SERVICE
AMRM = b"\x03abc" + b"\x03xyz" + b"\x10YARN_AM_RM_TOKEN" + b"\x00"


def token_file(*tokens: tuple[bytes, bytes], version: bytes = b"\x00") -> bytes:
    """``HDTS``, the version, a VInt count, each (Text alias, Token), then no secret keys."""
    body = b"".join(bytes([len(alias)]) + alias + token for alias, token in tokens)
    return b"HDTS" + version + bytes([len(tokens)]) + body + b"\x00"


def test_the_hdfs_token_is_read_and_re_encoded_as_hadoop_encodes_it_for_urls():
    tokens = read_token_file(token_file((b"amrm", AMRM), (b"127.0.0.1:8020", TOKEN)))
    assert [t.kind for t in tokens] == ["YARN_AM_RM_TOKEN", HDFS_TOKEN_KIND]
    hdfs = tokens[1]
    assert (hdfs.identifier, hdfs.password, hdfs.service) == (IDENTIFIER, PASSWORD, SERVICE.decode())
    # Token.encodeToUrlString: URL-safe base64 of Token.write's bytes, without padding
    assert hdfs.url_string() == base64.urlsafe_b64encode(TOKEN).decode().rstrip("=")
    assert hdfs.fields() == {
        "owner": "alice@TFOS.TEST", "renewer": "yarn", "real_user": "", "issue_ms": 1795876494012,
        "max_ms": 1795876614012, "sequence": 10, "master_key": 2,
    }  # fmt: skip
    assert "sequence number 10" in repr(hdfs) and PASSWORD.hex() not in repr(hdfs) and str(PASSWORD) not in repr(hdfs)


@pytest.mark.parametrize("value", [0, 1, -1, 127, -112, 128, -113, 255, 1000, -1000, 2**31, 1795876494012, -(2**40)])
def test_numbers_round_trip_as_hadoop_s_vlong(value):
    import io

    encoded = hadoop_tokens._write_vlong(value)
    assert hadoop_tokens._vlong(io.BytesIO(encoded)) == value
    if value == 1000:  # Hadoop: 0x8e (-114: two bytes follow), then 0x03e8
        assert encoded == b"\x8e\x03\xe8"


def test_a_container_without_an_hdfs_token_or_outside_yarn_has_none(tmp_path):
    path = tmp_path / "container_tokens"
    path.write_bytes(token_file((b"amrm", AMRM)))
    assert container_hdfs_token({"HADOOP_TOKEN_FILE_LOCATION": str(path)}) is None
    assert container_hdfs_token({}) is None
    path.write_bytes(token_file((b"amrm", AMRM), (b"nn", TOKEN)))
    assert container_hdfs_token({"HADOOP_TOKEN_FILE_LOCATION": str(path)}).password == PASSWORD


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"NOPE\x00\x00", "is not a Hadoop token file"),
        (token_file((b"nn", TOKEN), version=b"\x01"), "token storage version 01"),
        (token_file((b"nn", TOKEN))[:40], "is cut short or damaged"),
    ],
)
def test_a_file_that_is_not_a_writable_token_file_is_named(data, says):
    with pytest.raises(TokenFileError, match=says):
        read_token_file(data, source="/c/container_tokens")
