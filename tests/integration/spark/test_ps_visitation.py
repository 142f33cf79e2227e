"""Every row once per epoch under parameter servers, with one worker slowed on purpose.

ps, chief and 2 workers on ``local-cluster[4,1,...]`` (tests/support/ps_visitation.py); worker 1 reads each
batch late, so the coordinator, which hands a step to whichever worker is free, gives worker 0 more steps.
The ids trained on are counted in a variable on the parameter server, epoch by epoch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.support.helpers import read_records
from tests.support.ps_driver import FILE_BATCH, FILE_ROWS
from tests.support.ps_visitation import BATCH, ROWS, check_cell

pytestmark = pytest.mark.integration

WORKERS = 2


def _command(run_dir, scenarios: list[str]) -> list[str]:
    return [sys.executable, "-m", "tests.support.ps_visitation", str(run_dir), *scenarios]


def _results(returncode: int, out: str, err: str, scenarios: list[str]) -> dict:
    results = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            _, scenario, payload = line.split(" ", 2)
            results[scenario] = json.loads(payload)
    assert returncode == 0 and set(results) == set(scenarios), out[-3000:] + err[-5000:]
    return results


#: The parameter-server cells of the visitation matrix (test_visitation_matrix.py lists them all): half of the
#: 2 x 2 x 2 (input, balance, order), chosen so that each level of each factor comes twice and each pair of
#: levels of two factors once. All eight with AIRFLOW_TFOS_FULL_MATRIX=1 (about 20 s more per cell).
ALL_CELLS = [f"cell-{s}-{b}-{o}" for s in ("frame", "parquet") for b in ("drop", "pad") for o in ("ordered", "shuffle")]
HALF = {"cell-frame-drop-ordered", "cell-frame-pad-shuffle", "cell-parquet-drop-shuffle", "cell-parquet-pad-ordered"}
CELLS = ALL_CELLS if os.environ.get("AIRFLOW_TFOS_FULL_MATRIX") == "1" else [c for c in ALL_CELLS if c in HALF]


@pytest.fixture(scope="module")
def visits(tmp_path_factory):
    # One Spark application (local-cluster[4,1,...]) for every scenario and cell of this module.
    run_dir = tmp_path_factory.mktemp("ps-visitation")
    scenarios = ["frame", "parquet", "files", *CELLS]
    done = subprocess.run(_command(run_dir, scenarios), cwd=REPO, capture_output=True, text=True, timeout=580)
    results = _results(done.returncode, done.stdout, done.stderr, scenarios)
    (run_dir / "results.json").write_text(json.dumps(results))  # for a look after the test
    return {"results": results, "run_dir": run_dir, "log": done.stderr}


def _ids(scenario: str) -> tuple[list[int], int]:
    """The ids of a scenario's rows, and its batch size."""
    if scenario == "files":
        return [3 * i + 1 for i in range(sum(FILE_ROWS))], FILE_BATCH
    return list(range(ROWS)), BATCH


def _sums(record: dict) -> tuple[int, int]:
    """Rows and the sum of their ids in one epoch's counts."""
    counts = record["counts"]
    return sum(counts), sum(i * c for i, c in enumerate(counts))


def _worker_pids(run_dir, scenario: str) -> list[str]:
    nodes = read_records(str(run_dir / scenario), "node")
    return [str(nodes[f"worker:{i}"]["pid"]) for i in range(WORKERS)]


@pytest.mark.parametrize("scenario", ["frame", "parquet", "files"])
def test_visitation_an_iterator_per_epoch_trains_every_row_once_per_epoch_however_slow_a_worker(visits, scenario):
    result = visits["results"][scenario]
    ids, _ = _ids(scenario)
    fast, slow = _worker_pids(visits["run_dir"], scenario)
    for epoch, record in enumerate(result["per_epoch"]):
        trained = [i for i, c in enumerate(record["counts"]) if c]
        # Each id of the data, each exactly once in this epoch (the sum too: none twice, none missed).
        assert (trained, _sums(record)) == (ids, (len(ids), sum(ids))), (epoch, _sums(record))
        assert set(record["counts"]) <= {0, 1}
        # The steps went to whichever worker was free: the fast one took more batches than the slow one,
        # which it could only do by taking batches of the slow worker's share.
        taken = record["batches_by_pid"]
        assert set(taken) == {fast, slow} and sum(taken.values()) == result["steps_per_epoch"]
        assert taken[fast] > taken[slow], taken


