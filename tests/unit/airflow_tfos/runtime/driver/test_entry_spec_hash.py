"""The driver runs only the spec that was submitted (``--spec-hash``), in a real driver process.

Every case here ends before Spark starts (refused, or already exported), so no cluster is needed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from airflow_tfos.shared.errors import RunDirError
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import spec_digest, spec_hash, verified_spec_hash
from tests.conftest import REPO

GOOD = {"train_fn": "tests.support.programs:spec_training", "num_nodes": 1, "args": {"epochs": 1}}


def run_driver(run_dir: str, *extra: str, pythonpath: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "airflow_tfos.runtime.driver",
        "--run-dir",
        run_dir,
        "--master",
        "local[1]",
        *extra,
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([pythonpath, os.environ["PYTHONPATH"]])}
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180, env=env)


@pytest.fixture
def planted(tmp_path):
    """A module that, once imported, leaves a marker file: what an attacker would make the driver run."""
    code = tmp_path / "code"
    code.mkdir()
    marker = tmp_path / "imported"
    (code / "planted_trust_mod.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\n\ndef main(args, ctx):\n    return None\n"
    )
    return code, marker


def tamper(rundir: RunDir, *, update_hash: bool) -> dict:
    spec = json.loads(rundir.storage.read_bytes(rundir.path("spec.json")))
    spec["train_fn"] = "planted_trust_mod:main"
    spec["env"] = {"LD_PRELOAD": "/tmp/x.so"}
    if update_hash:
        spec["spec_hash"] = spec_hash(spec)  # computed without its own field
    rundir.storage.write_bytes(rundir.path("spec.json"), json.dumps(spec).encode())
    return spec


@pytest.mark.parametrize("update_hash", [False, True], ids=["stale-stored-hash", "recomputed-stored-hash"])
def test_a_spec_changed_after_submission_is_refused_before_anything_is_imported(tmp_path, planted, update_hash):
    code, marker = planted
    rundir = RunDir(str(tmp_path / "run"))
    rundir.write_spec(GOOD)
    submitted = spec_digest(GOOD)  # what the hook passes
    tamper(rundir, update_hash=update_hash)

    done = run_driver(rundir.uri, "--spec-hash", submitted, pythonpath=str(code))

    assert done.returncode == 2, done.stderr[-3000:]
    assert not marker.exists()  # the old driver imported the planted train_fn (then failed on Spark or ran it)
    status = rundir.read_status()
    assert status["state"] == "FAILED"
    assert "not the spec that was submitted" in status["error"] and submitted in status["error"]
    assert "not the spec that was submitted" in done.stderr


def test_without_spec_hash_a_stored_hash_that_does_not_match_is_refused(tmp_path, planted):
    code, marker = planted
    rundir = RunDir(str(tmp_path / "run"))
    rundir.write_spec(GOOD)
    tamper(rundir, update_hash=False)

    done = run_driver(rundir.uri, pythonpath=str(code))

    assert done.returncode == 2, done.stderr[-3000:]
    assert not marker.exists()
    assert "remove its spec_hash field" in rundir.read_status()["error"]


def test_the_submitted_spec_is_run_and_one_run_by_hand_says_it_was_not_verified(tmp_path, planted):
    code, _ = planted
    rundir = RunDir(str(tmp_path / "run"))
    digest = rundir.write_spec(GOOD)
    # exported already for this spec: the driver says so and ends before starting Spark
    rundir.publish_export(rundir.export_staging(), spec_hash=digest, step=3, metrics={})

    verified = run_driver(rundir.uri, "--spec-hash", spec_digest(GOOD), pythonpath=str(code))
    assert verified.returncode == 0, verified.stderr[-3000:]
    assert "nothing to do" in verified.stderr and "not verified" not in verified.stderr

    by_hand = run_driver(rundir.uri, pythonpath=str(code))
    assert by_hand.returncode == 0, by_hand.stderr[-3000:]
    assert "was not verified: no --spec-hash was given" in by_hand.stderr and "nothing to do" in by_hand.stderr


def test_verified_spec_hash():
    digest = spec_hash(GOOD)
    assert verified_spec_hash(dict(GOOD)) == digest
    assert verified_spec_hash({**GOOD, "spec_hash": digest}, digest) == digest
    assert verified_spec_hash({**GOOD, "spec_hash": digest}, spec_digest(GOOD)) == digest  # the hook's full digest
    with pytest.raises(RunDirError, match="not the spec that was submitted"):
        verified_spec_hash(dict(GOOD), spec_digest(GOOD)[:20])
    with pytest.raises(RunDirError, match="not the spec that was submitted"):
        verified_spec_hash({**GOOD, "num_nodes": 2}, digest)
    with pytest.raises(RunDirError, match="holds the spec_hash"):
        verified_spec_hash({**GOOD, "num_nodes": 2, "spec_hash": digest})
