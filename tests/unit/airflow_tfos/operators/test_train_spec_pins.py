"""The spec's JSON form and hash stay those of earlier releases for the same operator arguments.

A run directory written by an earlier release is recognised as the same request only if the operator
builds the very same spec.json for the same arguments: these hashes were computed by the release
before the spec became one object, and must never change.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_tfos.hooks.user_code import ShippedCode
from airflow_tfos.operators import TFoSInferenceOperator, TFoSLaunchClusterOperator, TFoSTrainOperator
from airflow_tfos.shared.spec import spec_hash

DATA = {"format": "parquet", "path": "/data/day"}
FEED = {"features": ["x"], "label": "y", "batch_size": 32}
COMMON = {"run_dir": "/tmp/pinned-run", "ship_code": False}


def spec_json(op) -> dict:
    return op.build_spec().to_json()


def train_full() -> TFoSTrainOperator:
    return TFoSTrainOperator(
        task_id="t",
        train_fn="pkg.mod:main_fun",
        args={"epochs": 2},
        num_workers=3,
        num_ps=1,
        master_node="master",
        eval_node=True,
        input_mode="SPARK",
        data=DATA,
        validation_data={"format": "parquet", "path": "/data/val"},
        feed=FEED,
        max_attempts=5,
        training_timeout=600,
        keras="tf_keras",
        gpus_per_node=1,
        env={"A": "1"},
        stop_grace_secs=30,
        warm_start="/models/prev",
        **COMMON,
    )


PINNED = {
    "train_defaults": (
        lambda: TFoSTrainOperator(task_id="t", train_fn="pkg.mod:main_fun", **COMMON),
        "6f5c542a6e0c66f1",
    ),
    "train_full": (train_full, "85d4e2aaffd5841f"),
    "launch_defaults": (
        lambda: TFoSLaunchClusterOperator(task_id="l", train_fn="pkg.mod:main_fun", **COMMON),
        "d70816d086f50576",
    ),
    "launch_without_idle_timeout": (
        lambda: TFoSLaunchClusterOperator(
            task_id="l", train_fn="pkg.mod:main_fun", idle_timeout=None, data=DATA, feed=FEED, **COMMON
        ),
        "c6aa4670349918cc",
    ),
    "inference_defaults": (
        lambda: TFoSInferenceOperator(
            task_id="s", model_path="/m", data=DATA, features=["x"], output_path="/out", **COMMON
        ),
        "4acb4c62b4ff0511",
    ),
    "inference_full": (
        lambda: TFoSInferenceOperator(
            task_id="s",
            model_path="/m",
            data=DATA,
            features=["x", "z"],
            output_path="/out",
            output_col="p",
            model_output="probs",
            batch_size=7,
            num_executors=3,
            env={"B": "2"},
            **COMMON,
        ),
        "0a88a13cdf115c4b",
    ),
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_spec_hash_of_the_same_arguments_never_changes(name):
    make, pinned = PINNED[name]
    assert spec_hash(spec_json(make())) == pinned


def test_the_json_form_of_a_training_spec_never_changes():
    assert spec_json(train_full()) == {
        "train_fn": "pkg.mod:main_fun",
        "args": {"epochs": 2},
        "num_nodes": 3,
        "num_ps": 1,
        "master_node": "master",
        "eval_node": True,
        "input_mode": "SPARK",
        "data": DATA,
        "validation_data": {"format": "parquet", "path": "/data/val"},
        "feed": FEED,
        "max_attempts": 5,
        "timeout": 600,
        "keras": "tf_keras",
        "gpus_per_node": 1,
        "env": {"A": "1"},
        "stop_grace_secs": 30,
        "warm_start": "/models/prev",
    }


def test_the_shipped_code_is_part_of_the_pinned_spec():
    op = TFoSTrainOperator(task_id="t", train_fn="pkg.mod:main_fun", run_dir="/tmp/pinned-run")
    op.__dict__["user_code"] = ShippedCode(Path("/tmp/code-abc.zip"), "abc123", ("pkg",), 10)
    spec = spec_json(op)
    assert spec["code"] == {"packages": ["pkg"], "hash": "abc123"}
    assert spec_hash(spec) == "bfe9e67fff9cd3b7"


def test_every_spec_field_but_the_derived_ones_is_an_argument_of_the_training_operators():
    import inspect

    from airflow_tfos.operators.application import _TFoSApplicationOperator
    from airflow_tfos.operators.train import SPEC_ARGUMENTS, spec_arguments

    accepted = set()
    for operator in (_TFoSApplicationOperator, TFoSTrainOperator, TFoSLaunchClusterOperator):
        accepted |= set(inspect.signature(operator.__init__).parameters)
    accepted |= {"kind", "serve"}  # the operator class says these
    missing = {SPEC_ARGUMENTS.get(name, name) for name in spec_arguments()} - accepted
    assert not missing, f"spec fields no operator argument sets: {missing}"


def test_an_empty_warm_start_asks_for_the_same_run_as_none():
    """What an upstream task returns on the first night ("": no model in service yet) is no warm start."""
    empty = TFoSTrainOperator(task_id="t", train_fn="pkg.mod:main_fun", warm_start="", **COMMON)
    assert spec_json(empty)["warm_start"] is None
    assert spec_hash(spec_json(empty)) == PINNED["train_defaults"][1]
