"""TFoSHook: its backend, and submission against emulators. The Spark settings it builds and what it ships:
tests/unit/airflow_tfos/hooks/test_spark_conf.py.

The YARN submissions run a stand-in spark-submit (tests/support/tfos_hook_fakes.py, an emulation
that prints a real YARN client's log lines) against the ResourceManager emulator; no Spark runs here.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import tempfile
import time
import types
from pathlib import Path

import pytest

from airflow_tfos.hooks import tfos
from airflow_tfos.hooks.backends.local_tracker import ApplicationAlreadyRunningError
from airflow_tfos.hooks.errors import TFoSConfigError, TFoSSubmitError
from airflow_tfos.hooks.tfos import TFoSHook
from airflow_tfos.shared.storage.webhdfs_config import ENV_BASE64_PREFIX
from tests.support.tfos_hook_fakes import SubmissionBroker, read_records, write_fake_spark_submit

SECRET = "s3cr3t-Pa55"

# --- the hook ---------------------------------------------------------------------------------------------


def test_the_constructor_does_no_io(tmp_path, monkeypatch):
    def no_connection(*args, **kwargs):
        raise AssertionError("the constructor looked up a connection")

    monkeypatch.setattr(tfos.BaseHook, "get_connection", no_connection)
    TFoSHook(spark_conn_id="nope", yarn_conn_id="nope", webhdfs_conn_id="nope", tracker_dir=str(tmp_path / "t"))
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(
    ("host", "backend"),
    [("yarn", "yarn"), ("local-cluster[2,1,1024]", "local"), ("local[*]", "local"), ("spark://m:7077", "local")],
)
def test_the_backend_follows_the_connection(monkeypatch, host, backend):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_PICK", json.dumps({"conn_type": "spark", "host": host}))
    hook = TFoSHook(spark_conn_id="spark_pick")
    assert (hook.backend, hook.master) == (backend, host)


@pytest.fixture
def webhdfs(monkeypatch):
    """A WebHDFS connection whose settings hold a password."""
    config = types.SimpleNamespace(to_json=lambda: {"url": "http://nn:9870", "user": "alice", "password": SECRET})
    try:
        import airflow_tfos.hooks.webhdfs_connection as module
    except ImportError:
        module = types.ModuleType("airflow_tfos.hooks.webhdfs_connection")
        monkeypatch.setitem(sys.modules, "airflow_tfos.hooks.webhdfs_connection", module)
    monkeypatch.setattr(module, "webhdfs_config_from_connection", lambda conn_id: config, raising=False)
    return config


@pytest.fixture
def yarn(monkeypatch, tmp_path):
    """The RM emulator, its broker, and a stand-in spark-submit; connections spark_yarn_test / yarn_test."""
    emulator = pytest.importorskip("airflow_tfos.testing.yarn", reason="the YARN emulator is not there yet")
    with (
        emulator.ResourceManagerEmulator(max_allocation_mb=8192, max_allocation_vcores=4) as rm,
        SubmissionBroker(rm) as broker,
    ):
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN_TEST", json.dumps({"conn_type": "spark", "host": "yarn"}))
        monkeypatch.setenv(
            "AIRFLOW_CONN_YARN_TEST",
            json.dumps({"conn_type": "yarn", "host": ",".join(rm.addresses), "login": "airflow"}),
        )
        monkeypatch.setenv("FAKE_YARN_BROKER", broker.url)
        monkeypatch.setenv("FAKE_SPARK_SUBMIT_RECORDS", str(tmp_path / "records"))
        yield types.SimpleNamespace(
            rm=rm, binary=str(write_fake_spark_submit(tmp_path / "bin")), records=tmp_path / "records"
        )


def yarn_hook(yarn, tmp_path, **kwargs) -> TFoSHook:
    return TFoSHook(spark_conn_id="spark_yarn_test", yarn_conn_id="yarn_test", spark_binary=yarn.binary,
                    tracker_dir=str(tmp_path / "tracker"), **kwargs)  # fmt: skip


def test_an_application_of_another_user_or_type_with_the_run_s_tag_is_never_adopted(yarn, tmp_path):
    hook = yarn_hook(yarn, tmp_path)
    foreign = yarn.rm.add_application("not ours", tags=["tfos-r1"], user="mallory")
    other_type = yarn.rm.add_application("not spark", tags=["tfos-r1"], user="airflow", application_type="MAPREDUCE")
    assert hook.find_live("tfos-R1") == [] and hook.find_by_tag("tfos-r1") == []
    app_id = hook.submit("hdfs:///runs/r1", tag="tfos-R1", name="train r1", num_nodes=2)  # not refused
    assert [a.app_id for a in hook.find_live("tfos-r1")] == [app_id]
    assert yarn.rm.application(foreign)["state"] == yarn.rm.application(other_type)["state"] == "RUNNING"


def decoded(value: str) -> str:
    """The HDFS settings as the driver reads them (``AIRFLOW_TFOS_WEBHDFS`` travels base64-encoded)."""
    assert value.startswith(ENV_BASE64_PREFIX), value
    return base64.b64decode(value.removeprefix(ENV_BASE64_PREFIX)).decode()


def test_a_yarn_submission(yarn, tmp_path, webhdfs):
    hook = yarn_hook(yarn, tmp_path, webhdfs_conn_id="webhdfs_test", py_files="/jobs/model.py")
    app_id = hook.submit("hdfs:///runs/r1", tag="tfos-R1", name="train r1", num_nodes=2, tf_memory_mb=1024)
    assert app_id.startswith("application_")
    app = yarn.rm.application(app_id)
    assert app["applicationTags"] == "tfos-r1" and app["name"] == "train r1"
    (record,) = read_records(yarn.records)
    options, conf = record["options"], record["conf"]
    assert (options["--master"], options["--deploy-mode"]) == ("yarn", "cluster")
    assert conf["spark.yarn.submit.waitAppCompletion"] == "false" and conf["spark.executor.instances"] == "2"
    assert conf["spark.executor.memoryOverhead"] == f"{384 + 1024 + 512}m"
    py_files = options["--py-files"].split(",")
    assert Path(py_files[0]).name.startswith("airflow_tfos-runtime-") and py_files[1] == "/jobs/model.py"
    assert Path(options["application"]).name == "tfos_driver.py"
    assert options["args"][:2] == ["--run-dir", "hdfs:///runs/r1"]
    # the secret is in a private properties file, never on the command line
    assert SECRET not in " ".join(record["argv"]) and not record["env_has_webhdfs"]
    handed = dict(line.split("=", 1) for line in record["properties"].splitlines() if line)
    assert record["properties_mode"] == 0o600
    for key in ("spark.yarn.appMasterEnv.AIRFLOW_TFOS_WEBHDFS", "spark.executorEnv.AIRFLOW_TFOS_WEBHDFS"):
        assert SECRET in decoded(handed[key])  # base64: YARN's launch script would drop the JSON's quotes
    assert options["--load-spark-defaults"] is True
    assert not list((tmp_path / "tracker" / "secrets").iterdir())  # deleted after submission

    state = hook.get_state(app_id)
    assert (state.state, state.tags) == ("ACCEPTED", ("tfos-r1",))
    assert [a.app_id for a in hook.find_live("tfos-r1")] == [app_id]
    with pytest.raises(ApplicationAlreadyRunningError, match=app_id):
        hook.submit("hdfs:///runs/r1", tag="tfos-r1", name="again", num_nodes=2)
    assert len(read_records(yarn.records)) == 1
    assert asyncio.run(hook.aget_state(app_id)).state == "ACCEPTED"
    killed = hook.kill(app_id)
    assert (killed.state, killed.final_status) == ("KILLED", "KILLED")
    assert hook.kill(app_id) == killed
    assert asyncio.run(hook.akill(app_id)).state == "KILLED"
    assert hook.find_live("tfos-r1") == [] and [a.app_id for a in hook.find_by_tag("tfos-r1")] == [app_id]
    assert hook.kill("application_1_999").diagnostics.startswith("not killed")


def test_a_yarn_submission_that_does_not_fit_is_refused_before_spark_submit(yarn, tmp_path):
    hook = yarn_hook(yarn, tmp_path)
    with pytest.raises(TFoSConfigError, match=r"= 9114 MB, but the cluster's largest container is 8192 MB"):
        hook.submit("hdfs:///runs/r2", tag="tfos-r2", name="n", num_nodes=2, executor_memory="4g", tf_memory_mb=4096)
    with pytest.raises(TFoSConfigError, match=r"needs 6 vcores"):
        hook.submit("hdfs:///runs/r2", tag="tfos-r2", name="n", num_nodes=2, executor_cores=6)
    assert read_records(yarn.records) == []


def test_gpus_on_yarn_ship_the_discovery_script(yarn, tmp_path):
    yarn_hook(yarn, tmp_path).submit("hdfs:///runs/g", tag="tfos-g", name="n", num_nodes=2, gpus_per_node=1)
    (record,) = read_records(yarn.records)
    assert record["conf"]["spark.executor.resource.gpu.discoveryScript"] == "./tfos_gpu_discovery.sh"
    script = Path(record["options"]["--files"])
    assert script.name == "tfos_gpu_discovery.sh" and os.access(script, os.X_OK)


@pytest.mark.parametrize(("mode", "message"), [("fail", "AccessControlException"), ("silent", "without naming")])
def test_a_failed_yarn_submission_says_why(yarn, tmp_path, monkeypatch, mode, message):
    monkeypatch.setenv("FAKE_SPARK_SUBMIT_MODE", mode)
    with pytest.raises(TFoSSubmitError, match=message):
        yarn_hook(yarn, tmp_path).submit("hdfs:///runs/f", tag="tfos-f", name="n", num_nodes=2)


def test_a_local_submission_keeps_secrets_off_the_command_line(tmp_path, monkeypatch, webhdfs):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_LOCAL_TEST", json.dumps({"conn_type": "spark", "host": "local-cluster[2,1,1024]"})
    )
    monkeypatch.setenv("FAKE_SPARK_SUBMIT_RECORDS", str(tmp_path / "records"))
    hook = TFoSHook(spark_conn_id="spark_local_test", webhdfs_conn_id="w", tracker_dir=str(tmp_path / "tracker"),
                    spark_binary=str(write_fake_spark_submit(tmp_path / "bin")), env_vars={"MY_FLAG": "1"})  # fmt: skip
    app_id = hook.submit(str(tmp_path / "run"), tag="tfos-l", name="n", num_nodes=2, executor_memory="768m")
    deadline = time.monotonic() + 60
    while not hook.get_state(app_id).is_terminal and time.monotonic() < deadline:
        time.sleep(0.1)
    assert hook.get_state(app_id).is_successful
    (record,) = read_records(tmp_path / "records")
    assert (record["options"]["--master"], record["options"]["--deploy-mode"]) == ("local-cluster[2,1,1024]", "client")
    assert "--py-files" not in record["options"] and record["conf"]["spark.executorEnv.MY_FLAG"] == "1"
    assert SECRET not in " ".join(record["argv"]) and SECRET in decoded(record["env_webhdfs"])
    assert record["properties_mode"] == 0o600 and "spark.executorEnv.AIRFLOW_TFOS_WEBHDFS" in record["properties"]
    assert not list((tmp_path / "tracker" / "secrets").iterdir())  # removed by the wrapper once it ended
    with pytest.raises(TFoSConfigError, match="does not fit the 1024 MB"):
        hook.submit(str(tmp_path / "run"), tag="tfos-l2", name="n", num_nodes=2)


def test_a_yarn_submission_passes_the_spark_connections_principal_and_keytab(yarn, tmp_path, monkeypatch):
    import base64

    keytab = b"\x05\x02 a keytab's bytes"
    conn = {
        "conn_type": "spark",
        "host": "yarn",
        "extra": {"principal": "etl@REALM", "keytab": base64.b64encode(keytab).decode()},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN_TEST", json.dumps(conn))
    yarn_hook(yarn, tmp_path).submit("hdfs:///runs/k", tag="tfos-k", name="n", num_nodes=2)
    (record,) = read_records(yarn.records)
    assert record["options"]["--principal"] == "etl@REALM"
    # written from the extra's base64 into the hook's private folder, for this user alone, and gone once submitted
    written = Path(record["options"]["--keytab"])
    assert (bytes.fromhex(record["keytab_hex"]), record["keytab_mode"]) == (keytab, 0o600)
    assert written.parent == tmp_path / "tracker" / "secrets" and not written.exists()
    assert not list(Path(tempfile.gettempdir()).glob("airflow_keytab-etl@REALM"))  # not where the provider puts it


@pytest.mark.kerberos
def test_proxy_user_submits_with_a_private_ticket_of_the_connections_keytab_not_with_principal_and_keytab(
    yarn, tmp_path, monkeypatch, kdc
):
    keytab = Path(kdc.keytab("airflow"))
    conn = {
        "conn_type": "spark",
        "host": "yarn",
        "extra": {"principal": kdc.principal("airflow"), "keytab": base64.b64encode(keytab.read_bytes()).decode()},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN_TEST", json.dumps(conn))
    yarn_hook(yarn, tmp_path, proxy_user="alice").submit("hdfs:///runs/k", tag="tfos-k", name="n", num_nodes=2)
    (record,) = read_records(yarn.records)
    assert record["options"]["--proxy-user"] == "alice"
    assert "--principal" not in record["options"] and "--keytab" not in record["options"]
    # a ticket of airflow's, in a cache of the hook's private folder, deleted after the submit (with the keytab's copy)
    cache = Path(record["krb5ccname"].removeprefix("FILE:"))
    assert cache.parent == tmp_path / "tracker" / "secrets" and not cache.exists()
    ccache = bytes.fromhex(record["ccache_hex"])  # MIT's format: the realm, then the name's parts; a TGT
    assert b"\x00\x00\x00\x07airflow" in ccache and b"krbtgt" in ccache
    assert list((tmp_path / "tracker" / "secrets").iterdir()) == []


@pytest.mark.kerberos
def test_proxy_user_with_a_keytab_of_another_principal_fails_with_kinits_words_naming_principal_and_keytab(
    yarn, tmp_path, monkeypatch, kdc
):
    keytab = kdc.keytab("mallory")
    conn = {"conn_type": "spark", "host": "yarn", "extra": {"principal": kdc.principal("airflow"), "keytab": keytab}}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN_TEST", json.dumps(conn))
    with pytest.raises(TFoSSubmitError) as failed:
        yarn_hook(yarn, tmp_path, proxy_user="alice").submit("hdfs:///runs/k", tag="tfos-k", name="n", num_nodes=2)
    message = str(failed.value)
    assert message.startswith("kinit: ") and f"cannot log {kdc.principal('airflow')} in from keytab {keytab}" in message
    assert not read_records(yarn.records)


def test_proxy_user_is_refused_on_a_local_master(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_L", json.dumps({"conn_type": "spark", "host": "local-cluster[2,1,1024]"}))
    hook = TFoSHook(spark_conn_id="spark_l", tracker_dir=str(tmp_path / "t"), proxy_user="alice")
    with pytest.raises(TFoSSubmitError, match="proxy_user 'alice' needs a YARN master"):
        hook.submit(str(tmp_path / "run"), tag="tfos-k", name="n", num_nodes=2)


def test_a_keytab_extra_that_is_not_base64_nor_a_file_is_refused_naming_the_connection(yarn, tmp_path, monkeypatch):
    conn = {"conn_type": "spark", "host": "yarn", "extra": {"principal": "etl@REALM", "keytab": "etl.keytab"}}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN_TEST", json.dumps(conn))
    with pytest.raises(TFoSSubmitError, match="keytab extra of connection 'spark_yarn_test' is neither base64"):
        yarn_hook(yarn, tmp_path).submit("hdfs:///runs/k", tag="tfos-k", name="n", num_nodes=2)
    assert not read_records(yarn.records)  # nothing was submitted


def test_a_keytab_extra_that_names_a_file_is_passed_as_it_is(yarn, tmp_path, monkeypatch):
    keytab = tmp_path / "etl.keytab"
    keytab.write_bytes(b"\x05\x02 keytab")
    conn = {"conn_type": "spark", "host": "yarn", "extra": {"principal": "etl@REALM", "keytab": str(keytab)}}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN_TEST", json.dumps(conn))
    yarn_hook(yarn, tmp_path).submit("hdfs:///runs/k", tag="tfos-k", name="n", num_nodes=2)
    (record,) = read_records(yarn.records)
    assert record["options"]["--keytab"] == str(keytab) and keytab.exists()


@pytest.mark.parametrize("backend_master", ["yarn", "local-cluster[2,1,1024]"])
def test_without_a_webhdfs_conn_id_the_driver_gets_what_the_airflow_side_reads_hdfs_with(
    tmp_path, monkeypatch, backend_master
):
    """webhdfs_conn_id=None: the connection webhdfs_default when it exists (what the run directory, the inputs and
    the registry are read with on the Airflow side), else HADOOP_CONF_DIR's files, on either backend (the runtime
    reads no HADOOP_CONF_DIR itself)."""
    monkeypatch.delenv("AIRFLOW_TFOS_WEBHDFS", raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_T", json.dumps({"conn_type": "spark", "host": backend_master}))
    conf_dir = tmp_path / "hadoop"
    conf_dir.mkdir()
    (conf_dir / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name><value>hdfs://files-nn:8020</value></property>"
        "</configuration>"
    )
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf_dir))

    def settings() -> dict:
        hook = TFoSHook(spark_conn_id="spark_t", tracker_dir=str(tmp_path / "t"))
        (value,) = hook._secret_env().values()
        return json.loads(decoded(value))

    assert "files-nn" in json.dumps(settings())
    monkeypatch.setenv(
        "AIRFLOW_CONN_WEBHDFS_DEFAULT", json.dumps({"conn_type": "webhdfs", "host": "conn-nn", "port": 9870})
    )
    assert "conn-nn" in json.dumps(settings()) and "files-nn" not in json.dumps(settings())
