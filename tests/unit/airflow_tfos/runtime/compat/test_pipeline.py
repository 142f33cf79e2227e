"""TensorFlowOnSpark's pipeline module (TFEstimator, TFModel) without Spark: arguments and what it refuses. On the
local cluster: tests/integration/spark/test_compat_pipeline.py."""

from __future__ import annotations

import argparse

import pytest

from airflow_tfos.runtime.compat import TFCluster
from airflow_tfos.runtime.compat.pipeline import Namespace, TFEstimator


def test_args_merge_the_params_and_an_argv_list_stays_as_is():
    estimator = TFEstimator(lambda args, ctx: None, argparse.Namespace(lr=0.1, epochs=9)).setEpochs(3)
    merged = estimator.merge_args_params()
    assert merged.lr == 0.1 and merged.epochs == 3 and merged.batch_size == 100 and merged.master_node == "chief"
    assert estimator.args.epochs == 9  # the stage's own args are not changed
    assert Namespace(["--lr", "0.1"]) == ["--lr", "0.1"] and list(Namespace({"a": 1})) == ["a"]
    with pytest.raises(TypeError, match="tf_args must be a dict, a list.*got int"):
        Namespace(3)


def test_what_tfos_pipeline_refused_is_refused_naming_it():
    estimator = TFEstimator(lambda args, ctx: None, {})
    with pytest.raises(ValueError, match="does not support InputMode.TENSORFLOW.*saveAsTFRecords"):
        estimator.setInputMode(TFCluster.InputMode.TENSORFLOW)
    with pytest.raises(ValueError, match="driver_ps_nodes=True is not supported"):
        estimator.setDriverPSNodes(True)
    with pytest.raises(ValueError, match="protocol 'rdma' is not supported"):
        estimator.setProtocol("rdma")
