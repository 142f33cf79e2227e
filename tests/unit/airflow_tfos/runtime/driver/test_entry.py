"""The driver entrypoint's checks of spec.json: a bad spec ends the driver process with exit 2 and the error in
status.json before Spark starts. On a real local cluster: tests/integration/spark/test_driver_entrypoint.py."""

from __future__ import annotations

import json

import pytest

from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import SpecError, parse_spec
from tests.support.helpers import run_driver


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"train_fn": "a.b:c", "num_nodes": 2, "epochs": 3}, "unknown field"),
        ({"num_nodes": 2}, "lacks required field"),
        ({"train_fn": "not-an-import-path", "num_nodes": 2}, "must look like 'package.module:function'"),
        ({"train_fn": "no_such_module_xyz:main", "num_nodes": 2}, "cannot import train_fn"),
        ({"train_fn": "tests.support.programs:nope", "num_nodes": 2}, "has no 'nope'"),
        (
            {
                "train_fn": "tests.support.programs:spec_training",
                "num_nodes": 2,
                "data": {"format": "parquet", "path": "/no/such/data"},
                "feed": {"features": ["x"], "lable": "y"},
            },
            "feed has unknown field(s): lable",
        ),
    ],
)
def test_a_bad_spec_fails_with_exit_2_and_the_error_in_status(tmp_path, spec, message):
    rundir = RunDir(str(tmp_path / "run"))
    rundir.write_spec(spec)
    done = run_driver(rundir.uri, timeout=120)
    assert done.returncode == 2
    assert message in done.stderr
    assert rundir.read_status()["state"] == "FAILED" and message in rundir.read_status()["error"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"train_fn": "a:b", "num_nodes": 0}, "num_nodes must be at least 1"),
        ({"train_fn": "a:b", "num_nodes": True}, "must be an integer"),
        ({"train_fn": "a:b", "num_nodes": 1, "input_mode": "PANDAS"}, "input_mode must be one of"),
        ({"train_fn": "a:b", "num_nodes": 1, "data": {"format": "parquet"}}, "needs 'path'"),
        ({"train_fn": "a:b", "num_nodes": 1, "data": {"format": "parquet", "path": "/x"}}, "needs 'feed'"),
    ],
)
def test_spec_checks_name_the_field(spec, message):
    with pytest.raises(SpecError, match=message):
        parse_spec(spec)


def test_spec_round_trips_as_json():
    spec = parse_spec(json.loads(json.dumps({"train_fn": "pkg.mod:main", "num_nodes": 3, "args": [1, 2]})))
    assert (spec.num_nodes, spec.args, spec.input_mode) == (3, [1, 2], "SPARK")


class _RefusingRunDir:
    """A run directory whose storage refuses the process's delegation token, as a NameNode words it."""

    def __init__(self, said: str) -> None:
        self.said = said

    def write_status(self, *args, **kwargs):
        raise PermissionError(13, self.said)

    add_event = write_status


def test_a_failure_that_cannot_be_recorded_for_a_refused_token_exits_with_status_3():
    from airflow_tfos.runtime.driver.entry import EXIT_FAILED, _fail

    refused = "HDFS refused the delegation token of this process at namenode http://nn:9870 (... can't be found)"
    assert _fail(_RefusingRunDir(refused), "the TF cluster failed", EXIT_FAILED) == 3
    assert _fail(_RefusingRunDir("HDFS is read-only"), "the TF cluster failed", EXIT_FAILED) == EXIT_FAILED
