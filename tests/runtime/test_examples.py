"""The shipped digits example trains to a useful accuracy on 2 TF workers (what the demo runs)."""

from __future__ import annotations

import pytest

from airflow_tfos.runtime import run
from airflow_tfos.runtime.examples.digits import DigitsArgs, main_fun

pytestmark = pytest.mark.integration


def test_digits_on_two_workers_reaches_high_test_accuracy(sc):
    result = run(sc, main_fun, DigitsArgs(epochs=12), num_nodes=2, timeout=600)
    assert result["workers"] == 2
    assert result["train_examples"] == 1437
    assert result["test_accuracy"] >= 0.93, result
