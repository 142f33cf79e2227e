"""What a training task says when its application failed before its driver recorded anything: the cluster's cause
first (YARN's diagnostics without their pointers to the UI), then where the logs are."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.operators.run import cluster_reason
from tests.support.fakes import FakeBackend, make_context, use_backend
from tests.unit.airflow_tfos.test_operators import train_op

#: A ResourceManager's diagnostics of an application whose packed environment could not be unpacked (a plain tar
#: named .tar.gz), as Hadoop 3.5's ResourceManager gave them in the Hadoop lab.
LOCALIZATION_FAILED = """Application application_1795855342964_0003 failed 1 times (global limit =2; local limit is \
=1) \
due to AM Container for appattempt_1795855342964_0003_000001 exited with  exitCode: -1000
Failing this attempt.Diagnostics: [2026-11-28 08:45:29.792]Failed to download resource { { hdfs://127.0.0.1:44417/envs/\
tfos-runtime.tar.gz, 1795855357599, ARCHIVE, null },pending,[(container_1795855342964_0003_01_000001)],62093806267059,\
DOWNLOADING} org.apache.hadoop.yarn.exceptions.YarnException: Download and unpack failed
For more detailed output, check the application tracking page: http://localhost:46835/cluster/app/application_17958553\
42964_0003 Then click on links to logs of each attempt.
. Failing the application."""


def test_the_cause_is_taken_from_yarns_diagnostics_without_the_pointers_to_its_ui():
    reason = cluster_reason(LOCALIZATION_FAILED)
    assert reason.startswith(
        "AM Container for appattempt_1795855342964_0003_000001 exited with exitCode: -1000; Failed to download "
        "resource { { hdfs://127.0.0.1:44417/envs/tfos-runtime.tar.gz,"
    )
    assert reason.endswith("YarnException: Download and unpack failed")
    assert "tracking page" not in reason and "Failing" not in reason and "08:45" not in reason


def test_the_local_backends_last_line_is_kept_and_a_long_cause_is_cut():
    assert cluster_reason("spark-submit exited 1\nError: no such file: /x.py\n") == "Error: no such file: /x.py"
    assert cluster_reason("") == ""
    assert len(cluster_reason("x" * 5000)) == 600


def test_a_failure_before_the_driver_recorded_anything_says_the_cause_and_where_the_logs_are(tmp_path):
    op = train_op(tmp_path / "run")
    backend = FakeBackend()
    use_backend(op, backend)
    backend.on_submit = lambda app_id: backend.script.__setitem__(
        app_id, [AppState(app_id, "FAILED", "FAILED", diagnostics=LOCALIZATION_FAILED)]
    )
    with pytest.raises(AirflowException) as caught:
        op.execute(make_context())
    message, (app_id,) = str(caught.value), [s["tag"] and a for a in backend.apps for s in backend.submitted]
    assert message.startswith(
        f"application {app_id} failed before its driver recorded an error: AM Container for "
        "appattempt_1795855342964_0003_000001 exited with exitCode: -1000; Failed to download resource"
    )
    assert message.endswith(
        f"(application {app_id} ended FAILED/FAILED; nothing in status.json); no checkpoint was published; its "
        f"containers' logs: yarn logs -applicationId {app_id}"
    )


#: What the ResourceManager said of the secure lab's application whose HDFS delegation token was cancelled while it
#: trained: Spark's application master reports the driver's exit status.
TOKEN_REFUSED_EXIT = "User application exited with status 3"


@pytest.mark.parametrize(
    ("diagnostics", "token"), [(TOKEN_REFUSED_EXIT, True), ("User application exited with status 1", False)]
)
def test_a_driver_that_exited_on_a_refused_token_is_named_as_such(tmp_path, diagnostics, token):
    op = train_op(tmp_path / "run")
    backend = FakeBackend()
    use_backend(op, backend)
    backend.on_submit = lambda app_id: backend.script.__setitem__(
        app_id, [AppState(app_id, "FINISHED", "FAILED", diagnostics=diagnostics)]
    )
    with pytest.raises(AirflowException) as caught:
        op.execute(make_context())
    message = str(caught.value)
    expected = "the run directory's HDFS refused the delegation token of application "
    assert message.startswith(expected) is token, message
    assert diagnostics in message
