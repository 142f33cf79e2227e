"""The WebHDFS protocol as the project's client relies on it, asked of the WebHDFS emulator and of Hadoop's own
NameNode and DataNodes (the lab) with the same raw requests: redirects, JSON shapes, HTTP codes and the
RemoteException of each error. What the emulator answers differently from Hadoop fails here; what only the
emulator can do (faults, request logs) is tested in ``tests/unit/airflow_tfos/testing/test_webhdfs.py``."""

from __future__ import annotations

import getpass
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import requests

from airflow_tfos.testing.webhdfs import PREFIX, WebHDFSEmulator
from tests.support.helpers import webhdfs_remote_exception as remote_exception

pytestmark = pytest.mark.real_hadoop

#: The fields of a FileStatus the project reads (Hadoop adds others, e.g. ``snapshotEnabled`` on a directory).
FILE_STATUS_KEYS = {
    "accessTime", "blockSize", "childrenNum", "fileId", "group", "length", "modificationTime", "owner",
    "pathSuffix", "permission", "replication", "storagePolicy", "type",
}  # fmt: skip
USER, OTHER = "alice", "bob"


@dataclass
class Target:
    """A WebHDFS server under test: its namenode's URL and a fresh folder that anyone may write."""

    kind: str
    url: str
    base: str
    superuser: str
    #: whether a redirect's Location is one of the server's DataNodes
    is_datanode: Callable[[str], bool]

    def p(self, path: str) -> str:
        return f"{self.base}{path}"

    def call(self, path: str, op: str, method: str = "GET", data: bytes | None = None, **params):
        """One request to the namenode, redirects not followed, bounded in time."""
        query = {"op": op, "user.name": params.pop("user", USER), **params}
        return requests.request(
            method, f"{self.url}{PREFIX}{path}", params=query, data=data, allow_redirects=False, timeout=30
        )

    def create(self, path: str, data: bytes, **params):
        first = self.call(path, "CREATE", "PUT", **params)
        assert first.status_code == 307, first.text
        return first, requests.put(first.headers["Location"], data=data, timeout=30)

    def read(self, path: str, **params) -> bytes:
        answer = requests.get(
            f"{self.url}{PREFIX}{path}", params={"op": "OPEN", "user.name": USER, **params}, timeout=30
        )
        assert answer.status_code == 200, answer.text
        return answer.content


@pytest.fixture(params=["emulator", "hadoop"])
def target(request):
    if request.param == "emulator":
        with WebHDFSEmulator() as emu:
            datanode = emu.datanode_url
            yield Target("emulator", emu.url, "", USER, lambda location: location.startswith(datanode))
        return
    lab = request.getfixturevalue("hadoop_lab")
    url = f"http://{lab.description['namenode_http']}"
    namenode_port = url.rsplit(":", 1)[1]
    superuser = getpass.getuser()  # who started the lab: HDFS's superuser there
    target = Target(
        "hadoop",
        url,
        f"/protocol/{uuid.uuid4().hex[:8]}",
        superuser,
        lambda location: (
            location.startswith("http://127.0.0.1:") and location.split("/", 3)[2].rsplit(":", 1)[1] != namenode_port
        ),
    )
    assert target.call(target.base, "MKDIRS", "PUT", user=superuser).json() == {"boolean": True}
    assert target.call(target.base, "SETPERMISSION", "PUT", user=superuser, permission="777").status_code == 200
    yield target
    target.call(target.base, "DELETE", "DELETE", user=superuser, recursive="true")


def test_create_is_two_steps_through_a_datanode(target):
    first, second = target.create(target.p("/d/f.txt"), b"hello", overwrite="false")
    location = first.headers["Location"]
    assert target.is_datanode(location) and f"{PREFIX}{target.p('/d/f.txt')}?" in location, location
    assert "op=CREATE" in location
    assert second.status_code == 201 and second.headers["Location"].endswith(target.p("/d/f.txt"))
    assert target.read(target.p("/d/f.txt")) == b"hello"


def test_create_without_overwrite_refuses_an_existing_file(target):
    target.create(target.p("/f"), b"one")
    _, again = target.create(target.p("/f"), b"two", overwrite="false")
    assert "already exists" in remote_exception(
        again, 403, "FileAlreadyExistsException", "org.apache.hadoop.fs.FileAlreadyExistsException"
    )
    _, replaced = target.create(target.p("/f"), b"two", overwrite="true")
    assert replaced.status_code == 201
    assert target.read(target.p("/f")) == b"two"


