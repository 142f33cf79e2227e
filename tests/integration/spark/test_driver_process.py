"""Drivers in their own process: interrupting one, and GPUs assigned by Spark's resource scheduler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.support.helpers import assert_no_node_processes, read_records, wait_for_records

pytestmark = pytest.mark.integration


def start_driver(scenario: str, run_dir) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.spark.driver_script", scenario, str(run_dir)],
        cwd=REPO,
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_interrupting_the_driver_cancels_the_stage_and_leaves_no_tf_process(tmp_path):
    driver = start_driver("sleep", tmp_path)
    try:
        run_id = driver.stdout.readline().split()[-1]
        pids = wait_for_records(str(tmp_path), "pid", 2, within=120)
        assert len(pids) == 2
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=90)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert "INTERRUPTED" in out, err[-3000:]
    assert driver.returncode == 130
    assert_no_node_processes(run_id, within=30)


def test_gpus_assigned_by_spark_become_cuda_visible_devices(tmp_path):
    driver = start_driver("gpu", tmp_path)
    try:
        out, err = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err[-3000:]
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    assert result["cuda_visible_devices"] == "7"  # the stub discovery script's address
    records = read_records(str(tmp_path), "context")
    assert {r["cuda_visible_devices"] for r in records.values()} == {"7"}
    assert len(records) == 2


def test_asking_for_more_gpus_than_spark_gives_fails_before_launch(tmp_path):
    script = f"""
import sys
sys.path.insert(0, {str(REPO)!r})
from pyspark import SparkContext
from tests.integration.spark.driver_script import gpu_conf
from tests.support import programs
from pathlib import Path
from airflow_tfos.runtime import TFClusterRun, ClusterConfigError
sc = SparkContext(conf=gpu_conf(Path({str(tmp_path)!r})))
try:
    TFClusterRun(sc, programs.report_context, num_nodes=2, gpus_per_node=2).start()
except ClusterConfigError as exc:
    print("ERROR", exc)
finally:
    sc.stop()
"""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, cwd=REPO)
    assert "ERROR gpus_per_node=2 but spark.task.resource.gpu.amount=1" in done.stdout, done.stderr[-2000:]
    assert time.monotonic() - started < 120
