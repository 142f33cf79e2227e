"""TensorFlowOnSpark 2.2.5 programs run on airflow-tfos with only their import changed."""

from __future__ import annotations

import importlib.util
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from airflow_tfos.runtime import NodeFailedError
from airflow_tfos.runtime.compat import TFCluster, TFNode
from tests.runtime import programs

pytestmark = pytest.mark.integration

TFOS_PROGRAM = Path(__file__).parent / "tfos_programs" / "keras_tf_mode.py"


def load_migrated(tmp_path: Path, source: Path = TFOS_PROGRAM):
    """Copy a TFoS program, change nothing but its import, and load it as the user's driver script."""
    text = source.read_text()
    assert "from tensorflowonspark import" in text
    migrated = text.replace("from tensorflowonspark import", "from airflow_tfos.runtime.compat import")
    assert "tensorflowonspark" not in migrated.replace('"""', "").split("import argparse")[1]
    path = tmp_path / "migrated_program.py"
    path.write_text(migrated)
    spec = importlib.util.spec_from_file_location("migrated_program", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["migrated_program"] = module
    spec.loader.exec_module(module)
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)  # as a driver script's functions are shipped
    return module


def test_tfos_tensorflow_mode_program_runs_after_changing_only_its_import(sc, tmp_path):
    program = load_migrated(tmp_path)
    export_dir = tmp_path / "export"
    args = program.parse_args(
        ["--model_dir", str(tmp_path / "model"), "--export_dir", str(export_dir), "--mark_dir", str(tmp_path)]
    )
    cluster = program.launch(sc, args)
    assert (export_dir / "saved_model.pb").exists()
    assert (tmp_path / "model" / "weights-2").exists() or any((tmp_path / "model").glob("weights-2*"))
    assert sorted(p.name for p in tmp_path.glob("ready-*")) == ["ready-chief-0", "ready-worker-0"]
    assert [n["job_name"] for n in cluster.cluster_info] == ["chief", "worker"]


def test_tfos_ctx_fields_and_tf_config_rule(sc, tmp_path):
    # TFoS set TF_CONFIG only when the cluster had a chief or master.
    cluster = TFCluster.run(sc, programs.report_context, {"a": 1}, 2, 0, input_mode=TFCluster.InputMode.TENSORFLOW)
    result = cluster.shutdown()
    assert result["job_name"] == "worker" and result["worker_num"] == 0 and result["tf_config"] is None
    assert result["num_workers"] == 2

    cluster = TFCluster.run(sc, programs.report_context, {"a": 1}, 2, 0, master_node="chief")
    result = cluster.shutdown(grace_secs=0, timeout=300)
    assert result["job_name"] == "chief" and '"type": "chief"' in result["tf_config"]
    assert result["defaultFS"] == "file://"


def test_tfos_program_error_surfaces_from_shutdown(sc):
    cluster = TFCluster.run(sc, programs.fail_on, {"job": "chief", "index": 0}, 2, 0, master_node="chief")
    with pytest.raises(NodeFailedError, match="TF node chief:0 .* ValueError: boom from chief:0"):
        cluster.shutdown()


def tensorboard_main(args, ctx):
    deadline = time.time() + 120
    while time.time() < deadline and not Path(args["stop_file"]).exists():
        time.sleep(0.2)


def test_tensorboard_runs_beside_the_chief_while_training(sc, tmp_path):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    stop_file = tmp_path / "stop"
    cluster = TFCluster.run(
        sc,
        tensorboard_main,
        {"stop_file": str(stop_file)},
        2,
        0,
        tensorboard=True,
        master_node="chief",
        log_dir=str(tmp_path / "logs"),
    )
    try:
        url = cluster.tensorboard_url()
        assert url and url.startswith("http://127.0.0.1:")
        deadline = time.monotonic() + 90
        status = None
        while time.monotonic() < deadline and status != 200:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    status = response.status
            except OSError:
                time.sleep(1)
        assert status == 200
    finally:
        stop_file.touch()
        cluster.shutdown(timeout=120)
    # TensorBoard is stopped with the cluster.
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=5)


def test_unsupported_tfos_options_are_refused_clearly(sc):
    with pytest.raises(ValueError, match="evaluator nodes is only supported in InputMode.TENSORFLOW"):
        TFCluster.run(sc, programs.report_context, None, 3, 0, input_mode=TFCluster.InputMode.SPARK, eval_node=True)
    with pytest.raises(ValueError, match="driver_ps_nodes=True is not supported"):
        TFCluster.run(sc, programs.report_context, None, 3, 1, driver_ps_nodes=True)


def test_tfnode_hdfs_path_and_deprecated_helpers():
    class Ctx:
        defaultFS = "hdfs://nn:8020"
        working_dir = "/home/u"

    assert TFNode.hdfs_path(Ctx(), "/data") == "hdfs://nn:8020/data"
    with pytest.raises(Exception, match="DEPRECATED"):
        TFNode.start_cluster_server(Ctx())


TFOS_SPARK_PROGRAM = Path(__file__).parent / "tfos_programs" / "keras_spark_mode.py"


def test_tfos_spark_mode_program_trains_and_infers_after_changing_only_its_import(sc, tmp_path):
    import random

    program = load_migrated(tmp_path, TFOS_SPARK_PROGRAM)
    args = program.parse_args(["--rows", "1200", "--model_dir", str(tmp_path)])
    rng = random.Random(3)
    rows = [([rng.random() for _ in range(4)], float(i % 7)) for i in range(1200)]
    program.train(sc, args, sc.parallelize(rows, 5))
    assert (tmp_path / "weights.h5").exists()

    predictions = program.infer(sc, args, sc.parallelize(rows[:300], 3)).collect()
    assert len(predictions) == 300  # one result per input row, in order
    assert predictions == [(sum(features), label) for features, label in rows[:300]]


def slow_reader(args, ctx):
    from airflow_tfos.runtime.compat import TFNode

    feed = TFNode.DataFeed(ctx.mgr)
    feed.next_batch(10)
    time.sleep(60)  # stops reading its feed


def test_tfos_feed_not_consumed_within_feed_timeout_fails_clearly(sc):
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = TFCluster.run(sc, slow_reader, None, 2, 0, input_mode=TFCluster.InputMode.SPARK, master_node="chief")
    started = time.monotonic()
    with pytest.raises(NodeFailedError, match=r"Timeout while feeding partition: TF node \w+:0 read 10 of its"):
        cluster.train(sc.parallelize(range(1000), 2), num_epochs=1, feed_timeout=5)
    assert time.monotonic() - started < 45


def test_tfos_spark_mode_error_in_map_fun_reaches_the_driver(sc):
    cluster = TFCluster.run(
        sc,
        programs.fail_on,
        {"job": "worker", "index": 0, "others_sleep": 0},
        2,
        0,
        input_mode=TFCluster.InputMode.SPARK,
        master_node="chief",
    )
    with pytest.raises(NodeFailedError, match="ValueError: boom from worker:0"):
        cluster.train(sc.parallelize(range(100), 2), 1)
