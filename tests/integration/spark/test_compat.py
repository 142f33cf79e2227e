"""TensorFlowOnSpark 2.2.5 programs run on airflow-tfos with only their import changed."""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
from pathlib import Path

import pytest

from airflow_tfos.runtime import NodeFailedError
from airflow_tfos.runtime.compat import TFCluster, TFNode
from tests.support import programs

pytestmark = pytest.mark.integration

log = logging.getLogger(__name__)

PROGRAMS = Path(__file__).parent / "tfos_programs"


def load_migrated(tmp_path: Path, source: Path):
    """Copy a TFoS program, change nothing but its import, and load it as the user's driver script."""
    text = source.read_text()
    assert "from tensorflowonspark import" in text
    migrated = text.replace("from tensorflowonspark import", "from airflow_tfos.runtime.compat import")
    assert "tensorflowonspark" not in migrated.replace('"""', "").split("import argparse")[1]
    name = f"migrated_{source.stem}"
    path = tmp_path / f"{name}.py"
    path.write_text(migrated)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)  # as a driver script's functions are shipped
    return module


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    """MNIST-shaped data in mnist_data_setup.py's layouts (``csv/``, ``tfr/``), and its splits as arrays."""
    from tests.integration.spark.tfos_programs import mnist_data

    root = tmp_path_factory.mktemp("mnist")
    splits = mnist_data.write(str(root))
    return root, splits


def score_export(export_dir: Path, images, labels) -> tuple[float, list[int]]:
    """Accuracy of the SavedModel on ``images``/``labels``, and its predictions, computed here (not by the program)."""
    import numpy as np
    import tensorflow as tf

    predict = tf.saved_model.load(str(export_dir)).signatures["serving_default"]
    (name,) = predict.structured_input_signature[1]
    (scores,) = predict(**{name: tf.constant(images.reshape(-1, 28, 28, 1).astype(np.float32) / 255)}).values()
    preds = scores.numpy().argmax(axis=1)
    return float((preds == labels).mean()), preds.tolist()


@pytest.fixture(scope="module")
def spark_mode_export(sc, mnist, tmp_path_factory):
    """The export of mnist_spark.py (InputMode.SPARK), run with its README's arguments, scaled down."""
    root, _ = mnist
    out = tmp_path_factory.mktemp("mnist_spark")
    program = load_migrated(out, PROGRAMS / "mnist_spark.py")
    args = program.parse_args(
        f"--cluster_size 2 --images_labels {root}/csv/train --model_dir {out}/mnist_model"
        f" --export_dir {out}/mnist_export --epochs 2 --batch_size 32 --num_examples 1800 --learning_rate 0.1".split()
    )
    started = time.monotonic()
    cluster = program.main(sc, args)
    log.info("mnist_spark: trained in %.1f s", time.monotonic() - started)
    return program, args, cluster, out


def test_tfos_mnist_spark_trains_on_fed_csv_rows_after_changing_only_its_import(spark_mode_export, mnist):
    _, _, _, out = spark_mode_export
    _, splits = mnist
    assert (out / "mnist_export" / "saved_model.pb").exists()
    assert any((out / "mnist_model").glob("weights-0002*"))  # the chief's weights after each epoch
    accuracy, _ = score_export(out / "mnist_export", *splits["test"])
    log.info("mnist_spark: test accuracy %.3f", accuracy)
    assert accuracy >= 0.9


def test_tfos_spark_mode_inference_answers_one_row_per_input_in_order(sc, spark_mode_export, mnist):
    import numpy as np

    program, args, _, out = spark_mode_export
    root, splits = mnist

    test_dir = str(root / "csv" / "test")
    started = time.monotonic()
    results = program.infer(sc, args, test_dir).collect()
    log.info("mnist_spark inference: %d rows in %.1f s", len(results), time.monotonic() - started)
    rows = [list(map(int, line.split(","))) for line in sc.textFile(test_dir).collect()]  # the input, in its order
    assert len(rows) == len(splits["test"][1])
    labels, images = np.array([r[0] for r in rows]), np.array([r[1:] for r in rows], dtype=np.uint8)
    assert [label for label, _ in results] == labels.tolist()  # one result per input row, in order
    _, expected = score_export(out / "mnist_export", images, labels)
    agree = sum(p == e for (_, p), e in zip(results, expected, strict=True)) / len(expected)
    assert agree >= 0.99


