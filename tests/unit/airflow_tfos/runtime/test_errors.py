"""Node failures survive the trip through Spark's error text."""

from __future__ import annotations

from airflow_tfos.runtime.errors import NodeFailure, decode_node_failure


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
