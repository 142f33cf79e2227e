"""Unit tests of the pure cluster layout: roles, cluster spec, TF_CONFIG, GPU and Keras settings."""

from __future__ import annotations

import json

import pytest

from airflow_tfos.runtime.errors import ClusterConfigError
from airflow_tfos.runtime.node.cluster import (
    NodeRole,
    build_cluster_spec,
    build_tf_config,
    decider_ids,
    gpu_env,
    keras_env,
    num_training_nodes,
    plan_roles,
    result_node,
)


def labels(roles):
    return [r.label for r in roles]


class TestPlanRoles:
    def test_ps_first_then_chief_evaluator_workers(self):
        roles = plan_roles(6, num_ps=2, master_node="chief", eval_node=True)
        assert labels(roles) == ["ps:0", "ps:1", "chief:0", "evaluator:0", "worker:0", "worker:1"]
        assert [r.executor_id for r in roles] == list(range(6))

    def test_plain_workers_without_master(self):
        assert labels(plan_roles(3, master_node=None)) == ["worker:0", "worker:1", "worker:2"]

    def test_master_name_is_kept(self):
        assert labels(plan_roles(2, master_node="master")) == ["master:0", "worker:0"]

    def test_chief_alone(self):
        assert labels(plan_roles(1)) == ["chief:0"]

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"num_nodes": 0}, "num_nodes must be a positive integer"),
            ({"num_nodes": 2, "num_ps": -1}, "num_ps must be a non-negative integer"),
            ({"num_nodes": 2, "master_node": "boss"}, "master_node must be 'chief', 'master' or None"),
            ({"num_nodes": 2, "num_ps": 2}, "at least 3 nodes are needed"),
            ({"num_nodes": 1, "num_ps": 1, "master_node": None}, "at least 2 nodes are needed"),
        ],
    )
    def test_impossible_layouts_name_the_setting(self, kwargs, message):
        num_nodes = kwargs.pop("num_nodes")
        with pytest.raises(ClusterConfigError, match=message):
            plan_roles(num_nodes, **kwargs)


def test_cluster_spec_groups_endpoints_by_job_in_task_order():
    roles = plan_roles(4, num_ps=1)
    spec = build_cluster_spec(roles, ["h0:1", "h1:2", "h2:3", "h3:4"])
    assert spec == {"ps": ["h0:1"], "chief": ["h1:2"], "worker": ["h2:3", "h3:4"]}


def test_cluster_spec_needs_one_endpoint_per_role():
    with pytest.raises(ValueError, match="2 roles but 1 endpoints"):
        build_cluster_spec(plan_roles(2), ["h:1"])


def test_tf_config_names_the_task_and_the_whole_cluster():
    spec = {"chief": ["a:1"], "worker": ["b:2", "c:3"], "evaluator": ["d:4"]}
    config = json.loads(build_tf_config(spec, NodeRole(3, "worker", 1)))
    assert config["task"] == {"type": "worker", "index": 1}
    assert config["cluster"] == spec
    assert config["environment"] == "cloud"


def test_num_training_nodes_excludes_ps_and_evaluator():
    assert num_training_nodes(plan_roles(5, num_ps=1, eval_node=True)) == 3


class TestResultNode:
    def test_chief_when_present(self):
        assert result_node(plan_roles(3, num_ps=1)).label == "chief:0"

    def test_worker_zero_without_chief(self):
        assert result_node(plan_roles(3, num_ps=1, master_node=None)).label == "worker:0"


class TestDeciders:
    def test_without_ps_every_training_node_decides(self):
        roles = plan_roles(4, eval_node=True)
        assert decider_ids(roles) == {0, 2, 3}  # chief and two workers, not the evaluator

    def test_with_ps_and_chief_only_the_chief_decides(self):
        roles = plan_roles(4, num_ps=1)
        assert decider_ids(roles) == {1}

    def test_with_ps_and_no_chief_the_workers_decide(self):
        roles = plan_roles(3, num_ps=1, master_node=None)
        assert decider_ids(roles) == {1, 2}


class TestGpuEnv:
    def test_assigned_gpus_become_visible_devices(self):
        assert gpu_env(["2", "3"], 0, "chief:0") == {"CUDA_VISIBLE_DEVICES": "2,3"}

    def test_only_the_requested_number_is_used(self):
        assert gpu_env(["2", "3"], 1, "chief:0") == {"CUDA_VISIBLE_DEVICES": "2"}

    def test_nothing_assigned_nothing_requested_leaves_env_alone(self):
        assert gpu_env([], 0, "chief:0") == {}

    def test_requested_but_not_assigned_is_a_clear_error(self):
        with pytest.raises(ClusterConfigError, match=r"worker:1 asked for 1 GPU\(s\) but Spark assigned 0"):
            gpu_env([], 1, "worker:1")


class TestKerasEnv:
    def test_auto_prefers_tf_keras(self):
        assert keras_env("auto", True) == {"TF_USE_LEGACY_KERAS": "1"}

    def test_auto_falls_back_to_keras3(self):
        assert keras_env("auto", False) == {"TF_USE_LEGACY_KERAS": "0"}

    def test_keras3_on_request(self):
        assert keras_env("keras3", True) == {"TF_USE_LEGACY_KERAS": "0"}

    def test_tf_keras_missing_names_the_package(self):
        with pytest.raises(ClusterConfigError, match="pip install tf-keras"):
            keras_env("tf_keras", False)


def test_training_rank_puts_the_chief_first_and_skips_service_nodes():
    from airflow_tfos.runtime.program.context import NodeContext

    spec = {"ps": ["a:1"], "chief": ["b:1"], "worker": ["c:1", "d:1"]}

    def ctx(job, index):
        return NodeContext(0, job, index, spec, num_workers=3, num_nodes=4, host="h", port=1)

    assert [
        ctx("chief", 0).training_rank,
        ctx("worker", 0).training_rank,
        ctx("worker", 1).training_rank,
    ] == [0, 1, 2]
    assert ctx("ps", 0).training_rank is None
    plain = NodeContext(0, "worker", 1, {"worker": ["a:1", "b:1"]}, num_workers=2, num_nodes=2, host="h", port=1)
    assert plain.training_rank == 1 and not plain.is_chief
