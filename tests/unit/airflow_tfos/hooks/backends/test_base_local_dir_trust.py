"""What the hook reuses from its local directory (tracker, caches, tags' locks) is this user's own: another
user's files there are refused or replaced, never used. Another user is uid 65534, in a forked process."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from airflow_tfos.hooks.backends.base import TRACKER_DIR_ENV, private_dir, tag_lock
from airflow_tfos.hooks.backends.local_tracker import LocalBackend
from airflow_tfos.hooks.errors import UntrustedLocalDirError
from airflow_tfos.hooks.spark_conf import _LAUNCHER, LAUNCHER_NAME, cached_file

OTHER = 65534

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="acting as another user needs root")


def as_other_user(action: Callable[[], None]) -> int:
    """Run ``action`` in a forked process as uid/gid 65534; its exit code (0: it did what it tried)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgroups([])
            os.setgid(OTHER)
            os.setuid(OTHER)
            action()
            code = 0
        except BaseException:
            traceback.print_exc()
        os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.fixture
def shared() -> Path:
    """A tracker directory every user may write (mode 1777), as a shared AIRFLOW_TFOS_LOCAL_DIR would be."""
    folder = Path(tempfile.mkdtemp(prefix="tfos-shared-"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder)


def _launcher_path(tracker: Path) -> Path:
    import hashlib

    return tracker / "cache" / hashlib.sha256(_LAUNCHER.encode()).hexdigest()[:16] / LAUNCHER_NAME


def test_another_users_launcher_in_a_shared_tracker_dir_never_reaches_spark_submit(shared):
    planted = _launcher_path(shared)

    def plant() -> None:  # the right content and mode, owned by the other user
        planted.parent.mkdir(parents=True)
        planted.write_text(_LAUNCHER)
        planted.chmod(0o644)

    assert as_other_user(plant) == 0
    with pytest.raises(UntrustedLocalDirError, match=rf"{shared}.*{TRACKER_DIR_ENV}"):
        _launcher_then_rewritten(shared)


def _launcher_then_rewritten(tracker: Path) -> None:
    """Ask for the launcher; if the check says yes, the other user rewrites it before spark-submit runs it."""
    launcher = cached_file(tracker / "cache", LAUNCHER_NAME, _LAUNCHER)
    assert as_other_user(lambda: launcher.write_text(_LAUNCHER + "print('a line of theirs')\n")) == 0
    assert "a line of theirs" not in launcher.read_text(), f"spark-submit would run uid {OTHER}'s {launcher}"


def test_a_cached_file_another_user_owns_in_a_private_dir_is_written_again_as_ours(tmp_path):
    planted = _launcher_path(tmp_path / "tfos-local")
    planted.parent.mkdir(parents=True)
    planted.write_text(_LAUNCHER)
    planted.chmod(0o644)
    os.chown(planted, OTHER, OTHER)
    launcher = cached_file(tmp_path / "tfos-local" / "cache", LAUNCHER_NAME, _LAUNCHER)
    info = os.lstat(launcher)
    assert info.st_uid == os.getuid() and launcher.read_text() == _LAUNCHER


def test_a_cached_file_that_is_a_link_is_replaced_by_a_file(tmp_path):
    elsewhere = tmp_path / "elsewhere.py"
    elsewhere.write_text(_LAUNCHER)
    elsewhere.chmod(0o644)
    planted = _launcher_path(tmp_path / "tfos-local")
    planted.parent.mkdir(parents=True)
    planted.symlink_to(elsewhere)
    launcher = cached_file(tmp_path / "tfos-local" / "cache", LAUNCHER_NAME, _LAUNCHER)
    assert stat.S_ISREG(os.lstat(launcher).st_mode)


def test_what_the_hook_wrote_cannot_be_rewritten_by_another_user(tmp_path):
    base = Path(tempfile.mkdtemp(prefix="tfos-private-"))  # in /tmp, readable by others: nothing hides the path
    try:
        base.chmod(0o755)
        launcher = cached_file(base / "cache", LAUNCHER_NAME, _LAUNCHER)

        def rewrite() -> None:
            launcher.write_text("print('theirs')\n")

        def replace() -> None:
            (launcher.parent / "x").write_text("print('theirs')\n")
            os.replace(launcher.parent / "x", launcher)

        assert as_other_user(rewrite) != 0 and as_other_user(replace) != 0
        assert launcher.read_text() == _LAUNCHER
        assert oct(os.lstat(launcher.parent).st_mode & 0o777) == "0o700"
    finally:
        shutil.rmtree(base)


def _hold_lock_as_other(path: Path) -> tuple[int, int]:
    """A forked process of uid 65534 holding ``path``'s flock until its pipe is closed: (pid, write end)."""
    ready_r, ready_w = os.pipe()
    stop_r, stop_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(ready_r)
        os.close(stop_w)
        handle = open(path, "a+")  # noqa: SIM115 - held until the child ends
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        os.setgroups([])
        os.setgid(OTHER)
        os.setuid(OTHER)
        os.write(ready_w, b"1")
        os.read(stop_r, 1)
        os._exit(0)
    os.close(ready_w)
    os.close(stop_r)
    assert os.read(ready_r, 1) == b"1"
    os.close(ready_r)
    return pid, stop_w


def test_a_lock_file_of_another_user_blocks_no_submission(tmp_path):
    tags = tmp_path / "tfos-local" / "tags"
    tags.mkdir(parents=True)
    lock = tags / "tfos-abc.lock"
    lock.touch()
    os.chown(lock, OTHER, OTHER)
    pid, stop = _hold_lock_as_other(lock)
    try:
        with tag_lock(tmp_path / "tfos-local", "tfos-abc", timeout=0.5):
            assert os.lstat(lock).st_uid == os.getuid()
    finally:
        os.close(stop)
        os.waitpid(pid, 0)


@pytest.mark.parametrize(
    ("what", "setup"),
    [
        ("another user owns it", lambda t: (t.mkdir(mode=0o700), os.chown(t, OTHER, OTHER))),
        ("others can write it", lambda t: (t.mkdir(), t.chmod(0o777))),
        ("its group can write it", lambda t: (t.mkdir(), t.chmod(0o770))),
        ("another user owns the directory above", lambda t: (t.parent.chmod(0o755), os.chown(t.parent, OTHER, OTHER))),
        ("others can write the directory above", lambda t: t.parent.chmod(0o777)),
        (
            "another group can write the directory above",
            lambda t: (t.parent.chmod(0o775), os.chown(t.parent, -1, OTHER)),
        ),
    ],
)
def test_a_tracker_dir_another_user_owns_or_can_write_is_refused(tmp_path, what, setup):
    tracker = tmp_path / "above" / "tfos-local"
    tracker.parent.mkdir()
    setup(tracker)
    with (
        pytest.raises(UntrustedLocalDirError, match=rf"{TRACKER_DIR_ENV} to a directory of your own") as err,
        tag_lock(tracker, "tfos-abc", timeout=0.5),
    ):
        pass
    assert str(tracker.parent if "above" in what else tracker) in str(err.value)


def test_a_private_tracker_dir_below_one_that_roots_group_may_write_is_accepted(tmp_path):
    home = tmp_path / "airflow"  # as Airflow's image makes $AIRFLOW_HOME: group root, group-writable
    home.mkdir(mode=0o775)
    os.chown(home, -1, 0)
    home.chmod(0o775)
    assert private_dir(home / "tfos-local") == (home / "tfos-local").resolve()


def test_a_private_tracker_dir_below_a_sticky_shared_one_is_accepted(shared):
    mine = shared / "mine"
    assert private_dir(mine) == mine.resolve() and oct(mine.stat().st_mode & 0o777) == "0o700"


def test_a_local_submission_refuses_a_shared_tracker_dir_before_starting_anything(shared):
    with pytest.raises(UntrustedLocalDirError, match=str(shared)):
        LocalBackend(str(shared)).submit(["true"], tag="tfos-abc", name="n", run_dir="/nowhere", master="local[1]")
    assert not (shared / "apps").exists()
