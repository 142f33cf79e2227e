"""The shipped digits example: 2-worker training is as good as one process (what the demo runs)."""

from __future__ import annotations

import sys

import pytest

from airflow_tfos.runtime import run
from airflow_tfos.runtime.examples.digits import DigitsArgs, main_fun, train_single_process

pytestmark = pytest.mark.integration

EPOCHS = 20


def test_two_workers_reach_the_accuracy_of_one_process_within_one_point(sc):
    """Same model, same data, same epochs: MultiWorkerMirroredStrategy on 2 workers vs. plain Keras."""
    distributed = run(sc, main_fun, DigitsArgs(epochs=EPOCHS), num_nodes=2, timeout=600)
    single = train_single_process(DigitsArgs(epochs=EPOCHS))
    sys.stdout.write(f"test accuracy: 2 workers {distributed['test_accuracy']:.4f}, one process {single:.4f}\n")
    assert distributed["workers"] == 2
    assert distributed["train_examples"] == 1437
    assert single >= 0.93, single
    assert abs(distributed["test_accuracy"] - single) <= 0.01, (distributed["test_accuracy"], single)
