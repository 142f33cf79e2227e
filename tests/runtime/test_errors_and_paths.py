"""Unit tests: node failures survive the trip through Spark's error text; TFoS path rules."""

from __future__ import annotations

import getpass

import pytest

from airflow_tfos.runtime.errors import NodeFailure, decode_node_failure
from airflow_tfos.runtime.program.paths import absolute_path


def test_node_failure_is_decoded_from_a_wrapped_java_message():
    failure = NodeFailure("worker", 1, 2, "10.0.0.5", "ValueError: bad", 'Traceback...\n  File "x", line 1\n')
    spark_text = (
        "An error occurred while calling o42.collect.\n: org.apache.spark.SparkException: Job aborted ...\n"
        f"org.apache.spark.api.python.PythonException: RuntimeError: {failure.encode()}\n\tat org.apache..."
    )
    assert decode_node_failure(Exception(spark_text)) == failure


def test_no_marker_no_failure():
    assert decode_node_failure(Exception("executor lost")) is None


def test_failure_description_names_role_index_and_host():
    text = NodeFailure("ps", 0, 0, "h", "process killed by SIGKILL").describe()
    assert text.startswith("TF node ps:0 (executor_id 0, host h) failed: process killed by SIGKILL")


@pytest.mark.parametrize(
    ("path", "default_fs", "expected"),
    [
        ("hdfs://nn:8020/a", "file://", "hdfs://nn:8020/a"),
        ("file:///x/y", "hdfs://nn:8020", "file:///x/y"),
        ("/data/set", "hdfs://nn:8020", "hdfs://nn:8020/data/set"),
        ("/data/set", "file://", "file:///data/set"),
        ("models/m1", "file://", "file:///home/me/job/models/m1"),
        ("models/m1", "hdfs://nn:8020", f"hdfs://nn:8020/user/{getpass.getuser()}/models/m1"),
        ("models/m1", "hdfs://", f"hdfs:///user/{getpass.getuser()}/models/m1"),  # as TFoS, not hdfs:/user
        ("/data/set", "viewfs://", "viewfs:///data/set"),
    ],
)
def test_absolute_path_follows_tfos_rules(path, default_fs, expected):
    assert absolute_path(path, default_fs=default_fs, working_dir="/home/me/job") == expected
