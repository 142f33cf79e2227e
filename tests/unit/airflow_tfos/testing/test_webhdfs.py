"""What only the WebHDFS emulator does: its request log and local files, read-only switches, HA by a switch,
and faults, checked with raw HTTP requests and through the ``hdfs`` package (what our storage and Airflow's
WebHDFSHook use). The protocol itself (shapes, codes, redirects, errors) is asked of the emulator and of Hadoop's
own NameNode alike in ``tests/integration/hadoop/test_webhdfs_conformance.py``.
"""

from __future__ import annotations

import time

import hdfs
import pytest
import requests

from airflow_tfos.testing.webhdfs import PREFIX, WebHDFSEmulator
from tests.support.helpers import webhdfs_remote_exception as remote_exception


def call(url: str, path: str, op: str, method: str = "GET", data: bytes | None = None, **params):
    """One WebHDFS request, redirects not followed, bounded in time."""
    query = {"op": op, "user.name": params.pop("user", "alice"), **params}
    return requests.request(method, f"{url}{PREFIX}{path}", params=query, data=data, allow_redirects=False, timeout=10)


def create(emu: WebHDFSEmulator, path: str, data: bytes, **params):
    first = call(emu.url, path, "CREATE", "PUT", **params)
    assert first.status_code == 307, first.text
    return first, requests.put(first.headers["Location"], data=data, timeout=10)


class TestShapes:
    def test_servers_listen_on_loopback_ephemeral_ports(self, ha):
        ports = {u.rsplit(":", 1)[1] for u in [*ha.urls, ha.datanode_url]}
        assert all(u.startswith("http://127.0.0.1:") for u in [*ha.urls, ha.datanode_url])
        assert len(ports) == 3 and "9870" not in ports

    def test_create_is_two_steps_through_the_datanode(self, emu):
        first, second = create(emu, "/d/f.txt", b"hello", overwrite="false")
        location = first.headers["Location"]
        assert location.startswith(f"{emu.datanode_url}{PREFIX}/d/f.txt?") and "op=CREATE" in location
        assert second.status_code == 201 and second.headers["Location"].endswith("/d/f.txt")
        assert [(r.server, r.op) for r in emu.requests] == [("namenode0", "CREATE"), ("datanode", "CREATE")]
        with open(emu.local_path("/d/f.txt"), "rb") as f:
            assert f.read() == b"hello"


class TestRename:
    def test_a_server_without_rename_options_answers_the_plain_rename(self):
        with WebHDFSEmulator(rename_options=False) as emu:
            create(emu, "/a", b"1")
            create(emu, "/b", b"2")
            answer = call(emu.url, "/a", "RENAME", "PUT", destination="/b", renameoptions="OVERWRITE")
            assert answer.json() == {"boolean": False}


class TestPermissionsAndHA:
    def test_read_only_paths_refuse_writes_to_that_user(self, emu):
        emu.make_read_only("/locked", user="alice")
        call(emu.url, "/locked", "MKDIRS", "PUT", user="bob")
        refused = call(emu.url, "/locked/x", "MKDIRS", "PUT", user="alice")
        message = remote_exception(
            refused, 403, "AccessControlException", "org.apache.hadoop.security.AccessControlException"
        )
        assert "user=alice" in message and "access=WRITE" in message
        _, upload = create(emu, "/locked/f", b"x", user="alice")
        assert upload.status_code == 403
        assert call(emu.url, "/locked", "LISTSTATUS", user="alice").status_code == 200  # reads still work
        emu.make_read_only("/locked", unreadable=True)
        assert call(emu.url, "/locked", "LISTSTATUS", user="bob").status_code == 403

    def test_the_standby_answers_standby_exception_until_failover(self, ha):
        active, standby = ha.urls
        message = remote_exception(
            call(standby, "/", "GETFILESTATUS"), 403, "StandbyException", "org.apache.hadoop.ipc.StandbyException"
        )
        assert "Operation category READ is not supported in state standby" in message
        assert call(active, "/", "GETFILESTATUS").status_code == 200
        ha.fail_over()
        assert ha.url == standby
        assert call(standby, "/", "GETFILESTATUS").status_code == 200
        assert "category WRITE" in remote_exception(
            call(active, "/x", "MKDIRS", "PUT"), 403, "StandbyException", "org.apache.hadoop.ipc.StandbyException"
        )


