"""TFoSHook: Spark settings and memory checks (pure), what is shipped, and submission against emulators.

The YARN submissions run a stand-in spark-submit (tests/airflow_side/tfos_hook_fakes.py, an emulation
that prints a real YARN client's log lines) against the ResourceManager emulator; no Spark runs here.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
import types
import zipfile
from pathlib import Path

import pytest

from airflow_tfos.hooks import tfos
from airflow_tfos.hooks.backends.local_tracker import ApplicationAlreadyRunningError
from airflow_tfos.hooks.errors import TFoSConfigError, TFoSSubmitError
from airflow_tfos.hooks.spark_conf import (
    PYSPARK_WORKER_MB,
    cached_file,
    check_container_fits,
    check_local_master,
    default_overhead_mb,
    env_conf,
    escape_property,
    memory_mb,
    parse_application_id,
    properties_text,
    runtime_files,
    runtime_zip,
    training_conf,
)
from airflow_tfos.hooks.tfos import TFoSHook
from tests.airflow_side.tfos_hook_fakes import SubmissionBroker, read_records, write_fake_spark_submit

SECRET = "s3cr3t-Pa55"

# --- memory strings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "mb"),
    [
        ("2g", 2048),
        ("768m", 768),
        ("1024", 1024),
        ("2G", 2048),
        ("1gb", 1024),
        ("1t", 1048576),
        ("512k", 1),
        (300, 300),
    ],
)
def test_memory_strings(value, mb):
    assert memory_mb(value) == mb


def test_a_bad_memory_string_is_named():
    with pytest.raises(TFoSConfigError, match="'two' is not a Spark memory size"):
        memory_mb("two")


# --- training_conf ----------------------------------------------------------------------------------------


def yarn_conf(**kwargs):
    return training_conf(**{"backend": "yarn", "tag": "tfos-abc", "num_nodes": 3, **kwargs})


def test_yarn_settings_for_barrier_mode():
    conf = yarn_conf(executor_cores=2, executor_memory="4g")
    assert conf == {
        "spark.dynamicAllocation.enabled": "false",
        "spark.locality.wait": "0",
        "spark.executor.instances": "3",
        "spark.executor.cores": "2",
        "spark.task.cpus": "2",
        "spark.executor.memory": "4g",
        "spark.yarn.submit.waitAppCompletion": "false",
        "spark.yarn.maxAppAttempts": "1",
        "spark.yarn.tags": "tfos-abc",
    }


def test_tf_memory_goes_into_the_executor_overhead():
    conf = yarn_conf(executor_memory="2g", tf_memory_mb=2048)
    assert conf["spark.executor.memoryOverhead"] == f"{384 + 2048 + PYSPARK_WORKER_MB}m"
    conf = yarn_conf(executor_memory="10g", tf_memory_mb=1000)
    assert conf["spark.executor.memoryOverhead"] == f"{1024 + 1000 + PYSPARK_WORKER_MB}m"
    assert default_overhead_mb(100) == 384 and default_overhead_mb(8192) == 820
    assert "spark.executor.pyspark.memory" not in conf


def test_a_given_overhead_must_hold_the_tf_process():
    with pytest.raises(TFoSConfigError, match=r"spark.executor.memoryOverhead=1g .* at least 2560m"):
        yarn_conf(tf_memory_mb=2048, user_conf={"spark.executor.memoryOverhead": "1g"})
    conf = yarn_conf(tf_memory_mb=2048, user_conf={"spark.executor.memoryOverhead": "6g"})
    assert conf["spark.executor.memoryOverhead"] == "6g"


@pytest.mark.parametrize(
    ("user", "message"),
    [
        ({"spark.dynamicAllocation.enabled": "true"}, "spark.dynamicAllocation.enabled must be false"),
        ({"spark.yarn.maxAppAttempts": "2"}, "spark.yarn.maxAppAttempts must be 1"),
        ({"spark.yarn.submit.waitAppCompletion": "true"}, "waitAppCompletion must be false"),
        ({"spark.executor.pyspark.memory": "2g"}, "remove spark.executor.pyspark.memory"),
        ({"spark.executor.instances": "2"}, "spark.executor.instances=2 is less than num_nodes=3"),
        ({"spark.executor.memory": "8g"}, "set it with executor_memory"),
        ({"spark.task.cpus": "2"}, "set it with executor_cores"),
        ({"spark.executor.resource.gpu.amount": "1"}, "gpus_per_node is 0"),
    ],
)
def test_settings_that_break_a_tf_cluster_are_refused(user, message):
    with pytest.raises(TFoSConfigError, match=message):
        yarn_conf(user_conf=user)


def test_user_settings_pass_through_and_tags_merge():
    conf = yarn_conf(
        user_conf={
            "spark.sql.shuffle.partitions": "8",
            "spark.locality.wait": "3s",
            "spark.yarn.tags": "Team-ML, tfos-abc",
            "spark.executor.instances": "4",
            "spark.executor.memory": "2g",
        }
    )
    assert conf["spark.sql.shuffle.partitions"] == "8" and conf["spark.locality.wait"] == "3s"
    assert conf["spark.yarn.tags"] == "tfos-abc,team-ml"
    assert conf["spark.executor.instances"] == "4"


def test_bad_counts_and_tags_are_refused():
    with pytest.raises(TFoSConfigError, match="must be >= 1"):
        yarn_conf(num_nodes=0)
    with pytest.raises(ValueError, match="YARN application tag"):
        yarn_conf(tag="a,b")


def test_local_settings():
    standalone = training_conf(backend="local", tag="t", num_nodes=2, executor_cores=2, master="spark://h:7077")
    assert standalone["spark.cores.max"] == "4" and "spark.driver.host" not in standalone
    local = training_conf(backend="local", tag="t", num_nodes=2, master="local-cluster[2,1,1024]", tf_memory_mb=4096)
    assert local["spark.driver.host"] == "127.0.0.1"
    assert not [k for k in {**standalone, **local} if k.startswith("spark.yarn.") or "Overhead" in k]


def test_gpu_settings():
    conf = yarn_conf(gpus_per_node=2, gpu_discovery_script="./gpus.sh")
    assert conf["spark.executor.resource.gpu.amount"] == "2"
    assert conf["spark.task.resource.gpu.amount"] == "2"
    assert conf["spark.executor.resource.gpu.discoveryScript"] == "./gpus.sh"
    # Spark 4 refuses this one on YARN ("Do not use ..., please use spark.executor.resource.gpu.amount")
    assert not [k for k in conf if "yarn.io/gpu" in k]
    mine = yarn_conf(gpus_per_node=1, gpu_discovery_script="./gpus.sh", user_conf={
        "spark.executor.resource.gpu.discoveryScript": "/opt/gpus.sh"})  # fmt: skip
    assert mine["spark.executor.resource.gpu.discoveryScript"] == "/opt/gpus.sh"


def test_environment_settings():
    assert env_conf({"A": "1"}, backend="yarn") == {"spark.executorEnv.A": "1", "spark.yarn.appMasterEnv.A": "1"}
    assert env_conf({"A": "1"}, backend="local") == {"spark.executorEnv.A": "1"}


# --- container checks -------------------------------------------------------------------------------------


def test_containers_that_fit():
    check_container_fits(yarn_conf(executor_memory="2g", tf_memory_mb=2048), max_memory_mb=8192, max_vcores=4)


def test_an_executor_container_too_big_names_the_numbers_and_settings():
    conf = yarn_conf(executor_memory="4g", tf_memory_mb=4096)
    with pytest.raises(TFoSConfigError) as failure:
        check_container_fits(conf, max_memory_mb=8192, max_vcores=4)
    message = str(failure.value)
    assert "4096 MB (spark.executor.memory) + 5018 MB (spark.executor.memoryOverhead) = 9114 MB" in message
    assert "8192 MB (yarn.scheduler.maximum-allocation-mb)" in message and "tf_memory_mb" in message


def test_pyspark_and_off_heap_memory_count():
    conf = {
        "spark.executor.memory": "1g",
        "spark.executor.pyspark.memory": "1g",
        "spark.memory.offHeap.enabled": "true",
        "spark.memory.offHeap.size": "1g",
    }
    with pytest.raises(
        TFoSConfigError, match=r"\+ 1024 MB \(spark.executor.pyspark.memory\) \+ 1024 MB \(spark.memory"
    ):
        check_container_fits(conf, max_memory_mb=3000, max_vcores=4)
    check_container_fits(conf, max_memory_mb=3456, max_vcores=4)


def test_too_many_cores_and_a_big_driver():
    with pytest.raises(TFoSConfigError, match=r"needs 8 vcores \(spark.executor.cores\).*lower executor_cores"):
        check_container_fits(yarn_conf(executor_cores=8), max_memory_mb=65536, max_vcores=4)
    big_driver = {**yarn_conf(executor_memory="1g"), "spark.driver.memory": "8g"}
    with pytest.raises(TFoSConfigError, match=r"a driver container needs .* lower spark.driver.memory"):
        check_container_fits(big_driver, max_memory_mb=4096, max_vcores=4)
    check_container_fits(big_driver, max_memory_mb=4096, max_vcores=4, cluster_mode=False)
    with pytest.raises(TFoSConfigError, match="spark.driver.cores"):
        check_container_fits({**big_driver, "spark.driver.cores": "9"}, max_memory_mb=65536, max_vcores=4)


@pytest.mark.parametrize(
    ("master", "kwargs", "message"),
    [
        ("local-cluster[2,1,1024]", {"num_nodes": 3}, "has 2 workers"),
        ("local-cluster[2,1,1024]", {"executor_cores": 2}, "workers have 1 cores"),
        ("local-cluster[2,1,1024]", {"executor_memory": "2g"}, "does not fit the 1024 MB"),
        ("local[1]", {}, "has 1 task slots"),
        ("k8s://https://k:443", {}, "is not supported"),
    ],
)
def test_local_masters_that_cannot_hold_the_cluster(master, kwargs, message):
    with pytest.raises(TFoSConfigError, match=message):
        check_local_master(master, **{"num_nodes": 2, "executor_cores": 1, "executor_memory": "768m", **kwargs})


@pytest.mark.parametrize("master", ["local-cluster[2,1,1024]", "local[*]", "local[4]", "spark://h:7077"])
def test_local_masters_that_can(master):
    check_local_master(master, num_nodes=2, executor_cores=1, executor_memory="768m")


# --- output parsing, properties ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "app_id"),
    [
        ("26/11/22 10:00:02 INFO YarnClientImpl: Submitted application application_17_0042", "application_17_0042"),
        ("INFO Client: Application report for application_17_0003 (state: ACCEPTED)", "application_17_0003"),
        ("INFO Client: Uploading resource file:/x.zip -> hdfs://nn/.sparkStaging/application_1_2/x", "application_1_2"),
        ("INFO Client: Requesting a new application from cluster with 3 NodeManagers", None),
        ("INFO Client: application_ is not an id", None),
    ],
)  # fmt: skip
def test_application_ids_in_spark_submit_output(line, app_id):
    assert parse_application_id(line) == app_id


def test_properties_are_escaped():
    assert escape_property('{"a": "b\\\\c"}\n') == '{"a": "b\\\\\\\\c"}\\n'
    assert escape_property(" x") == "\\ x"
    assert properties_text({"k": "v=1:2"}) == "k=v=1:2\n"


# --- what is shipped --------------------------------------------------------------------------------------


def test_the_runtime_zip_holds_the_runtime_and_what_it_imports(tmp_path):
    path = runtime_zip(tmp_path)
    names = set(zipfile.ZipFile(path).namelist())
    for needed in ["airflow_tfos/__init__.py", "airflow_tfos/runtime/driver/entry.py",
                   "airflow_tfos/runtime/feed/plan.py", "airflow_tfos/shared/rundir.py",
                   "airflow_tfos/shared/storage/__init__.py", "airflow_tfos/shared/storage/webhdfs_client.py",
                   "airflow_tfos/shared/spec.py"]:  # fmt: skip
        assert needed in names
    assert not [
        n for n in names if n.startswith(("airflow_tfos/hooks", "airflow_tfos/operators", "airflow_tfos/testing"))
    ]
    assert not [n for n in names if "__pycache__" in n or not n.endswith(".py")]
    assert "airflow_tfos/hooks/backends/localrun.py" not in names


def test_the_runtime_zip_is_cached_by_content(tmp_path):
    package = tmp_path / "pkg"
    shutil.copytree(Path(tfos.__file__).parent.parent, package, ignore=shutil.ignore_patterns("__pycache__"))
    first = runtime_zip(tmp_path / "cache", package)
    built = first.stat().st_mtime_ns
    time.sleep(0.01)
    assert runtime_zip(tmp_path / "cache", package) == first and first.stat().st_mtime_ns == built
    entry = package / "runtime" / "driver" / "entry.py"
    entry.write_text(entry.read_text() + "\n# changed\n")
    assert runtime_zip(tmp_path / "cache", package) != first
    unused = package / "operators" / "unused.py"
    unused.parent.mkdir(exist_ok=True)
    unused.write_text("x = 1\n")
    assert unused not in runtime_files(package)


def test_the_launcher_runs_the_driver_entrypoint(tmp_path):
    launcher = cached_file(tmp_path, tfos.LAUNCHER_NAME, tfos._LAUNCHER)
    assert launcher == cached_file(tmp_path, tfos.LAUNCHER_NAME, tfos._LAUNCHER)
    done = __import__("subprocess").run(
        [sys.executable, str(launcher), "--run-dir", str(tmp_path / "empty")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "no spec.json" in done.stderr


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
    assert record["properties_mode"] == 0o600 and SECRET in record["properties"]
    assert "spark.yarn.appMasterEnv.AIRFLOW_TFOS_WEBHDFS=" in record["properties"]
    assert "spark.executorEnv.AIRFLOW_TFOS_WEBHDFS=" in record["properties"]
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
    assert SECRET not in " ".join(record["argv"]) and SECRET in record["env_webhdfs"]
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
    written = Path(record["options"]["--keytab"])  # by the Spark provider's hook, from the extra's base64
    assert written.read_bytes() == keytab
    written.unlink()
