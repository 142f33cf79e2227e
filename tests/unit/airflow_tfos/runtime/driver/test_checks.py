"""Unit tests of the driver's checks before a barrier stage is submitted."""

from __future__ import annotations

import pytest

from airflow_tfos.runtime.driver.checks import ClusterResources, check_cluster
from airflow_tfos.runtime.errors import ClusterConfigError


def resources(slots=4, executors=4, master="spark://m:7077", **conf):
    return ClusterResources(master=master, conf=conf, task_slots=slots, num_executors=executors)


def test_enough_slots_passes():
    check_cluster(resources(slots=3), 3)


def test_dynamic_allocation_is_refused_with_the_setting_named():
    with pytest.raises(ClusterConfigError, match="spark.dynamicAllocation.enabled must be false"):
        check_cluster(resources(**{"spark.dynamicAllocation.enabled": "true"}), 2)


def test_too_few_slots_names_what_to_raise():
    with pytest.raises(ClusterConfigError) as info:
        check_cluster(resources(slots=2, executors=2), 3)
    message = str(info.value)
    assert "3 TF nodes need 3 concurrent task slots" in message
    assert "offers 2 (2 executor(s)" in message
    assert "spark.executor.instances" in message


def test_local_master_is_described_as_such():
    with pytest.raises(ClusterConfigError, match=r"master local\[1\]"):
        check_cluster(resources(slots=1, master="local[1]"), 2)


def test_task_cpus_larger_than_executor_cores():
    conf = {"spark.task.cpus": "4", "spark.executor.cores": "2"}
    with pytest.raises(ClusterConfigError, match="spark.task.cpus=4 is larger than spark.executor.cores=2"):
        check_cluster(resources(**conf), 1)


def test_task_cpus_must_be_a_number():
    with pytest.raises(ClusterConfigError, match="spark.task.cpus='two' is not a number"):
        check_cluster(resources(**{"spark.task.cpus": "two"}), 1)


def test_gpus_requested_without_task_gpu_amount():
    with pytest.raises(ClusterConfigError, match="spark.task.resource.gpu.amount is not set"):
        check_cluster(resources(), 2, gpus_per_node=1)


def test_gpus_requested_above_task_gpu_amount():
    with pytest.raises(ClusterConfigError, match="raise spark.task.resource.gpu.amount"):
        check_cluster(resources(**{"spark.task.resource.gpu.amount": "1"}), 2, gpus_per_node=2)


def test_unknown_slot_count_is_not_an_error():
    check_cluster(ClusterResources(master="yarn", task_slots=None), 8)
