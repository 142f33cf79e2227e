"""ParameterServerStrategy fed from Spark, on local clusters of their own (ps, chief and 2 workers).

Each cluster runs in a driver process of its own (tests/support/ps_driver.py): the session's cluster
has too few executors, and a process holds one SparkContext.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.support.helpers import read_records
from tests.support.ps_driver import BATCH, FILE_BATCH, FILE_ROWS, ID_ROWS, MIXED_ROWS, MIXED_SIZE, mixed_row

pytestmark = pytest.mark.integration

#: Seconds a run may take to end once the chief has returned (the driver's view).
END_WITHIN = 10.0


def _command(num_nodes: int, run_dir, scenarios: list[str]) -> list[str]:
    return [sys.executable, "-m", "tests.support.ps_driver", str(num_nodes), str(run_dir), *scenarios]


def _results(returncode: int, out: str, err: str, scenarios: list[str]) -> dict:
    results = {}
    for line in out.replace("\r", "\n").splitlines():
        if line.startswith("RESULT "):
            _, scenario, payload = line.split(" ", 2)
            results[scenario] = json.loads(payload)
    assert returncode == 0 and set(results) == set(scenarios), out[-3000:] + err[-5000:]
    return results


def _drive(num_nodes: int, run_dir, scenarios: list[str]) -> dict:
    done = subprocess.run(
        _command(num_nodes, run_dir, scenarios), cwd=REPO, capture_output=True, text=True, timeout=580
    )
    results = _results(done.returncode, done.stdout, done.stderr, scenarios)
    (run_dir / "results.json").write_text(json.dumps(results))  # for a look after the test
    return {"results": results, "run_dir": run_dir}


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    # one application for every scenario (ps, chief and 2 workers); the ids fed from Spark are also counted with a
    # slowed worker in test_ps_visitation.py
    scenarios = ["count_file_ids", "keras", "keras_files", "mixed", "count_ids", "unfed"]
    return _drive(4, tmp_path_factory.mktemp("ps-2-workers"), scenarios)


def _check_ids_counted(run: dict, workers: int) -> None:
    result = run["results"]["count_ids"]
    nodes = read_records(str(run["run_dir"] / "count_ids"), "node")
    worker_pids = {str(nodes[f"worker:{i}"]["pid"]) for i in range(workers)}
    assert len(worker_pids) == workers
    steps = ID_ROWS // BATCH
    assert result["steps_per_epoch"] == steps  # every row once: no padding, every worker a whole share
    assert result["chief_rows"] == 0  # the chief holds no share
    expected_ids = {str(3 * i + 1) for i in range(ID_ROWS)}
    for epoch, record in enumerate(result["epochs"]):
        assert record["batches"] == steps
        assert record["x_id_mismatch"] == 0  # features and labels decoded from the same record
        # A variable on the parameter server counted each id: every id of the DataFrame, each once per epoch.
        assert set(record["trained"]) == expected_ids
        assert set(record["trained"].values()) == {epoch + 1}
        # Every batch was trained on in a worker's process (none in the chief's), each batch by whichever
        # worker asked first (the tf.data service hands out every worker's share).
        assert set(record["batches_by_pid"]) <= worker_pids
        assert str(result["chief_pid"]) not in record["batches_by_pid"]
        assert sum(record["batches_by_pid"].values()) == steps
    for i in range(workers):
        assert "airflow-tfos-" in nodes[f"worker:{i}"]["cwd"]  # the worker ran in its node directory


def test_strings_ragged_arrays_and_sparse_vectors_reach_the_workers_steps_under_parameter_servers(two_workers):
    result = two_workers["results"]["mixed"]
    assert result["ids"] == list(range(MIXED_ROWS))  # every row, its values reduced on a worker
    for i, length, total, dot in zip(result["ids"], result["lengths"], result["sums"], result["dots"], strict=True):
        _, text, ragged, vector = mixed_row(i)  # worked out here, independently of the feed
        dense = vector if isinstance(vector, list) else [0.0] * MIXED_SIZE
        for index, value in zip(*(() if isinstance(vector, list) else vector), strict=True):
            dense[index] = value
        assert length == len(text.encode())
        assert total == pytest.approx(sum(ragged), rel=1e-6)
        assert dot == pytest.approx(sum((k + 1) * v for k, v in enumerate(dense)), rel=1e-6)


def test_the_workers_train_every_fed_id_once_per_epoch_from_their_own_processes(two_workers):
    _check_ids_counted(two_workers, 2)


def test_workers_read_their_own_files_every_id_once_per_epoch_in_tensorflow_mode(two_workers):
    result = two_workers["results"]["count_file_ids"]
    nodes = read_records(str(two_workers["run_dir"] / "count_file_ids"), "node")
    worker_pids = [str(nodes[f"worker:{i}"]["pid"]) for i in range(2)]
    # The files dealt over the two workers (the chief gets none), each file to one worker.
    shares = [[int(name.rsplit("part-", 1)[1].split(".")[0]) for name in share] for share in result["shares"]]
    assert sorted(shares[0] + shares[1]) == list(range(len(FILE_ROWS))) and all(shares)
    rows = [sum(FILE_ROWS[part] for part in share) for share in shares]
    assert rows[0] != rows[1]  # uneven shares, neither a whole number of batches
    steps = [-(-r // FILE_BATCH) for r in rows]
    assert result["steps_by_worker"] == steps and result["steps_per_epoch"] == sum(steps)
    expected_ids = {str(3 * i + 1) for i in range(sum(FILE_ROWS))}
    for epoch, record in enumerate(result["epochs"]):
        assert record["batches"] == sum(steps) and record["x_id_mismatch"] == 0
        # Every id of the files trained on once per epoch (a count in a variable on the parameter server)...
        assert set(record["trained"]) == expected_ids
        assert set(record["trained"].values()) == {epoch + 1}
        # ...trained on in the workers' processes, none in the chief's.
        assert set(record["batches_by_pid"]) <= set(worker_pids)
        assert sum(record["batches_by_pid"].values()) == sum(steps)
        assert str(result["chief_pid"]) not in record["batches_by_pid"]


def test_keras_fit_with_validation_data_converges_under_parameter_servers(two_workers):
    result = two_workers["results"]["keras"]
    # y = 3 a - 2 b + 1, fed from Spark to the workers only.
    assert result["kernel"] == pytest.approx([3.0, -2.0], abs=0.05)
    assert result["bias"] == pytest.approx([1.0], abs=0.05)
    assert result["loss"][-1] < result["loss"][0] / 100
    assert len(result["val_loss"]) == 6 and result["val_loss"][-1] < 1e-3
    assert result["validation_steps"] >= 20 and result["steps_per_epoch"] >= 124


def test_keras_fit_on_files_read_by_the_workers_converges(two_workers):
    result = two_workers["results"]["keras_files"]
    # y = 3 a - 2 b + 1 in TFRecord files of 200, 250, 300 and 350 rows, read by the workers only in batches
    # of 32: 550 rows each, 18 batches, the last one short
    assert result["steps_per_epoch"] == 36
    assert result["kernel"] == pytest.approx([3.0, -2.0], abs=0.05)
    assert result["bias"] == pytest.approx([1.0], abs=0.05)
    assert result["loss"][-1] < result["loss"][0] / 100


def test_the_run_ends_within_seconds_of_the_chief_returning(two_workers):
    ended_after = {name: result["ended_after"] for name, result in two_workers["results"].items()}
    assert ended_after and all(value < END_WITHIN for value in ended_after.values()), ended_after
