"""WebHDFSStorage against the emulator: the Storage contract, atomic publish, errors, retries and failover."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from airflow_tfos.shared.errors import WebHDFSConfigError, WebHDFSUnavailableError
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage import FileInfo, storage_for
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage, clear_cached_storages
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV, WebHDFSConfig, config_for_uri
from airflow_tfos.testing.webhdfs import WebHDFSEmulator

FAST = {"retries": 2, "backoff": 0.05, "timeout": 2.0, "deadline": 20.0}


def storage_of(emulator: WebHDFSEmulator, **settings) -> WebHDFSStorage:
    return WebHDFSStorage(emulator.config(**{**FAST, **settings}))


def leftovers(emulator: WebHDFSEmulator, folder: str) -> list[str]:
    return sorted(n for n in os.listdir(emulator.local_path(folder)) if ".tmp-" in n)


class TestStorageContract:
    def test_write_read_list_delete(self, emu):
        storage = storage_of(emu)
        base = emu.uri("/data")
        for name, size in (("b.parquet", 30), ("a.parquet", 10), ("_SUCCESS", 0), (".hidden", 1)):
            storage.write_bytes(f"{base}/{name}", b"x" * size)
        storage.write_bytes(f"{base}/sub/c.parquet", b"x" * 5)
        assert storage.read_bytes(f"{base}/b.parquet") == b"x" * 30
        assert storage.exists(f"{base}/sub") and not storage.exists(f"{base}/nope")
        assert storage.listdir(base) == [".hidden", "_SUCCESS", "a.parquet", "b.parquet", "sub"]
        assert storage.listdir(emu.uri("/missing")) == []
        assert storage.list(base) == [FileInfo(f"{base}/a.parquet", 10), FileInfo(f"{base}/b.parquet", 30)]
        assert [f.path for f in storage.list(f"{base}/*/*.parquet")] == [f"{base}/sub/c.parquet"]
        assert [f.size for f in storage.list(f"{base}/?.parquet")] == [10, 30]
        assert storage.list(f"{base}/a.parquet") == [FileInfo(f"{base}/a.parquet", 10)]
        storage.delete(base)
        storage.delete(base)  # nothing there: no error
        assert not storage.exists(base) and storage.list(base) == []

    def test_storage_for_picks_webhdfs_by_scheme(self, emu):
        storage = storage_for(emu.uri("/x"))
        assert isinstance(storage, WebHDFSStorage)
        assert storage.config.namenodes == (emu.url,) and storage.local_path(emu.uri("/x")) is None

    def test_write_bytes_replaces_atomically_with_rename_overwrite(self, emu):
        storage = storage_of(emu)
        target = emu.uri("/run/status.json")
        storage.write_bytes(target, b"old")
        storage.write_bytes(target, b"new")
        assert storage.read_bytes(target) == b"new"
        assert leftovers(emu, "/run") == []
        renames = [r for r in emu.requests if r.op == "RENAME"]
        assert renames and all(r.query.get("renameoptions") == "OVERWRITE" for r in renames)
        assert not [r for r in emu.requests if r.op == "DELETE" and r.path == "/run/status.json"]

    def test_a_server_ignoring_rename_options_gets_delete_then_rename(self):
        with WebHDFSEmulator(rename_options=False) as emu:
            storage = storage_of(emu)
            target = emu.uri("/run/status.json")
            storage.write_bytes(target, b"old")
            storage.write_bytes(target, b"new")
            assert storage.read_bytes(target) == b"new" and leftovers(emu, "/run") == []

    def test_rename_refuses_an_existing_target_and_never_moves_into_it(self, emu):
        storage = storage_of(emu)
        storage.makedirs(emu.uri("/c/ckpt-5"))
        storage.write_bytes(emu.uri("/c/.staging/ckpt"), b"x")
        with pytest.raises(FileExistsError, match="the target exists"):
            storage.rename(emu.uri("/c/.staging"), emu.uri("/c/ckpt-5"))
        assert storage.listdir(emu.uri("/c/ckpt-5")) == []
        storage.rename(emu.uri("/c/.staging"), emu.uri("/c/new/parent/ckpt-6"))
        assert storage.read_bytes(emu.uri("/c/new/parent/ckpt-6/ckpt")) == b"x"
        with pytest.raises(FileNotFoundError):
            storage.rename(emu.uri("/c/.staging"), emu.uri("/c/ckpt-7"))

    def test_put_dir_and_get_dir_round_trip_a_tree(self, emu, tmp_path):
        source = tmp_path / "model"
        (source / "variables").mkdir(parents=True)
        (source / "assets").mkdir()
        (source / "saved_model.pb").write_bytes(b"pb" * 1000)
        (source / "variables" / "variables.index").write_bytes(b"idx")
        storage = storage_of(emu)
        storage.put_dir(str(source), emu.uri("/export"))
        back = tmp_path / "back"
        storage.get_dir(emu.uri("/export"), str(back))
        files = sorted(str(p.relative_to(back)) for p in back.rglob("*"))
        assert files == ["assets", "saved_model.pb", "variables", "variables/variables.index"]
        assert (back / "saved_model.pb").read_bytes() == b"pb" * 1000
        with pytest.raises(FileNotFoundError):
            storage.get_dir(emu.uri("/nothing"), str(tmp_path / "none"))

    def test_open_downloads_and_uploads_on_close(self, emu):
        storage = storage_of(emu)
        with storage.open(emu.uri("/f.bin"), "wb") as out:
            out.write(b"abc")
        with storage.open(emu.uri("/f.bin"), "rb") as stream:
            stream.seek(1)
            assert stream.read() == b"bc"

        def failing_writer():
            with storage.open(emu.uri("/g.bin"), "wb") as out:
                out.write(b"half")
                raise RuntimeError("the writer failed")

        with pytest.raises(RuntimeError):
            failing_writer()
        assert not storage.exists(emu.uri("/g.bin"))  # a failed writer publishes nothing


class TestErrors:
    def test_a_missing_file_is_file_not_found_and_rundir_reads_none(self, emu):
        storage = storage_of(emu)
        with pytest.raises(FileNotFoundError, match="File /nope not found"):
            storage.read_bytes(emu.uri("/nope"))
        assert RunDir(emu.uri("/runs/none"), storage).read_status() is None

    def test_a_refused_permission_names_path_user_and_namenode(self, emu):
        emu.make_read_only("/locked", user="tester")
        storage = storage_of(emu)
        with pytest.raises(PermissionError) as info:
            storage.write_bytes(emu.uri("/locked/status.json"), b"{}")
        message = str(info.value)
        assert "user tester" in message and emu.url in message and "/locked/status.json" in message
        assert "run as another user" in message
        assert not os.path.exists(emu.local_path("/locked/status.json"))

    def test_a_failed_create_leaves_no_final_file_and_the_old_content(self, emu):
        storage = storage_of(emu)
        target = emu.uri("/run/spec.json")
        storage.write_bytes(target, b"v1")
        emu.fail_next(50, status=500, server="datanode", op="CREATE")
        with pytest.raises(WebHDFSUnavailableError, match="HTTP 500"):
            storage.write_bytes(target, b"v2")
        emu.clear_faults()
        assert storage.read_bytes(target) == b"v1" and leftovers(emu, "/run") == []
        emu.fail_next(50, status=500, server="datanode", op="CREATE")
        with pytest.raises(WebHDFSUnavailableError):
            storage.write_bytes(emu.uri("/run/new.json"), b"x")
        emu.clear_faults()
        assert not storage.exists(emu.uri("/run/new.json")) and leftovers(emu, "/run") == []

    def test_every_namenode_down_is_a_clear_error_within_bounded_time(self):
        with WebHDFSEmulator(namenodes=2) as emu:
            config = emu.config(**FAST)
        storage = WebHDFSStorage(config)  # the emulator is gone: both ports refuse
        started = time.monotonic()
        with pytest.raises(WebHDFSUnavailableError) as info:
            storage.read_bytes("/runs/x/status.json")
        assert time.monotonic() - started < 5
        message = str(info.value)
        for url in config.namenodes:
            assert f"{url}: connection refused" in message
        assert "check the namenodes' WebHDFS addresses" in message and "AIRFLOW_TFOS_WEBHDFS" in message

    def test_persistent_malformed_json_is_a_clear_error(self, emu):
        emu.malformed_next(100)
        with pytest.raises(WebHDFSUnavailableError, match="not WebHDFS JSON") as info:
            storage_of(emu).exists(emu.uri("/x"))
        assert "WebHDFS endpoints" in str(info.value)

    def test_a_tls_failure_names_the_verify_setting(self, emu):
        https = emu.url.replace("http://", "https://")
        storage = WebHDFSStorage(WebHDFSConfig(namenodes=[https], **FAST))
        with pytest.raises(OSError, match="verify"):  # the server speaks plain HTTP: the handshake fails
            storage.exists("/x")


class TestRetries:
    def test_5xx_answers_are_retried(self, emu):
        storage = storage_of(emu)
        storage.write_bytes(emu.uri("/f"), b"data")
        emu.fail_next(2, status=503)
        assert storage.read_bytes(emu.uri("/f")) == b"data"
        emu.fail_next(1, status=500, server="datanode", op="OPEN")
        assert storage.read_bytes(emu.uri("/f")) == b"data"

    def test_dropped_connections_are_retried_and_a_cut_upload_is_resent_whole(self, emu):
        storage = storage_of(emu)
        emu.drop_next(1)
        storage.makedirs(emu.uri("/d"))
        emu.drop_next(1, server="datanode", op="CREATE")
        storage.write_bytes(emu.uri("/d/f"), b"0123456789")
        assert storage.read_bytes(emu.uri("/d/f")) == b"0123456789"
        assert leftovers(emu, "/d") == []
        emu.drop_next(1, op="RENAME")
        storage.write_bytes(emu.uri("/d/f"), b"again")
        assert storage.read_bytes(emu.uri("/d/f")) == b"again"

    def test_slow_answers_past_the_timeout_are_retried(self, emu):
        storage = storage_of(emu, timeout=0.5)
        storage.write_bytes(emu.uri("/f"), b"x")
        emu.slow_next(1, 3.0, op="GETFILESTATUS")
        started = time.monotonic()
        assert storage.exists(emu.uri("/f"))
        assert time.monotonic() - started < 2.5
        emu.slow_next(1, 0.2)
        assert storage.read_bytes(emu.uri("/f")) == b"x"  # slow but within the timeout

    def test_standby_fails_over_to_the_active_namenode(self, ha):
        storage = WebHDFSStorage(WebHDFSConfig(namenodes=list(reversed(ha.urls)), user="tester", **FAST))
        storage.write_bytes("/ha/f", b"1")  # the first namenode listed is the standby
        assert storage.read_bytes("/ha/f") == b"1"
        assert [r.server for r in ha.requests if r.server != "datanode"][:2] == ["namenode1", "namenode0"]
        ha.requests.clear()
        ha.fail_over()
        storage.write_bytes("/ha/f", b"2")
        assert storage.read_bytes("/ha/f") == b"2"
        servers = [r.server for r in ha.requests if r.server != "datanode"]
        assert servers[:2] == ["namenode0", "namenode1"]  # one standby answer, then the new active only
        assert set(servers[2:]) == {"namenode1"}

    def test_no_active_namenode_says_so(self, ha):
        ha.fail_over()
        storage = WebHDFSStorage(WebHDFSConfig(namenodes=[ha.urls[0]], **FAST))
        with pytest.raises(WebHDFSUnavailableError, match="no namenode is active"):
            storage.exists("/x")


class TestConfig:
    def test_json_round_trip_and_checks(self):
        config = WebHDFSConfig(namenodes=["http://nn1:9870", "http://nn2:9870/"], user="etl", retries=5)
        again = WebHDFSConfig.from_json(config.to_json())
        assert again == config and again.namenodes == ("http://nn1:9870", "http://nn2:9870")
        with pytest.raises(WebHDFSConfigError, match="unknown WebHDFS setting"):
            WebHDFSConfig.from_json('{"namenodes": [], "password": "x"}')
        with pytest.raises(WebHDFSConfigError, match="not the RPC port"):
            WebHDFSConfig(namenodes=["nn1:8020"])
        with pytest.raises(WebHDFSConfigError, match="auth must be"):
            WebHDFSConfig(auth="token")

    def test_uris_and_the_environment(self, monkeypatch):
        monkeypatch.delenv(WEBHDFS_ENV, raising=False)
        assert config_for_uri("webhdfs://nn:50070/x").namenodes == ("http://nn:50070",)
        assert config_for_uri("swebhdfs://nn/x").namenodes == ("https://nn:9871",)
        with pytest.raises(WebHDFSConfigError, match=f"set {WEBHDFS_ENV}"):
            config_for_uri("hdfs://prod/data")
        env = WebHDFSConfig(namenodes=["http://a:9870", "http://b:9870"], user="etl", nameservice="prod")
        monkeypatch.setenv(WEBHDFS_ENV, env.to_json())
        assert config_for_uri("hdfs://prod/data") == env
        assert config_for_uri("hdfs:///data") == env
        assert config_for_uri("webhdfs://b:9870/x") == env  # one of the configured namenodes: all of them
        other = config_for_uri("webhdfs://c:1/x")
        assert other.namenodes == ("http://c:1",) and other.user == "etl"
        with pytest.raises(WebHDFSConfigError, match="names nameservice 'test'"):
            config_for_uri("hdfs://test/data")
        monkeypatch.setenv(WEBHDFS_ENV, "{not json")
        with pytest.raises(WebHDFSConfigError, match=WEBHDFS_ENV):
            config_for_uri("hdfs://prod/data")

    def test_hdfs_uris_go_to_the_configured_namenodes(self, emu, monkeypatch):
        monkeypatch.setenv(WEBHDFS_ENV, emu.config(**FAST).to_json())
        clear_cached_storages()
        storage = storage_for("hdfs://cluster/data/x.csv")
        storage.write_bytes("hdfs://cluster/data/x.csv", b"a\n1\n")
        assert storage.list("hdfs://cluster/data") == [FileInfo("hdfs://cluster/data/x.csv", 4)]

    def test_kerberos_authenticates_every_request_with_spnego(self):
        from airflow_tfos.shared.storage.kerberos import SpnegoAuth

        storage = WebHDFSStorage(WebHDFSConfig(namenodes=["https://nn:9871"], auth="kerberos", verify="/ca.pem"))
        (client,) = storage._make_clients()
        assert isinstance(client._session.auth, SpnegoAuth) and client._session.verify == "/ca.pem"

    def test_storage_and_webhdfs_modules_do_not_import_hdfs_or_airflow(self):
        code = (
            "import sys, airflow_tfos.shared.storage, airflow_tfos.shared.storage.webhdfs_config, "
            "airflow_tfos.shared.rundir; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('hdfs', 'airflow', 'requests')]; "
            "print(bad); sys.exit(1 if bad else 0)"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