def test_file_status_and_listing_shapes(target):
    target.create(target.p("/dir/b"), b"12345")
    target.create(target.p("/dir/a"), b"1")
    status = target.call(target.p("/dir/b"), "GETFILESTATUS").json()
    assert set(status) == {"FileStatus"} and set(status["FileStatus"]) >= FILE_STATUS_KEYS
    assert status["FileStatus"]["type"] == "FILE" and status["FileStatus"]["length"] == 5
    assert status["FileStatus"]["pathSuffix"] == "" and status["FileStatus"]["owner"] == USER
    listing = target.call(target.p("/dir"), "LISTSTATUS").json()
    assert set(listing) == {"FileStatuses"} and set(listing["FileStatuses"]) == {"FileStatus"}
    entries = listing["FileStatuses"]["FileStatus"]
    assert [e["pathSuffix"] for e in entries] == ["a", "b"]
    assert all(set(e) >= FILE_STATUS_KEYS for e in entries)
    one = target.call(target.p("/dir/a"), "LISTSTATUS").json()["FileStatuses"]["FileStatus"]
    assert len(one) == 1 and one[0]["pathSuffix"] == ""  # a file lists as itself
    directory = target.call(target.p("/dir"), "GETFILESTATUS").json()["FileStatus"]
    assert (directory["type"], directory["length"], directory["childrenNum"]) == ("DIRECTORY", 0, 2)
    assert isinstance(status["FileStatus"]["permission"], str) and status["FileStatus"]["permission"].isdigit()


def test_content_summary_and_home_directory(target):
    target.create(target.p("/s/x/1"), b"abc")
    target.create(target.p("/s/2"), b"de")
    summary = target.call(target.p("/s"), "GETCONTENTSUMMARY").json()["ContentSummary"]
    assert summary["directoryCount"] == 2 and summary["fileCount"] == 2 and summary["length"] == 5
    assert summary["quota"] == -1 and summary["spaceQuota"] == -1
    assert target.call("/", "GETHOMEDIRECTORY", user=OTHER).json() == {"Path": f"/user/{OTHER}"}


def test_missing_paths_are_file_not_found_404(target):
    for op in ("GETFILESTATUS", "LISTSTATUS", "OPEN", "GETCONTENTSUMMARY"):
        message = remote_exception(
            target.call(target.p("/nope"), op), 404, "FileNotFoundException", "java.io.FileNotFoundException"
        )
        assert target.p("/nope") in message, (op, message)


def test_open_redirects_to_a_datanode_with_offset_and_length(target):
    target.create(target.p("/f"), b"0123456789")
    redirect = target.call(target.p("/f"), "OPEN", offset=3, length=4)
    assert redirect.status_code == 307 and target.is_datanode(redirect.headers["Location"])
    assert requests.get(redirect.headers["Location"], timeout=30).content == b"3456"
    assert target.read(target.p("/f"), offset=8) == b"89"


def test_append_is_two_steps(target):
    target.create(target.p("/f"), b"ab")
    first = target.call(target.p("/f"), "APPEND", "POST")
    assert first.status_code == 307 and target.is_datanode(first.headers["Location"])
    assert requests.post(first.headers["Location"], data=b"cd", timeout=30).status_code == 200
    assert target.read(target.p("/f")) == b"abcd"


def test_mkdirs_and_delete(target):
    assert target.call(target.p("/a/b/c"), "MKDIRS", "PUT").json() == {"boolean": True}
    assert target.call(target.p("/a/b/c"), "MKDIRS", "PUT").json() == {"boolean": True}  # already there
    target.create(target.p("/a/b/c/f"), b"x")
    not_empty = target.call(target.p("/a"), "DELETE", "DELETE")
    remote_exception(
        not_empty, 403, "PathIsNotEmptyDirectoryException", "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException"
    )
    assert target.call(target.p("/a"), "DELETE", "DELETE", recursive="true").json() == {"boolean": True}
    assert target.call(target.p("/a"), "DELETE", "DELETE", recursive="true").json() == {"boolean": False}
    target.create(target.p("/file"), b"x")
    remote_exception(
        target.call(target.p("/file"), "MKDIRS", "PUT"),
        403,
        "FileAlreadyExistsException",
        "org.apache.hadoop.fs.FileAlreadyExistsException",
    )


