"""The run's WebHDFS delegation token beyond the training nodes, on a Kerberized HDFS (the WebHDFS emulator with
SPNEGO, a real MIT KDC): batch inference's executors fetch a model, TFoS ``inference()`` nodes read a file, and
TensorBoard mirrors a log directory, none of them with a Kerberos login; the token is cancelled at the end and
is in no log and no file of the run directory."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import pytest

from airflow_tfos.runtime.compat import TFCluster
from airflow_tfos.runtime.driver.entry import run_inference_job
from airflow_tfos.shared.spec import RunSpec
from airflow_tfos.shared.storage import kerberos, storage_for
from airflow_tfos.shared.storage.webhdfs_client import clear_cached_storages
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from tests.conftest import write_linear_parquet
from tests.integration.kerberos.test_run_dir import _executor_logs, _secrets_in
from tests.integration.spark.test_remote_predict import publish_linear_model
from tests.integration.spark.test_remote_tensorboard import scalars, wait_for_training, write_losses

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def krb_emu(kdc):
    """A Kerberized WebHDFS emulator whose tokens live 2 s (so they must be renewed), for this module."""
    with WebHDFSEmulator(kerberos_keytab=kdc.http_keytab, token_renew_interval=2.0) as emu:
        yield emu


@pytest.fixture
def driver_login(kdc, krb_emu, monkeypatch):
    """This process (the driver) logs in from alice's keytab, in memory; the executors have no ticket."""
    assert not Path(f"/tmp/krb5cc_{os.getuid()}").exists()  # no default ticket cache the executors could use
    monkeypatch.setenv(WEBHDFS_ENV, krb_emu.config(user=None, auth="kerberos", retries=1).to_json())
    clear_cached_storages()
    kerberos.set_default_login(kerberos.KerberosLogin(kdc.principal("alice"), kdc.alice_keytab))
    krb_emu.requests.clear()
    krb_emu.kerberos.authenticated.clear()
    yield
    kerberos.set_default_login(None)
    kerberos.use_delegation_token(None)
    clear_cached_storages()


def _cancelled(emu, token: str) -> bool:
    """Whether the namenode refuses ``token`` as unknown (cancelled), not merely expired."""
    try:
        emu.tokens.verify(token)
    except Exception as exc:
        return "not known" in str(exc)
    return False


def _by_token(emu, under: str) -> set[tuple[str, str]]:
    return {(user, via) for _, _, path, user, via in emu.kerberos.authenticated if path.startswith(under)}


def _no_secret_anywhere(sc, emu, kdc, caplog, *local_dirs: Path) -> None:
    secrets = [*emu.tokens.issued, kdc.alice_keytab]
    assert emu.tokens.issued
    files = {
        str(p): p.read_bytes().decode("latin-1")
        for d in (Path(emu.local_path("/")), *local_dirs)
        for p in d.rglob("*")
        if p.is_file() and p.stat().st_size < 10_000_000
    }
    logs = {str(p): p.read_text(errors="replace") for p in _executor_logs(sc)}
    assert _secrets_in({**files, **logs, "driver log": caplog.text}, secrets) == []