class TestFaults:
    def test_next_answers_fail_with_the_given_status_then_recover(self, emu):
        emu.fail_next(2, status=503)
        assert [call(emu.url, "/", "GETFILESTATUS").status_code for _ in range(3)] == [503, 503, 200]
        emu.fail_next(1, status=500)
        remote_exception(call(emu.url, "/", "GETFILESTATUS"), 500, "RuntimeException", "java.lang.RuntimeException")

    def test_faults_can_target_one_op_and_the_datanode(self, emu):
        emu.fail_next(1, status=503, server="datanode", op="CREATE")
        assert call(emu.url, "/", "GETFILESTATUS").status_code == 200
        _, upload = create(emu, "/f", b"x")
        assert upload.status_code == 503
        _, upload = create(emu, "/f", b"x")
        assert upload.status_code == 201

    def test_dropped_connections_get_no_answer(self, emu):
        emu.drop_next(1)
        with pytest.raises(requests.exceptions.ConnectionError):
            call(emu.url, "/", "GETFILESTATUS")
        assert call(emu.url, "/", "GETFILESTATUS").status_code == 200

    def test_a_dropped_upload_leaves_a_partial_file(self, emu):
        emu.drop_next(1, server="datanode")
        first = call(emu.url, "/f", "CREATE", "PUT")
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.put(first.headers["Location"], data=b"0123456789", timeout=10)
        with open(emu.local_path("/f"), "rb") as f:
            assert f.read() == b"01234"

    def test_slow_answers_and_malformed_json(self, emu):
        emu.slow_next(1, 0.5)
        started = time.monotonic()
        assert call(emu.url, "/", "GETFILESTATUS").status_code == 200
        assert time.monotonic() - started >= 0.5
        emu.malformed_next(1)
        bad = call(emu.url, "/", "GETFILESTATUS")
        assert bad.status_code == 200
        with pytest.raises(ValueError):
            bad.json()
        assert call(emu.url, "/", "GETFILESTATUS").json()["FileStatus"]["type"] == "DIRECTORY"

    def test_fault_counts_must_be_bounded(self, emu):
        with pytest.raises(ValueError, match="count must be at least 1"):
            emu.fail_next(0)
        with pytest.raises(ValueError, match="server must be"):
            emu.drop_next(1, server="nn")

    def test_stop_closes_the_servers(self):
        emu = WebHDFSEmulator().start()
        url = emu.url
        emu.stop()
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"{url}{PREFIX}/?op=GETFILESTATUS", timeout=5)


class TestThroughTheHdfsPackage:
    def test_round_trip(self, emu):
        client = hdfs.InsecureClient(emu.url, user="alice")
        client.write("/p/data.csv", b"a,b\n1,2\n")
        assert client.status("/p/data.csv")["length"] == 8
        assert client.list("/p") == ["data.csv"]
        with client.read("/p/data.csv", offset=4) as reader:
            assert reader.read() == b"1,2\n"
        client.rename("/p/data.csv", "/p/moved.csv")
        assert client.content("/p")["fileCount"] == 1
        with pytest.raises(hdfs.HdfsError) as info:
            client.write("/p/moved.csv", b"again")
        assert info.value.exception == "FileAlreadyExistsException"
        assert client.delete("/p", recursive=True) is True
        assert client.status("/p", strict=False) is None

    def test_the_package_fails_over_from_the_standby(self, ha):
        ha.fail_over()
        client = hdfs.InsecureClient(";".join(ha.urls), user="alice")
        client.makedirs("/ha")
        assert client.status("/ha")["type"] == "DIRECTORY"
        assert [r.server for r in ha.requests][:2] == ["namenode0", "namenode1"]
