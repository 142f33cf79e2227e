"""A run directory on a Kerberized HDFS (the WebHDFS emulator with SPNEGO, a real MIT KDC): the driver logs in
from a keytab, the TF nodes hold no Kerberos credentials and write checkpoints and the export with the
delegation token the driver handed them, through a forced recovery and many renewals of a token that lives
2 s; the token is cancelled at the end and is found in no file of the run directory and no log."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from airflow_tfos.runtime import run
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage import kerberos
from airflow_tfos.shared.storage.webhdfs_client import clear_cached_storages
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from tests.integration.kerberos.kerberos_programs import crash_once_after_a_checkpoint

ARGS = {"steps_per_epoch": 20, "every": 5, "progress": False, "epochs": 1, "sleep": 0.15}
RENEW_INTERVAL = 2.0


def _executor_logs(sc) -> list[Path]:
    """The stderr files of this application's executors (local-cluster keeps them under SPARK_HOME/work)."""
    import pyspark

    return sorted((Path(pyspark.__file__).parent / "work" / sc.applicationId).glob("*/stderr"))


def _secrets_in(texts: dict[str, str], secrets: list[str]) -> list[str]:
    return [f"{name}: {s[:6]}..." for name, text in texts.items() for s in secrets if s in text]


@pytest.mark.integration
def test_nodes_without_tickets_train_on_a_kerberized_run_dir_with_a_token(sc, kdc, monkeypatch, caplog):
    with WebHDFSEmulator(kerberos_keytab=kdc.http_keytab, token_renew_interval=RENEW_INTERVAL) as emu:
        monkeypatch.setenv(WEBHDFS_ENV, emu.config(user=None, auth="kerberos", retries=1).to_json())
        clear_cached_storages()
        # The driver (this process) logs in from the keytab, in memory; the node processes get no ticket
        # cache and no client keytab (MIT's KRB5_CLIENT_KTNAME), so SPNEGO cannot work there.
        kerberos.set_default_login(kerberos.KerberosLogin(kdc.principal("alice"), kdc.alice_keytab))

        no_credentials = {"KRB5CCNAME": "FILE:/nonexistent/ccache", "KRB5_CLIENT_KTNAME": "/nonexistent/keytab"}
        with caplog.at_level(logging.INFO):
            result = run(
                sc,
                crash_once_after_a_checkpoint,
                ARGS,
                num_nodes=2,
                run_dir="hdfs://ns/runs/k",
                env=no_credentials,
                timeout=300,
            )
        rundir = RunDir("hdfs://ns/runs/k")
        # Trained to the end through a recovery that restored a checkpoint, and exported.
        assert result["step"] == 20 and result["attempt"] == 1
        assert rundir.events("attempt_failed") and rundir.events("attempt_failed")[0]["retrying"]
        assert next(e["step"] for e in rundir.events("restore")) >= ARGS["every"]
        assert rundir.export_success()["step"] == 20
        assert os.path.exists(emu.local_path("/runs/k/export/saved_model.pb"))

        (token,) = emu.tokens.requested  # one token for the run, asked for by the driver
        assert emu.tokens.renewals.get(token, 0) >= 3  # kept alive well past its 2 s lifetime
        assert not emu.tokens.is_live(token)  # cancelled at the end
        # The nodes (only they write checkpoints) were authenticated by the run's token, as alice.
        checkpoint_calls = [r for r in emu.requests if r.server == "namenode0" and "/checkpoints/ckpt-" in r.path]
        assert checkpoint_calls and {r.query.get("delegation") for r in checkpoint_calls} == {token}
        how = {(user, via) for _, _, path, user, via in emu.kerberos.authenticated if "/checkpoints/ckpt-" in path}
        assert how == {("alice", "token")}

        # Neither the token (nor any token the namenode issued) nor the keytab's path is in a file of the
        # run directory, in the driver's log, or in the executors' logs (where the nodes' stderr goes).
        secrets = [*emu.tokens.issued, kdc.alice_keytab]
        files = {
            str(p): p.read_bytes().decode("latin-1") for p in Path(emu.local_path("/runs/k")).rglob("*") if p.is_file()
        }
        assert len(files) > 10
        logs = {str(p): p.read_text(errors="replace") for p in _executor_logs(sc)}
        assert sum("TF node" in text or "hdfs.client" in text for text in logs.values()) >= 2  # the nodes' logs
        assert _secrets_in({**files, **logs, "driver log": caplog.text}, secrets) == []
        assert "delegation token" in caplog.text  # the log says what happened, without the token


@pytest.fixture(autouse=True)
def _forget_logins():
    yield
    kerberos.set_default_login(None)
    kerberos.use_delegation_token(None)
    clear_cached_storages()