def test_batch_inference_executors_fetch_a_kerberized_model_with_the_runs_token(
    spark, kdc, krb_emu, driver_login, tmp_path, monkeypatch, caplog
):
    # The driver's own copy of the model goes to a cache of this test, so the executors fetch theirs.
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "driver-tmp"))
    os.mkdir(tmp_path / "driver-tmp")
    publish_linear_model(tmp_path / "model", "hdfs://ns/models/linear", (3.0, -2.0), 1.0)
    data = write_linear_parquet(tmp_path / "data", seed=5, parts=1, rows=150)
    spec = RunSpec(
        kind="inference",
        num_nodes=1,
        data={"format": "parquet", "path": data},
        inference={"model_path": "hdfs://ns/models/linear", "features": ["x"], "output_path": str(tmp_path / "out")},
    )
    krb_emu.kerberos.authenticated.clear()
    before = len(krb_emu.tokens.requested)
    with caplog.at_level(logging.INFO):
        result = run_inference_job(spark, spec)
    assert result["rows"] == 150
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert len(rows) == 150
    for row in rows:  # the model's y = 3 x0 - 2 x1 + 1 is the data's own y
        assert row["prediction"] == pytest.approx(row["y"], abs=1e-4)
    # The executors (the only holders of the token) read the model as alice through the token.
    assert ("alice", "token") in _by_token(krb_emu, "/models/linear/variables")
    (token,) = krb_emu.tokens.requested[before:]
    assert _cancelled(krb_emu, token)  # once the predictions were written
    _no_secret_anywhere(spark.sparkContext, krb_emu, kdc, caplog, tmp_path / "out")


def scale_rows(args, ctx):
    """TFoS inference: multiply each fed number by a factor read from HDFS (by a node without a ticket)."""
    from airflow_tfos.runtime.compat import TFNode
    from airflow_tfos.shared.storage import storage_for

    factor = json.loads(storage_for(args["factor"]).read_bytes(args["factor"]))["factor"]
    feed = TFNode.DataFeed(ctx.mgr, train_mode=False)
    while not feed.should_stop():
        batch = feed.next_batch(16)
        if len(batch) > 0:
            feed.batch_results([factor * x for x in batch])


def test_tfos_inference_nodes_and_tensorboard_read_kerberized_hdfs_with_the_runs_token(
    sc, kdc, krb_emu, driver_login, tmp_path, caplog
):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    factor = "hdfs://ns/params/factor.json"
    storage_for(factor).write_bytes(factor, json.dumps({"factor": 7}).encode())
    krb_emu.kerberos.authenticated.clear()
    before = len(krb_emu.tokens.requested)
    with caplog.at_level(logging.INFO):
        cluster = TFCluster.run(sc, scale_rows, {"factor": factor}, 2, 0, False, TFCluster.InputMode.SPARK)
        scored = cluster.inference(sc.parallelize(range(40), 2)).collect()
        cluster.shutdown()
    assert scored == [7 * x for x in range(40)]
    assert _by_token(krb_emu, "/params/") == {("alice", "token")}  # only the nodes read it
    (token,) = krb_emu.tokens.requested[before:]
    assert _cancelled(krb_emu, token)  # by shutdown()

    # TensorBoard beside the chief mirrors a log directory on the Kerberized HDFS, with its own token.
    import tensorflow as tf

    log_dir = "hdfs://ns/user/trainer/logs"
    stop_file = tmp_path / "stop"
    with caplog.at_level(logging.INFO):
        cluster = TFCluster.run(
            sc,
            wait_for_training,
            {"stop_file": str(stop_file)},
            2,
            0,
            tensorboard=True,
            master_node="chief",
            log_dir=log_dir,
        )
        try:
            url = cluster.tensorboard_url()
            writer = tf.summary.create_file_writer(str(tmp_path / "events" / "train"))
            write_losses(writer, range(3))
            storage_for(log_dir).put_dir(str(tmp_path / "events"), log_dir)  # the driver's Kerberos login
            krb_emu.kerberos.authenticated.clear()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(scalars(url, "train", "loss")) < 3:
                time.sleep(0.5)
            assert scalars(url, "train", "loss") == [(s, pytest.approx(1.0 / (s + 1))) for s in range(3)]
            assert _by_token(krb_emu, "/user/trainer/logs") == {("alice", "token")}  # TensorBoard's reads
        finally:
            stop_file.touch()
            cluster.shutdown(timeout=120)
    (second,) = krb_emu.tokens.requested[before + 1 :]
    assert _cancelled(krb_emu, second) and krb_emu.tokens.renewals.get(second, 0) >= 1
    _no_secret_anywhere(sc, krb_emu, kdc, caplog, Path(cluster._run.run_dir))
