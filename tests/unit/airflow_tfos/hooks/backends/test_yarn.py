"""What a failed spark-submit to YARN says first."""

from __future__ import annotations

from airflow_tfos.hooks.backends.yarn import submit_failure

PROVIDER = "Cannot execute: spark-submit --master yarn --conf spark.yarn.queue=nightly app.py. Error code is: 1."


def test_the_exception_that_ended_spark_submit_comes_first():
    output = (
        f"{PROVIDER}\nLast spark-submit output:\n"
        "26/11/27 22:30:01 WARN Client: Neither spark.yarn.jars nor spark.yarn.archive is set\n"
        'Exception in thread "main" org.apache.hadoop.yarn.exceptions.YarnException: Failed to submit '
        "application_1_0003 to YARN : Application application_1_0003 submitted by user etl to unknown queue: nightly\n"
        "\tat org.apache.hadoop.yarn.client.api.impl.YarnClientImpl.submitApplication(YarnClientImpl.java:336)\n"
        "Caused by: org.apache.hadoop.ipc.RemoteException(java.io.IOException): nested\n"
    )
    first, rest = submit_failure(output).split("\n", 1)
    assert first.endswith("submitted by user etl to unknown queue: nightly")
    assert first.startswith("Failed to submit application_1_0003 to YARN")
    assert rest == output  # nothing of spark-submit's own account is lost


def test_without_a_java_exception_the_message_stays_as_it_is():
    assert submit_failure(PROVIDER) == PROVIDER
