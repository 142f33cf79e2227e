"""The local cache of remote SavedModels trusts only what this user fetched: a copy or a cache directory planted
by another user (uid 65534, through the shared temporary directory), or a cached copy altered afterwards, is
never what :func:`~airflow_tfos.runtime.program.saved_models.fetch` returns."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile

import pytest

from airflow_tfos.runtime.program import saved_models
from airflow_tfos.shared.storage import storage_for

OTHER_UID = 65534
#: a Python that another user may run (the project's virtual environment may be out of their reach)
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")
#: a SavedModel's files (what fetch copies and compares; no TensorFlow needed)
MODEL = {
    "saved_model.pb": b"the real graph " * 40,
    "fingerprint.pb": b"fingerprint-1",
    "variables/variables.index": b"index-1",
    "variables/variables.data-00000-of-00001": b"weights " * 100,
}
TROJAN = b"a graph that writes files".ljust(len(MODEL["saved_model.pb"]), b"!")  # same size: same listing

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or SYSTEM_PYTHON is None, reason="acting as another user needs root and a system python3"
)


@pytest.fixture
def shared_tmp(monkeypatch):
    """A temporary directory as /tmp is (mode 1777, everyone may create in it), used as this process's tempdir."""
    path = tempfile.mkdtemp(prefix="airflow-tfos-shared-tmp-", dir=tempfile.gettempdir())
    os.chmod(path, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", path)
    monkeypatch.setattr(saved_models, "_FETCHED", {})
    yield path
    shutil.rmtree(path, ignore_errors=True)


def publish(emu, path: str = "/models/linear") -> str:
    uri = emu.uri(path)
    storage = storage_for(uri)
    for rel, data in MODEL.items():
        storage.write_bytes(f"{uri}/{rel}", data)
    return uri


def plant_as_other_user(directory: str, files: dict[str, bytes]) -> None:
    """Create ``directory`` (and missing parents) with ``files`` in it, as uid 65534, writable by all."""
    code = (
        "import base64, json, os, sys\n"
        "os.umask(0)\n"
        "root, files = sys.argv[1], json.load(sys.stdin)\n"
        "for rel, data in files.items():\n"
        "    path = os.path.join(root, rel)\n"
        "    os.makedirs(os.path.dirname(path), exist_ok=True)\n"
        "    with open(path, 'wb') as f:\n"
        "        f.write(base64.b64decode(data))\n"
    )
    payload = json.dumps({rel: base64.b64encode(data).decode() for rel, data in files.items()})
    subprocess.run(
        [SYSTEM_PYTHON, "-c", code, directory],
        input=payload,
        text=True,
        check=True,
        user=OTHER_UID,
        group=OTHER_UID,
        cwd="/",
    )
    assert os.stat(directory).st_uid == OTHER_UID


def cache_name(uri: str, version: str) -> str:
    return f"{hashlib.sha256(uri.encode()).hexdigest()[:16]}-{version}"


def assert_real_copy(local: str) -> None:
    for rel, data in MODEL.items():
        with open(os.path.join(local, *rel.split("/")), "rb") as f:
            assert f.read() == data, rel
    st = os.lstat(local)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o077 == 0
    root = os.path.dirname(local)
    assert os.lstat(root).st_uid == os.geteuid() and os.lstat(root).st_mode & 0o777 == 0o700


def test_a_copy_planted_by_another_user_under_the_shared_name_is_not_loaded(emu, shared_tmp):
    uri = publish(emu)
    version = saved_models.remote_version(uri)  # what anyone who can list the export computes
    planted = {**MODEL, "saved_model.pb": TROJAN}
    plant_as_other_user(os.path.join(shared_tmp, saved_models.CACHE_FOLDER, cache_name(uri, version)), planted)
    plant_as_other_user(os.path.join(saved_models.shared_cache_root(), cache_name(uri, version)), planted)

    local = saved_models.fetch(uri)

    assert_real_copy(local)
    assert not local.startswith(saved_models.shared_cache_root() + os.sep)  # that root is another user's


def test_a_cache_root_created_by_another_user_is_replaced_by_a_private_one(emu, shared_tmp, caplog):
    uri = publish(emu)
    root = saved_models.shared_cache_root()
    plant_as_other_user(root, {"README": b"not yours"})

    local = saved_models.fetch(uri)

    assert_real_copy(local)
    assert os.path.dirname(local) != root and os.listdir(root) == ["README"]  # nothing of ours went there
    assert f"belongs to uid {OTHER_UID}" in caplog.text
    assert saved_models.fetch(uri) == local  # the private fallback is kept for this process


def test_a_cache_root_that_others_may_write_is_not_used(emu, shared_tmp):
    uri = publish(emu)
    root = saved_models.shared_cache_root()
    os.mkdir(root)
    os.chmod(root, 0o777)  # ours, but any user could have put files in it

    local = saved_models.fetch(uri)

    assert_real_copy(local)
    assert os.path.dirname(local) != root


def test_an_altered_or_foreign_cached_copy_is_fetched_again(emu, shared_tmp):
    uri = publish(emu)
    local = saved_models.fetch(uri)
    assert_real_copy(local)

    with open(os.path.join(local, "saved_model.pb"), "wb") as f:  # the same size, other bytes
        f.write(TROJAN)
    saved_models._FETCHED.clear()  # as another process of this user would see the cache
    assert saved_models.fetch(uri) == local
    assert_real_copy(local)

    saved_models._FETCHED.clear()
    with open(os.path.join(local, "variables", "extra.pb"), "wb") as f:  # a file the export does not have
        f.write(b"x")
    assert saved_models.fetch(uri) == local
    assert_real_copy(local)
    assert not os.path.exists(os.path.join(local, "variables", "extra.pb"))

    saved_models._FETCHED.clear()
    os.chown(local, OTHER_UID, OTHER_UID)  # a copy of another owner inside the root
    assert saved_models.fetch(uri) == local
    assert_real_copy(local)


def test_an_intact_cached_copy_is_used_without_downloading_again(emu, shared_tmp):
    uri = publish(emu)
    local = saved_models.fetch(uri)
    saved_models._FETCHED.clear()
    emu.requests.clear()
    assert saved_models.fetch(uri) == local
    downloads = [r for r in emu.requests if r.op == "OPEN" and r.path.endswith(("saved_model.pb", "00001"))]
    assert not downloads  # only the version's small files were read
    assert_real_copy(local)