def test_tfos_mnist_inference_writes_one_prediction_per_input_with_tfparallel(sc, spark_mode_export, mnist, tmp_path):
    from collections import Counter

    _, _, _, out = spark_mode_export
    root, splits = mnist
    images, labels = splits["test"]
    program = load_migrated(tmp_path, PROGRAMS / "mnist_inference.py")
    args = program.parse_args(
        f"--cluster_size 3 --images_labels {root}/tfr/test --export_dir {out}/mnist_export"
        f" --output {tmp_path}/predictions".split()
    )
    started = time.monotonic()
    program.main(sc, args)
    log.info("mnist_inference: %.1f s", time.monotonic() - started)
    parts = sorted((tmp_path / "predictions").glob("part-*"))
    assert [p.name for p in parts] == ["part-00000", "part-00001", "part-00002"]  # one per instance
    rows = [tuple(map(int, line.split())) for p in parts for line in p.read_text().splitlines()]
    assert len(rows) == len(labels) and Counter(r[0] for r in rows) == Counter(labels.tolist())
    accuracy, expected = score_export(out / "mnist_export", images, labels)
    assert Counter(zip(labels.tolist(), expected, strict=True)) == Counter(rows)
    log.info("mnist_inference: accuracy %.3f (independent %.3f)", sum(a == b for a, b in rows) / len(rows), accuracy)


def test_tfos_mnist_tf_trains_in_tensorflow_mode_after_changing_only_its_import(sc, mnist, tmp_path):
    root, splits = mnist
    program = load_migrated(tmp_path, PROGRAMS / "mnist_tf.py")
    export_dir, model_dir = tmp_path / "mnist_export", tmp_path / "mnist_model"
    args = program.parse_args(
        f"--cluster_size 2 --model_dir {model_dir} --export_dir {export_dir} --data_dir {root} --epochs 2"
        " --steps_per_epoch 20 --batch_size 32 --buffer_size 2000 --learning_rate 0.1".split()
    )
    started = time.monotonic()
    cluster = program.main(sc, args)
    log.info("mnist_tf: trained in %.1f s", time.monotonic() - started)
    assert (export_dir / "saved_model.pb").exists()
    assert any(model_dir.glob("weights-0002*"))
    assert list((model_dir / "train").glob("events.out.tfevents.*"))  # its TensorBoard callback's logs
    assert [n["job_name"] for n in cluster.cluster_info] == ["chief", "worker"]
    accuracy, _ = score_export(export_dir, *splits["test"])
    log.info("mnist_tf: test accuracy %.3f", accuracy)
    assert accuracy >= 0.9


def test_tfos_mnist_tf_ds_reads_its_tfrecord_shards_after_changing_only_its_import(sc, mnist, tmp_path):
    root, splits = mnist
    program = load_migrated(tmp_path, PROGRAMS / "mnist_tf_ds.py")
    export_dir = tmp_path / "mnist_export"
    args = program.parse_args(
        f"--cluster_size 2 --images_labels {root}/tfr/train/part-r-* --model_dir {tmp_path}/mnist_model"
        f" --export_dir {export_dir} --epochs 2 --batch_size 32 --num_examples 1800 --learning_rate 0.1".split()
    )
    started = time.monotonic()
    program.main(sc, args)
    log.info("mnist_tf_ds: trained in %.1f s", time.monotonic() - started)
    assert (export_dir / "saved_model.pb").exists()
    accuracy, _ = score_export(export_dir, *splits["test"])
    log.info("mnist_tf_ds: test accuracy %.3f", accuracy)
    assert accuracy >= 0.9


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
