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
    # Each replica trains batch_size rows of its own shard a step (one pass over it an epoch), as on the fed
    # path: the shards of 1437 rows are 719 and 718 rows, 23 batches of 32 each (the last one short).
    assert distributed["steps_per_epoch"] == 23
    assert distributed["rows_per_replica"] == [[719, 718]] * EPOCHS, distributed["rows_per_replica"]
    assert single >= 0.93, single
    assert abs(distributed["test_accuracy"] - single) <= 0.01, (distributed["test_accuracy"], single)
