"""On the drills' real Airflow stack: a deferred checkpoint sensor on a run directory on a Kerberized HDFS is
served by the stack's own triggerer process, which logs in from the ``webhdfs`` connection's keytab (the
components have the session KDC's settings and no ticket cache). The checkpoint is written by another
principal, so every request the emulator sees from alice while the task is deferred is the trigger's."""

from __future__ import annotations

import pytest

from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage.kerberos import KerberosLogin
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from tests.drills.stack import AirflowStack, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.drills]

DAG_ID, TASK_ID, RUN_ID = "tfos_drill_kerberos_sensor", "wait_for_checkpoint", "kerberos_triggerer"


def test_the_triggerer_reads_a_kerberized_run_directory_with_the_connections_keytab(stack: AirflowStack, kdc, krb_hdfs):
    alice = kdc.principal("alice")
    stack.trigger(DAG_ID, "2026-03-01T00:00:00+00:00", RUN_ID)
    wait_for(
        lambda: stack.task_instance(DAG_ID, RUN_ID, TASK_ID)["state"] == "deferred",
        timeout=180,
        what="the sensor to defer",
        state=lambda: f"task state {stack.task_instance(DAG_ID, RUN_ID, TASK_ID)['state']}",
    )
    # What the triggerer holds in the database names the connection, not the keytab.
    assert kdc.alice_keytab.encode() not in (stack.home / "airflow.db").read_bytes()
    stack.wait_deferral_processed(DAG_ID, RUN_ID, TASK_ID)
    krb_hdfs.kerberos.principals.clear()
    wait_for(lambda: alice in krb_hdfs.kerberos.principals, timeout=60, what="the trigger's first poll")

    bob = KerberosLogin(kdc.principal("bob"), kdc.user_keytab("bob"))
    writer = RunDir(
        stack.env["TFOS_DRILL_KRB_RUN_DIR"],
        storage=WebHDFSStorage(krb_hdfs.config(user=None, auth="kerberos"), login=bob),
    )
    writer.publish_checkpoint(writer.checkpoint_staging(3), 3)
    run = stack.wait_run_ended(DAG_ID, RUN_ID, timeout=120)
    if run["state"] != "success":  # the task's own log last: the end of a long message is what is shown
        logs = [stack.task_log(DAG_ID, RUN_ID, TASK_ID, t["try_number"]) for t in stack.tries(DAG_ID, RUN_ID, TASK_ID)]
        pytest.fail(f"{run['state']}\n{stack.tails(40)}\n--- task log ---\n" + "\n".join(logs))
    assert stack.xcom(DAG_ID, RUN_ID, TASK_ID, "return_value")["step"] == 3
    assert (try_ := stack.tries(DAG_ID, RUN_ID, TASK_ID)[-1])["try_number"] == 1, try_  # resumed, not retried
    log = stack.task_log(DAG_ID, RUN_ID, TASK_ID, 1)
    assert kdc.alice_keytab not in log
