"""Every row once per epoch under parameter servers across hosts: ps, chief and the 2 workers each on a host
of its own (Spark standalone, one core per worker host), worker 1 slowed; each worker's tf.data worker reads
its own share on its own host and serves its batches to whichever worker asks, over the hosts' network."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.support.helpers import read_records
from tests.support.ps_visitation import check_cell

pytestmark = pytest.mark.integration

CELL = "cell-frame-pad-shuffle"


def test_visitation_under_parameter_servers_every_row_once_across_hosts_however_slow_a_worker(lab, tmp_path):
    run_dir = tmp_path / "runs"  # one file system under every host: the nodes' records land here
    env = lab.env("driver", PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-m", "tests.support.ps_visitation", "--master", lab.master, str(run_dir), CELL]
    out, err = lab.hosts.log_dir / "ps-visitation.out", lab.hosts.log_dir / "ps-visitation.err"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        driver = lab.hosts.spawn("driver", argv, env=env, stdout=stdout, stderr=stderr, cwd=str(REPO))
    try:
        driver.wait(400)
    except subprocess.TimeoutExpired:
        driver.kill()
        raise
    log = err.read_text()
    results = [line for line in out.read_text().splitlines() if line.startswith(f"RESULT {CELL} ")]
    assert driver.returncode == 0 and results, log[-5000:]
    result = json.loads(results[0].split(" ", 2)[2])
    balance = check_cell(result, run_dir / CELL, log)
    assert sum(b["repeated"] for b in balance.values()) == 97
    # The two workers ran on two hosts: the batches a worker took from the other's share crossed between them.
    hosts = {node: record["host"] for node, record in read_records(str(run_dir / CELL), "node").items()}
    assert len(set(hosts.values())) == 2 and not set(hosts.values()) & {lab.address("driver")}, hosts
