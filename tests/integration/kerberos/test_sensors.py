"""The Airflow side on Kerberized emulators and a real MIT KDC: a deferred checkpoint sensor whose trigger reads
the run directory with the webhdfs connection's keytab, and the same sensor without a login (a clear error,
fast, no fallback to simple authentication)."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_tfos.sensors import TFoSCheckpointSensor
from airflow_tfos.shared.errors import KerberosAuthError, RunDirError
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage.kerberos import KerberosLogin
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from tests.support.fakes import make_context
from tests.unit.airflow_tfos.sensors.test_tfos import first_event, roundtrip


@pytest.fixture(scope="module")
def hdfs(kdc):
    with WebHDFSEmulator(kerberos_keytab=kdc.http_keytab) as emulator:
        yield emulator


def connect(monkeypatch, conn_id: str, emu: WebHDFSEmulator, **extra) -> None:
    port = int(emu.url.rsplit(":", 1)[1])
    conn = {"conn_type": "webhdfs", "host": "127.0.0.1", "port": port, "extra": {"auth": "kerberos", **extra}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def test_a_deferred_checkpoint_sensor_reads_a_kerberized_run_directory_with_the_connections_keytab(
    hdfs, kdc, monkeypatch
):
    connect(monkeypatch, "webhdfs_krb", hdfs, principal="alice@TFOS.TEST", keytab=kdc.alice_keytab)
    run_dir = hdfs.uri("/runs/sensed")
    writer = RunDir(
        run_dir,
        storage=WebHDFSStorage(
            hdfs.config(user=None, auth="kerberos"), login=KerberosLogin("alice@TFOS.TEST", kdc.alice_keytab)
        ),
    )
    sensor = TFoSCheckpointSensor(
        task_id="c", run_dir=run_dir, webhdfs_conn_id="webhdfs_krb", min_step=3, deferrable=True, poke_interval=0.05
    )
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(make_context("c"))
    trigger = roundtrip(deferred.value.trigger)  # what the triggerer rebuilds: no keytab in its arguments
    assert kdc.alice_keytab not in json.dumps(trigger.serialize()[1], default=str)

    async def publish_then_wait():
        task = asyncio.ensure_future(first_event(trigger, timeout=30))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(lambda: writer.publish_checkpoint(writer.checkpoint_staging(3), 3))
        return await task

    hdfs.kerberos.principals.clear()
    event = asyncio.run(publish_then_wait())
    assert sensor.execute_complete(make_context("c"), event)["step"] == 3
    assert set(hdfs.kerberos.principals) == {"alice@TFOS.TEST"}


def test_a_sensor_without_a_login_fails_at_once_naming_the_fix(hdfs, monkeypatch):
    connect(monkeypatch, "webhdfs_nologin", hdfs)  # auth kerberos, no keytab, and the ticket cache is empty
    sensor = TFoSCheckpointSensor(task_id="c", run_dir=hdfs.uri("/runs/sensed"), webhdfs_conn_id="webhdfs_nologin")
    hdfs.requests.clear()
    started = time.monotonic()
    with pytest.raises(RunDirError) as failure:  # the run directory's error: its cause first, then the path
        sensor.poke(make_context("c"))
    assert isinstance(failure.value.__cause__, KerberosAuthError)
    assert re.match(r"no Kerberos ticket for .*\(cannot read \S+manifest.json\)$", str(failure.value))
    assert "HTTP/127.0.0.1" in str(failure.value) and "'principal' and 'keytab'" in str(failure.value)
    assert time.monotonic() - started < 5 and not hdfs.requests


def test_the_webhdfs_connection_test_logs_in_from_the_keytab_and_names_a_missing_login(hdfs, kdc, monkeypatch):
    from airflow_tfos.hooks.webhdfs_connection import WebHDFSAccessHook

    connect(monkeypatch, "webhdfs_ok", hdfs, principal="alice@TFOS.TEST", keytab=kdc.alice_keytab)
    ok, message = WebHDFSAccessHook("webhdfs_ok").test_connection()
    assert ok and message.startswith(f"active namenode {hdfs.url}: / lists"), message
    connect(monkeypatch, "webhdfs_none", hdfs)
    ok, message = WebHDFSAccessHook("webhdfs_none").test_connection()
    assert not ok and "no Kerberos ticket for the principal of the ticket cache" in message


def test_the_drivers_token_goes_sealed_to_the_trigger_and_a_kill_cancels_it(hdfs, kdc, monkeypatch):
    from airflow.models.crypto import get_fernet
    from cryptography.fernet import Fernet

    from airflow_tfos.hooks.tfos import TFoSHook
    from airflow_tfos.triggers.tfos import TFoSApplicationTrigger

    connect(monkeypatch, "webhdfs_krb", hdfs, principal="alice@TFOS.TEST", keytab=kdc.alice_keytab)
    run_dir = hdfs.uri("/runs/killed")

    def cancelled(token: str) -> bool:
        with pytest.raises(Exception, match="not known"):
            hdfs.tokens.verify(token)
        return True

    try:
        # No Fernet key: the token would be stored in clear with the trigger's arguments; the hook keeps it.
        monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "")
        get_fernet.cache_clear()
        hook = TFoSHook(webhdfs_conn_id="webhdfs_krb")
        first = hook._obtain_driver_token(run_dir, "tfos killed")
        assert first and hook.hand_off_driver_token() is None and hook.holds_driver_token
        hook.end_driver_token()  # what the operator does when the task ends or is killed in the worker
        assert cancelled(first) and not hook.holds_driver_token

        monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", Fernet.generate_key().decode())
        get_fernet.cache_clear()
        token = hook._obtain_driver_token(run_dir, "tfos killed")
        sealed = hook.hand_off_driver_token()
        assert sealed and token not in sealed and not hook.holds_driver_token
        trigger = roundtrip(
            TFoSApplicationTrigger(
                application_id="application_1_1", run_dir=run_dir, webhdfs_conn_id="webhdfs_krb", webhdfs_token=sealed
            )
        )
        assert token not in json.dumps(trigger.serialize()[1]) and token not in repr(trigger)
        assert hdfs.tokens.is_live(token)  # handed off, not cancelled
        asyncio.run(trigger.on_kill())  # the deferred task was killed
        assert cancelled(token)
    finally:
        get_fernet.cache_clear()