def test_a_bad_op_is_illegal_argument_400(target):
    remote_exception(target.call("/", "NOPE"), 400, "IllegalArgumentException", "java.lang.IllegalArgumentException")
    remote_exception(
        target.call("/", "MKDIRS", "GET"), 400, "IllegalArgumentException", "java.lang.IllegalArgumentException"
    )


def test_plain_rename_answers_a_boolean_with_hdfs_semantics(target):
    target.create(target.p("/src"), b"s")
    target.create(target.p("/taken"), b"t")
    target.call(target.p("/dir"), "MKDIRS", "PUT")

    def rename(source: str, destination: str):
        return target.call(target.p(source), "RENAME", "PUT", destination=target.p(destination)).json()

    assert rename("/missing", "/x") == {"boolean": False}
    assert rename("/src", "/taken") == {"boolean": False}
    assert rename("/src", "/no/parent") == {"boolean": False}
    assert rename("/src", "/dir") == {"boolean": True}
    assert target.call(target.p("/dir/src"), "GETFILESTATUS").status_code == 200  # moved into the directory
    assert rename("/dir/src", "/moved") == {"boolean": True}


def test_rename_options_follow_rename2(target):
    target.create(target.p("/a"), b"new")
    target.create(target.p("/b"), b"old")
    refused = target.call(target.p("/a"), "RENAME", "PUT", destination=target.p("/b"), renameoptions="NONE")
    assert "already exists" in remote_exception(
        refused, 403, "FileAlreadyExistsException", "org.apache.hadoop.fs.FileAlreadyExistsException"
    )
    done = target.call(target.p("/a"), "RENAME", "PUT", destination=target.p("/b"), renameoptions="OVERWRITE")
    assert done.status_code == 200 and done.content == b""
    assert target.read(target.p("/b")) == b"new"
    missing = target.call(target.p("/a"), "RENAME", "PUT", destination=target.p("/c"), renameoptions="NONE")
    remote_exception(missing, 404, "FileNotFoundException", "java.io.FileNotFoundException")


def test_a_folder_another_user_owns_refuses_writes_and_may_refuse_reads(target):
    locked = target.p("/locked")
    assert target.call(locked, "MKDIRS", "PUT", user=OTHER).json() == {"boolean": True}
    assert target.call(locked, "SETPERMISSION", "PUT", user=OTHER, permission="755").status_code == 200
    refused = target.call(f"{locked}/x", "MKDIRS", "PUT")
    message = remote_exception(
        refused, 403, "AccessControlException", "org.apache.hadoop.security.AccessControlException"
    )
    assert f"user={USER}" in message and "access=WRITE" in message, message
    # the namenode redirects a CREATE without looking; the datanode's step is refused
    first, upload = target.create(f"{locked}/f", b"x")
    assert target.is_datanode(first.headers["Location"])
    assert "access=WRITE" in remote_exception(
        upload, 403, "AccessControlException", "org.apache.hadoop.security.AccessControlException"
    )
    assert target.call(locked, "LISTSTATUS").status_code == 200  # reads still work
    assert target.call(locked, "SETPERMISSION", "PUT", user=OTHER, permission="700").status_code == 200
    unreadable = target.call(locked, "LISTSTATUS")
    assert "access=READ_EXECUTE" in remote_exception(
        unreadable, 403, "AccessControlException", "org.apache.hadoop.security.AccessControlException"
    )


def test_the_clients_error_from_a_datanode_names_the_cause_without_javas_stack(target):
    # A datanode refuses the second step of a CREATE with the namenode's stack frames in the message.
    from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
    from airflow_tfos.shared.storage.webhdfs_config import WebHDFSConfig

    locked = target.p("/locked")
    target.call(locked, "MKDIRS", "PUT", user=OTHER)
    target.call(locked, "SETPERMISSION", "PUT", user=OTHER, permission="755")
    storage = WebHDFSStorage(WebHDFSConfig(namenodes=(target.url,), user=USER, retries=0))
    with pytest.raises(PermissionError) as refused:
        storage.write_bytes(f"{locked}/status.json", b"{}")
    message = str(refused.value)
    assert f"user={USER}" in message and "access=WRITE" in message, message
    assert "\tat " not in message and "FSNamesystem" not in message, message
