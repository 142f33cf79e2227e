"""What the shipped package may hold: regular files of the package only, never more than the size limit read.

A link out of the package, a link to a device, a FIFO or socket, and files that look like secrets are left out
with a warning naming each; a file larger than the limit is refused from its size before a byte is read. The
zipping of hazards runs in a child process, bounded in time and memory, so that a regression fails the test
instead of hanging or exhausting the machine."""

from __future__ import annotations

import json
import logging
import os
import resource
import socket
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from airflow_tfos.hooks.user_code import CodePackage, code_zip
from tests.conftest import REPO

#: What the child does: zip the package, print the zip's names (or the error) and its peak resident memory.
CHILD = textwrap.dedent(
    """
    import json, logging, sys, zipfile
    from pathlib import Path
    from airflow_tfos.hooks.user_code import CodePackage, UserCodeError, code_zip

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    root, cache = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        shipped = code_zip([CodePackage(root.name, root)], cache)
        with zipfile.ZipFile(shipped.path) as archive:
            found = {"names": sorted(archive.namelist())}
    except UserCodeError as exc:
        found = {"error": str(exc)}
    # this process's own peak (VmHWM): ru_maxrss would carry the forked test process's peak across exec
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    found["max_rss_mb"] = int(peak.split()[1]) / 1024
    print(json.dumps(found))
    """
)


def zip_in_child(package: Path, cache: Path, timeout: float = 60) -> dict:
    """Zip ``package`` in a child process with 2 GiB of address space at most; fail on a hang."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))

    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(package), str(cache)],
            capture_output=True, text=True, timeout=timeout, cwd=REPO, preexec_fn=limit,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"zipping {package} did not end within {timeout} s (a FIFO or device read?)")
    assert done.returncode == 0, done.stderr[-2000:]
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "log": done.stderr}


@pytest.fixture
def package(tmp_path) -> Path:
    """A package beside a DAG: two modules and a data file."""
    root = tmp_path / "dags" / "user_pkg"
    (root / "nets").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "nets" / "__init__.py").write_text("")
    (root / "nets" / "linear.py").write_text("EPOCHS = 5\n")
    (root / "vocab.txt").write_text("a\nb\n")
    return root


def test_links_out_devices_fifos_sockets_and_secrets_are_left_out_without_a_hang(package, tmp_path):
    outside = tmp_path / "elsewhere" / "token.txt"
    outside.parent.mkdir()
    outside.write_text("not part of the package")
    (package / "zero.bin").symlink_to("/dev/zero")
    (package / "outside.txt").symlink_to(outside)
    (package / "etc").symlink_to("/etc")  # a folder out of the package
    (package / "inside.py").symlink_to(package / "nets" / "linear.py")  # stays inside: shipped as a file
    (package / "dangling.py").symlink_to(package / "gone.py")
    os.mkfifo(package / "pipe")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(package / "control.sock"))
    for secret in ("credentials.json", "server.pem", "tls.key", "id_rsa", "svc.keytab", "cert.p12"):
        (package / secret).write_text("-----BEGIN PRIVATE KEY-----\n")
    (package / "nets" / ".env").write_text("PASSWORD=x\n")
    try:
        found = zip_in_child(package, tmp_path / "cache", timeout=60)
    finally:
        listener.close()
    assert found.get("names") == [
        "user_pkg/__init__.py",
        "user_pkg/inside.py",
        "user_pkg/nets/__init__.py",
        "user_pkg/nets/linear.py",
        "user_pkg/vocab.txt",
    ], found
    assert found["max_rss_mb"] < 300, found
    for name, why in (
        ("zero.bin", "not a regular file"),
        ("pipe", "a FIFO"),
        ("control.sock", "a socket"),
        ("outside.txt", "outside the package"),
        ("etc", "outside the package"),
        ("dangling.py", "leads nowhere"),
    ):
        assert any(f"user_pkg/{name}" in line and why in line for line in found["log"].splitlines()), (name, found)


def test_each_file_left_out_is_named_in_a_warning(package, tmp_path, caplog):
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("x")
    (package / "outside.txt").symlink_to(outside)
    (package / "credentials.json").write_text("{}")
    (package / "nets" / "server.pem").write_text("key")
    with caplog.at_level(logging.WARNING, logger="airflow_tfos.hooks.user_code"):
        code_zip([CodePackage("user_pkg", package)], tmp_path / "cache")
    text = caplog.text
    for name in ("user_pkg/outside.txt", "user_pkg/credentials.json", "user_pkg/nets/server.pem"):
        assert name in text, text
    assert "outside the package" in text and ".tfos-include" in text


def test_a_secret_named_in_tfos_include_is_shipped_on_purpose(package, tmp_path):
    (package / "certs").mkdir()
    (package / "certs" / "ca.pem").write_text("public CA certificate")
    (package / "server.pem").write_text("private")
    (package / ".tfos-include").write_text("# shipped on purpose\ncerts/*.pem\n")
    shipped = code_zip([CodePackage("user_pkg", package)], tmp_path / "cache")
    with zipfile.ZipFile(shipped.path) as archive:
        names = archive.namelist()
    assert "user_pkg/certs/ca.pem" in names
    assert "user_pkg/server.pem" not in names and "user_pkg/.tfos-include" not in names


def test_a_file_over_the_limit_is_refused_by_its_size_before_it_is_read(package, tmp_path):
    with open(package / "weights.bin", "wb") as sparse:  # 200 MB that take no disk
        sparse.truncate(200 * 2**20)
    found = zip_in_child(package, tmp_path / "cache", timeout=60)
    assert "larger than 50 MB" in found.get("error", ""), found
    assert found["max_rss_mb"] < 150, f"{found['max_rss_mb']:.0f} MB resident: the file was read"


def test_a_module_beside_the_dag_that_links_to_a_checkout_is_shipped(tmp_path):
    checkout = tmp_path / "repo" / "user_mod.py"
    checkout.parent.mkdir()
    checkout.write_text("EPOCHS = 2\n")
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "user_mod.py").symlink_to(checkout)
    shipped = code_zip([CodePackage("user_mod", tmp_path / "dags" / "user_mod.py")], tmp_path / "cache")
    with zipfile.ZipFile(shipped.path) as archive:
        assert archive.read("user_mod.py") == b"EPOCHS = 2\n"


def test_a_zip_written_under_umask_002_is_reused_not_rebuilt(package, tmp_path):
    old = os.umask(0o002)  # Airflow's image runs its workers so
    try:
        first = code_zip([CodePackage(package.name, package)], tmp_path / "cache")
        written = first.path.stat().st_ino
        again = code_zip([CodePackage(package.name, package)], tmp_path / "cache")
    finally:
        os.umask(old)
    assert again.path == first.path and again.path.stat().st_ino == written  # not written a second time
    assert first.path.stat().st_mode & 0o022 == 0
