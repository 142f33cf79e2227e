"""Catalog tables as training input: the operator submits, the Spark driver fingerprints the table's files and
decides between nothing to do, resuming, and training from scratch with the old model set aside.

The table is a real Spark catalog table (``saveAsTable`` with a path) on the session's local cluster; the
listing the driver takes is checked against the files on disk, read with ``os.walk``/``os.stat``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_tfos.operators.run import TrainingRun
from airflow_tfos.runtime.driver.table_fingerprint import already_trained, resolve_tables
from airflow_tfos.shared.fingerprint import FINGERPRINT, with_inputs
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import RunSpec
from tests.conftest import REPO
from tests.unit.airflow_tfos.shared.test_fingerprint import exported

LOG = "test_table_fingerprint"


def parquet_files(folder: Path) -> dict[str, list[int]]:
    """The table's data files as Spark writes them (no ``_``/``.`` names), with size and mtime in ms."""
    found = {}
    for name in os.listdir(folder):
        if not name.startswith(("_", ".")):
            st = os.stat(folder / name)
            found[name] = [st.st_size, int(st.st_mtime * 1000)]
    return found


def training_run(tmp_path: Path, table: str, train_fn: str = "my_training:main_fun") -> TrainingRun:
    spec = RunSpec(
        train_fn=train_fn,
        num_nodes=2,
        data={"format": "table", "table": table},
        feed={"features": ["x"], "label": "y", "batch_size": 30},
        code={"packages": ["my_training"], "hash": "c0de"},
    )
    rundir = RunDir(str(tmp_path / "run"))
    return TrainingRun(run_dir=rundir.uri, spec=spec, hook=None, run_dir_contents=rundir, log=logging.getLogger(LOG))


def write_table(spark, name: str, folder: Path, rows: int, seed: int) -> None:
    frame = spark.range(rows).selectExpr("cast(id as double) * 0.01 as x", f"rand({seed}) as y").repartition(2)
    frame.write.mode("overwrite").option("path", str(folder)).saveAsTable(name)


def test_a_table_rewritten_with_other_rows_trains_from_scratch_and_an_unchanged_one_is_a_no_op(spark, tmp_path, caplog):
    name, folder = "tfos_fp_events", tmp_path / "warehouse" / "events"
    write_table(spark, name, folder, rows=200, seed=1)
    try:
        first = training_run(tmp_path, name)
        rundir = first.run_dir_contents
        with caplog.at_level(logging.INFO):
            assert first.already_done() is None
            first.before_submit()  # the operator: fingerprint.json names the table, pending the driver
            assert rundir.read_fingerprint()["inputs"]["data"]["resolver"] == "driver"
            assert "cannot be detected" not in caplog.text  # a table is not an unseen input any more

            resolved = resolve_tables(spark, rundir)  # the driver, once Spark runs
        table_fp = resolved["inputs"]["data"]
        assert table_fp["files"] == parquet_files(folder)
        assert table_fp["count"] == 2 and table_fp["bytes"] == sum(s for s, _ in parquet_files(folder).values())
        assert table_fp["provider"] == "parquet" and table_fp["location"].endswith(str(folder))
        assert rundir.read_fingerprint() == resolved and already_trained(rundir, first.digest, resolved) is None

        rundir.storage.makedirs(rundir.path("checkpoints", "ckpt-10"))  # what the training leaves
        exported(rundir, first.digest)
        assert rundir.export_success()["fingerprint"] == resolved["hash"]

        caplog.clear()
        rerun = training_run(tmp_path, name)  # cleared, nothing changed
        with caplog.at_level(logging.INFO):
            assert rerun.already_done() is None  # only the driver can tell: it is submitted
            assert "trains only if it did" in caplog.text
            rerun.before_submit()
            assert rundir.read_fingerprint()["hash"] == resolved["hash"]  # carried, not reset to pending
            again = resolve_tables(spark, rundir)
        assert again["hash"] == resolved["hash"]
        assert already_trained(rundir, rerun.digest, again)["step"] == 20  # the driver does nothing
        assert not Path(tmp_path, "run", "previous").exists()
        assert rerun.result(None)["fingerprint"] == resolved["hash"]
        assert rerun.computed_fingerprint["inputs"]["data"]["count"] == 2  # lineage gets the driver's listing

        write_table(spark, name, folder, rows=300, seed=2)  # a backfill rewrites the table
        caplog.clear()
        backfill = training_run(tmp_path, name)
        with caplog.at_level(logging.INFO):
            assert backfill.already_done() is None
            backfill.before_submit()
            changed = resolve_tables(spark, rundir)
        assert changed["hash"] != resolved["hash"]
        assert changed["inputs"]["data"]["files"] == parquet_files(folder)
        assert already_trained(rundir, backfill.digest, changed) is None
        (moved,) = Path(tmp_path, "run", "previous").iterdir()
        assert sorted(p.name for p in moved.iterdir()) == ["checkpoints", "export", FINGERPRINT]
        assert rundir.latest_checkpoint() is None and rundir.export_success() is None
        assert "2 files added, 2 removed, 0 changed" in caplog.text and f"kept in {moved}" in caplog.text
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_a_missing_table_fails_the_driver_naming_it(tmp_path):
    """The driver's exit and status name the table that cannot be read; nothing is trained."""
    run = training_run(tmp_path, "no_such_db.no_such_table", train_fn="tests.support.programs:report_context")
    run.run_dir_contents.write_spec(run.spec_json)
    run.before_submit()
    command = [
        sys.executable, "-m", "airflow_tfos.runtime.driver", "--run-dir", run.run_dir, "--master", "local[1]",
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.ui.enabled=false",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180)
    status = json.loads(Path(tmp_path, "run", "status.json").read_text())
    assert done.returncode == 2, done.stderr[-2000:]
    assert status["state"] == "FAILED"
    assert status["error"].startswith("cannot fingerprint the table input: ")
    assert "no_such_table" in status["error"] and "no_such_table" in done.stderr
    assert not Path(tmp_path, "run", "checkpoints").exists()


@pytest.mark.parametrize("previous", [None, "resolved"])
def test_the_operator_carries_the_drivers_table_listing_and_never_takes_it_as_changed(tmp_path, previous):
    run = training_run(tmp_path, "db.t")
    rundir = run.run_dir_contents
    listing = {"kind": "table", "table": "db.t", "resolver": "driver", "hash": "abc", "count": 1, "bytes": 3}
    if previous:
        rundir.write_fingerprint(with_inputs(run.fingerprint, {"data": listing}))  # as a driver wrote it
    run.before_submit()
    written = rundir.read_fingerprint()
    assert written["inputs"]["data"] == (listing if previous else run.fingerprint["inputs"]["data"])
    assert not Path(tmp_path, "run", "previous").exists()