@pytest.mark.parametrize("scenario", ["frame", "parquet", "files"])
def test_visitation_an_endless_iterator_trains_every_row_once_per_pass(visits, scenario):
    # ctx.dataset_fn with one iterator and steps_per_epoch steps of next() per epoch (what Keras fit does).
    result = visits["results"][scenario]
    ids, batch = _ids(scenario)
    epochs = result["endless"]
    # What the docs promise: a worker holds at most one batch it fetched ahead (max_outstanding_requests=1), so an
    # epoch of steps ends up to one batch per worker before or after its pass.
    slack = WORKERS * batch
    total = [0] * len(epochs[0]["counts"])
    for epoch, record in enumerate(epochs):
        assert sum(record["batches_by_pid"].values()) == result["steps_per_epoch"]
        total = [t + c for t, c in zip(total, record["counts"], strict=True)]
        # After e epochs every id was trained e times, but for the batches at the edge of a pass: those of the
        # last pass still held by a worker (one time short) and as many of the next pass (one time over).
        short = [i for i in ids if total[i] == epoch]
        over = [i for i in ids if total[i] == epoch + 2]
        assert all(epoch <= total[i] <= epoch + 2 for i in ids), (epoch, _sums(record))
        assert len(short) <= slack and len(over) <= slack, (epoch, len(short), len(over), _sums(record))
        assert abs(sum(total) - (epoch + 1) * len(ids)) <= slack


@pytest.mark.parametrize("cell", CELLS)
def test_visitation_matrix_parameter_servers_every_row_once_but_what_balance_states(visits, cell):
    check_cell(visits["results"][cell], visits["run_dir"] / cell, visits["log"])


def _progress(run_dir, epoch: int, batches: int, within: float = 300) -> dict:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            record = json.loads((run_dir / "progress-chief.json").read_text())
            # any attempt: the first may fail early for a reason of its own (a port taken before TF bound it,
            # which the run retries), and the next one then is the attempt this test interrupts
            if (record["epoch"], record["batches"]) >= (epoch, batches):
                return record
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"the chief did not reach batch {batches} of epoch {epoch} within {within} s")


def test_visitation_after_a_worker_is_lost_mid_epoch_the_resumed_epoch_trains_every_row_once(tmp_path):
    # Epochs of ctx.epoch_dataset_fn, a checkpoint (the counts and the epoch) at each epoch's end; worker 0
    # killed in the middle of the second epoch. The new attempt restores the first epoch's checkpoint and
    # runs the second epoch again from its beginning: new dispatcher, new jobs, every share from its first row.
    driver = subprocess.Popen(
        _command(tmp_path, ["resume"]), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    run_dir = tmp_path / "resume"
    try:
        at_kill = _progress(run_dir, epoch=1, batches=20)
        worker = read_records(str(run_dir), "node")["worker:0"]
        assert worker["attempt"] == at_kill["attempt"], (worker, at_kill)  # this attempt's worker 0
        os.kill(worker["pid"], signal.SIGKILL)
        out, err = driver.communicate(timeout=400)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    result = _results(driver.returncode, out, err, ["resume"])["resume"]
    killed = at_kill["attempt"]
    assert result["attempt"] > killed and at_kill["epoch"] == 1
    once = [1] * ROWS + [0]
    # What the interrupted attempt saved at the end of its first epoch: every id once.
    assert read_records(str(run_dir), f"epoch1-a{killed}")["chief:0"]["counts"] == once
    # The new attempt restored exactly that (the rows of the interrupted epoch trained before the loss were
    # lost with it), and its epochs 2 and 3 each trained every id once more: 3 each, none skipped or doubled.
    restored = read_records(str(run_dir), f"restored{result['attempt']}")["chief:0"]
    assert restored["epoch"] == 1 and restored["counts"] == once
    assert read_records(str(run_dir), f"epoch2-a{result['attempt']}")["chief:0"]["counts"] == [2] * ROWS + [0]
    assert result["counts"] == [3] * ROWS + [0]
