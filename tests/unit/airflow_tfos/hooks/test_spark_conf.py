"""The Spark settings of a TF cluster and their memory checks (pure), and what is shipped with the driver: the
runtime zip and the launcher. The hook that submits with them: tests/unit/airflow_tfos/hooks/test_tfos.py."""

from __future__ import annotations

import shutil
import sys
import time
import zipfile
from pathlib import Path

import pytest

from airflow_tfos.hooks import tfos
from airflow_tfos.hooks.errors import TFoSConfigError
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
