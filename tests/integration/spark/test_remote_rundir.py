"""A run directory on HDFS (the WebHDFS emulator): real TF training on the local Spark cluster publishes its
checkpoints and export there, and a second run resumes from the latest checkpoint."""

from __future__ import annotations

import os

import pytest

from airflow_tfos.runtime import run
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage.webhdfs_client import clear_cached_storages
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from tests.support import programs

ARGS = {"steps_per_epoch": 10, "every": 5, "progress": False}


@pytest.mark.integration
def test_checkpoints_and_export_go_to_hdfs_and_a_second_run_resumes(sc, monkeypatch):
    with WebHDFSEmulator() as emu:
        first_uri = emu.uri("/runs/x")  # the URI names the namenode: no settings needed
        result = run(sc, programs.recoverable_training, {**ARGS, "epochs": 1}, num_nodes=2, run_dir=first_uri)
        assert result["step"] == 10
        rundir = RunDir(first_uri)
        latest = rundir.latest_checkpoint()
        assert latest.step == 10 and latest.path == f"{first_uri}/checkpoints/ckpt-10"
        assert [h["name"] for h in rundir._read_json("checkpoints", "manifest.json")["history"]] == [
            "ckpt-5",
            "ckpt-10",
        ]
        assert any(n.startswith("ckpt.index") for n in os.listdir(emu.local_path("/runs/x/checkpoints/ckpt-10")))
        assert rundir.export_success()["step"] == 10
        assert os.path.exists(emu.local_path("/runs/x/export/saved_model.pb"))
        assert not [n for n in rundir.storage.listdir(rundir.path("checkpoints")) if n.startswith(".")]
        assert not rundir.events("restore")

        # The second run names HDFS as hdfs://; only AIRFLOW_TFOS_WEBHDFS (which TFClusterRun passes on to
        # the TF node processes) says where the namenode is, and as which user to act.
        monkeypatch.setenv(WEBHDFS_ENV, emu.config(user="trainer").to_json())
        clear_cached_storages()
        emu.requests.clear()
        result = run(sc, programs.recoverable_training, {**ARGS, "epochs": 2}, num_nodes=2, run_dir="hdfs://ns/runs/x")
        assert result["step"] == 20
        assert {r.user for r in emu.requests if r.op in ("CREATE", "OPEN")} == {"trainer"}
        restores = RunDir("hdfs://ns/runs/x").events("restore")
        assert [e["step"] for e in restores] == [10]  # the chief resumed from the first run's latest checkpoint
        assert rundir.latest_checkpoint().step == 20
        assert rundir.export_success()["step"] == 20


def test_the_driver_takes_hdfs_settings_from_its_option(monkeypatch):
    from airflow_tfos.runtime.driver import entry as driver

    monkeypatch.setenv(WEBHDFS_ENV, "")  # restored after the test: the option sets it for the TF nodes
    assert driver.main(["--run-dir", "hdfs://ns/runs/y", "--webhdfs-config", '{"namenodes": "nn:8020"}']) == 2
    with WebHDFSEmulator() as emu:
        clear_cached_storages()
        assert driver.main(["--run-dir", "hdfs://ns/runs/y", "--webhdfs-config", emu.config().to_json()]) == 2
        status = RunDir(emu.uri("/runs/y")).read_status()
    assert status["state"] == "FAILED" and "no spec.json in hdfs://ns/runs/y" in status["error"]
