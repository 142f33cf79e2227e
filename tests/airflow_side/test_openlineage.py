"""OpenLineage facets of the operators, with the OpenLineage provider installed (the ``test`` extra).

The operators run against the scripted backend of fakes.py and a real run directory; the lineage they
report is read the way the provider reads it (its DefaultExtractor) and serialized the way the
OpenLineage client sends it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from openlineage.client.serde import Serde

from airflow_tfos.hooks.runs import run_tag
from airflow_tfos.operators import TFoSFeedOperator, TFoSInferenceOperator, TFoSTrainOperator
from airflow_tfos.operators.lineage import (
    CATALOG_NAMESPACE,
    INPUT_FACET,
    MODEL_FACET,
    Namespaces,
    data_id,
    metastore_namespace,
    namespaces_for,
    path_id,
    table_id,
)
from airflow_tfos.shared.rundir import RunDir
from tests.airflow_side.fakes import FakeBackend, make_context, use_backend
from tests.conftest import REPO

FEED = {"features": ["pixels", "hour"], "label": "label", "batch_size": 32}


def as_dict(dataset) -> dict:
    """The dataset as the OpenLineage client sends it."""
    return json.loads(Serde.to_json(dataset))


def ids(datasets) -> list[tuple[str, str]]:
    return [(d.namespace, d.name) for d in datasets]


def train_op(tmp_path, **kwargs) -> TFoSTrainOperator:
    options = {
        "task_id": "train",
        "train_fn": "pkg.mod:main_fun",
        "num_nodes": 2,
        "data": {"format": "parquet", "path": "/data/day=2026-11-21"},
        "feed": FEED,
        "run_dir": str(tmp_path / "run"),
        "poll_interval": 0.01,
        "deferrable": False,
        "ship_code": False,  # pkg.mod is not importable here: nothing to ship
        **kwargs,
    }
    return TFoSTrainOperator(**options)


def trained(op: TFoSTrainOperator, tmp_path, *, step: int = 40) -> dict:
    """Run ``op`` against a backend whose application exports a model, as real training does."""
    backend = FakeBackend()
    use_backend(op, backend)
    rundir = RunDir(str(tmp_path / "run"))
    digest = op.request_hash()

    def export(app_id):
        staging = rundir.export_staging()
        rundir.publish_export(staging, spec_hash=digest, step=step, metrics={"loss": 0.25, "accuracy": 0.97})

    backend.on_submit = export
    return op.execute(make_context())


# --- names -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/data/day", ("file", "/data/day")),
        ("/data/day/", ("file", "/data/day")),
        ("file:///data/day", ("file", "/data/day")),
        ("file://edge-1/data/day", ("file://edge-1", "/data/day")),
        ("hdfs://nameservice1/data/day", ("hdfs://nameservice1", "/data/day")),
        ("hdfs://nn.example.com:8020/data/day", ("hdfs://nn.example.com:8020", "/data/day")),
        ("hdfs://etl@nn.example.com:8020/data/day", ("hdfs://nn.example.com:8020", "/data/day")),
        ("webhdfs://nn.example.com:9870/data/day", ("webhdfs://nn.example.com:9870", "/data/day")),
        ("swebhdfs://nn.example.com:9871/data", ("swebhdfs://nn.example.com:9871", "/data")),
        ("hdfs://ns/data/part-?.parquet", ("hdfs://ns", "/data/part-?.parquet")),
        ("s3a://bucket/data/day", ("s3://bucket", "data/day")),
        ("gs://bucket/data/day", ("gs://bucket", "data/day")),
    ],
)
def test_paths_are_named_as_the_openlineage_naming_spec_says(path, expected):
    assert path_id(path) == expected


def test_paths_without_a_scheme_or_namenode_take_the_given_namespaces():
    assert path_id("/data/day", default_namespace="hdfs://ns") == ("hdfs://ns", "/data/day")
    assert path_id("hdfs:///data/day", hdfs_namespace="hdfs://ns") == ("hdfs://ns", "/data/day")
    assert path_id("hdfs:///data/day") == ("hdfs", "/data/day")


def test_tables_are_database_qualified():
    assert table_id("sales.orders") == (CATALOG_NAMESPACE, "sales.orders")
    assert table_id("orders", catalog_namespace="hive://meta:9083") == ("hive://meta:9083", "default.orders")
    assert metastore_namespace({"spark.hadoop.hive.metastore.uris": "thrift://m1:9083,thrift://m2:9083"}) == (
        "hive://m1:9083"
    )
    assert metastore_namespace({"spark.hive.metastore.uris": "thrift://m:9083"}) == "hive://m:9083"
    assert metastore_namespace({}) is None


def test_data_of_each_format():
    ns = Namespaces(default_fs="hdfs://ns", hdfs="hdfs://ns", catalog="hive://m:9083")
    assert data_id({"format": "parquet", "path": "/d"}, ns) == ("hdfs://ns", "/d")
    assert data_id({"format": "csv", "path": "file:///d.csv"}, ns) == ("file", "/d.csv")
    assert data_id({"format": "tfrecord", "path": "/d"}, ns, read_by_spark=False) == ("file", "/d")
    assert data_id({"format": "table", "table": "db.t"}, ns) == ("hive://m:9083", "db.t")
    assert data_id({"format": "function", "function": "pkg.mod:frame"}, ns) is None
    assert data_id(None, ns) is None


def test_the_default_file_system_comes_from_the_spark_settings_else_the_backend():
    conf = {"spark.hadoop.fs.defaultFS": "hdfs://prod-ns"}
    assert namespaces_for(conf, backend=lambda: "local") == Namespaces("hdfs://prod-ns", "hdfs://prod-ns")
    assert namespaces_for({}, backend=lambda: "yarn", nameservice=lambda: "ns1").default_fs == "hdfs://ns1"
    assert namespaces_for({}, backend=lambda: "yarn").default_fs == "hdfs"
    assert namespaces_for({}, backend=lambda: "local", nameservice=lambda: "ns1") == Namespaces("file", "hdfs://ns1")

    def broken():
        raise RuntimeError("no such connection")

    assert namespaces_for({}, backend=broken, nameservice=broken) == Namespaces()


# --- the training operator ------------------------------------------------------------------------------------


def test_training_reports_its_data_with_the_fed_columns_and_the_export_with_spec_hash_step_metrics(tmp_path):
    op = train_op(tmp_path, validation_data={"format": "csv", "path": "hdfs://ns/data/validation.csv"})
    result = trained(op, tmp_path, step=40)
    lineage = op.get_openlineage_facets_on_complete(None)
    assert ids(lineage.inputs) == [("file", "/data/day=2026-11-21"), ("hdfs://ns", "/data/validation.csv")]
    data = as_dict(lineage.inputs[0])
    assert [f["name"] for f in data["facets"]["schema"]["fields"]] == ["pixels", "hour", "label"]
    (export,) = lineage.outputs
    assert (export.namespace, export.name) == ("file", str(tmp_path / "run" / "export"))
    model = as_dict(export)["facets"][MODEL_FACET]
    assert model["format"] == "tensorflow_saved_model"
    assert model["specHash"] == result["spec_hash"] == op.request_hash()
    assert model["step"] == 40 and model["metrics"] == {"loss": 0.25, "accuracy": 0.97}
    assert model["_producer"] and model["_schemaURL"].startswith("https://")


def test_the_input_and_the_model_carry_the_fingerprint_of_the_listing_the_run_started_from(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name, size in (("part-0.parquet", 700), ("part-1.parquet", 300), ("_SUCCESS", 0)):
        (data / name).write_bytes(b"p" * size)
    op = train_op(tmp_path, data={"format": "parquet", "path": str(data)})
    result = trained(op, tmp_path)
    stored = RunDir(str(tmp_path / "run")).read_fingerprint()
    lineage = op.get_openlineage_facets_on_complete(None)
    facet = as_dict(lineage.inputs[0])["facets"][INPUT_FACET]
    assert facet["files"] == 2 and facet["bytes"] == sum(p.stat().st_size for p in data.glob("part-*"))
    assert facet["hash"] == stored["inputs"]["data"]["hash"] and facet["runFingerprint"] == stored["hash"]
    model = as_dict(lineage.outputs[0])["facets"][MODEL_FACET]
    assert model["fingerprint"] == result["fingerprint"] == stored["hash"]


def test_hdfs_and_webhdfs_inputs_and_the_model_it_starts_from(tmp_path):
    op = train_op(
        tmp_path,
        data={"format": "parquet", "path": "hdfs://nameservice1/warehouse/events/day=2026-11-21"},
        validation_data={"format": "parquet", "path": "webhdfs://nn.example.com:9870/warehouse/holdout"},
        warm_start="hdfs://nameservice1/models/digits/2026-11-20/export",
    )
    trained(op, tmp_path)
    lineage = op.get_openlineage_facets_on_complete(None)
    assert ids(lineage.inputs) == [
        ("hdfs://nameservice1", "/warehouse/events/day=2026-11-21"),
        ("webhdfs://nn.example.com:9870", "/warehouse/holdout"),
        ("hdfs://nameservice1", "/models/digits/2026-11-20/export"),
    ]
    assert "schema" not in as_dict(lineage.inputs[2])["facets"]  # the model is not fed by columns


def test_a_table_on_yarn_with_a_metastore_and_a_default_file_system(tmp_path):
    conf = {"spark.hive.metastore.uris": "thrift://metastore.example.com:9083"}
    op = train_op(tmp_path, data={"format": "table", "table": "events"}, conf=conf)
    trained(op, tmp_path)
    assert ids(op.get_openlineage_facets_on_complete(None).inputs) == [
        ("hive://metastore.example.com:9083", "default.events")
    ]


def test_paths_without_a_scheme_are_on_hdfs_when_spark_runs_on_yarn(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_WEBHDFS_LINEAGE",
        json.dumps({"conn_type": "webhdfs", "host": "nn1,nn2", "extra": {"nameservice": "prodns"}}),
    )
    op = train_op(tmp_path, webhdfs_conn_id="webhdfs_lineage")
    backend = FakeBackend()
    backend.backend = "yarn"  # what TFoSHook.backend says for a spark connection whose master is yarn
    use_backend(op, backend)
    assert ids(op.get_openlineage_facets_on_start().inputs) == [("hdfs://prodns", "/data/day=2026-11-21")]


def test_files_the_tf_nodes_read_themselves_are_local_without_a_scheme(tmp_path):
    op = train_op(tmp_path, input_mode="TENSORFLOW", data={"format": "tfrecord", "path": "/data/shards"}, feed=None)
    op.__dict__["hook"] = type("Yarn", (), {"backend": "yarn"})()
    (data,) = op.get_openlineage_facets_on_start().inputs
    assert (data.namespace, data.name) == ("file", "/data/shards")
    assert as_dict(data)["facets"] == {}


def test_at_start_the_export_is_named_without_facets_and_a_default_run_dir_is_not_guessed(tmp_path):
    op = train_op(tmp_path)
    use_backend(op, FakeBackend())
    (export,) = op.get_openlineage_facets_on_start().outputs
    assert export.name == str(tmp_path / "run" / "export") and export.facets == {}
    unknown = train_op(tmp_path, run_dir=None)
    use_backend(unknown, FakeBackend())
    assert unknown.get_openlineage_facets_on_start().outputs == []


def test_a_run_that_was_exported_already_reports_the_same_model(tmp_path):
    first = train_op(tmp_path)
    trained(first, tmp_path, step=40)
    again = train_op(tmp_path)
    use_backend(again, FakeBackend())
    again.execute(make_context())
    assert as_dict(again.get_openlineage_facets_on_complete(None).outputs[0]) == as_dict(
        first.get_openlineage_facets_on_complete(None).outputs[0]
    )


def test_the_providers_extractor_reads_the_operator(tmp_path):
    from airflow.providers.openlineage.extractors.base import DefaultExtractor

    op = train_op(tmp_path)
    trained(op, tmp_path)
    lineage = DefaultExtractor(op).extract_on_complete(None)
    assert ids(lineage.inputs) == [("file", "/data/day=2026-11-21")]
    assert MODEL_FACET in lineage.outputs[0].facets


# --- feed and inference ---------------------------------------------------------------------------------------


def test_a_feed_reports_its_data_and_the_checkpoints_it_brought_to_a_step(tmp_path):
    run_dir = str(tmp_path / "run")
    rundir = RunDir(run_dir)
    backend = FakeBackend()
    backend.add("application_1_0001", "RUNNING", tags=[run_tag(run_dir)])
    rundir.mark_feed_done("day-1", step=24)
    op = TFoSFeedOperator(
        task_id="feed",
        run_dir=run_dir,
        data={"format": "parquet", "path": "webhdfs://nn:9870/data/day-1"},
        feed_id="day-1",
        deferrable=False,
    )
    use_backend(op, backend)
    op.execute(make_context("feed"))
    lineage = op.get_openlineage_facets_on_complete(None)
    assert ids(lineage.inputs) == [("webhdfs://nn:9870", "/data/day-1")]
    (checkpoints,) = lineage.outputs
    assert (checkpoints.namespace, checkpoints.name) == ("file", f"{run_dir}/checkpoints")
    model = as_dict(checkpoints)["facets"][MODEL_FACET]
    assert model["format"] == "tensorflow_checkpoint" and model["step"] == 24


def test_inference_reports_data_and_model_in_and_predictions_with_their_row_count_out(tmp_path):
    out = tmp_path / "scores"
    op = TFoSInferenceOperator(
        task_id="score",
        model_path="hdfs://ns/models/digits/export",
        data={"format": "parquet", "path": "hdfs://ns/data/today"},
        features=["pixels"],
        output_path=str(out),
        run_dir=str(tmp_path / "run"),
        poll_interval=0.01,
        deferrable=False,
    )
    backend = FakeBackend()

    def write_output(app_id):
        out.mkdir()
        (out / "_SUCCESS").write_text("")
        RunDir(str(tmp_path / "run")).write_status("SUCCEEDED", result={"rows": 1797})

    backend.on_submit = write_output
    use_backend(op, backend)
    op.execute(make_context("score"))
    lineage = op.get_openlineage_facets_on_complete(None)
    assert ids(lineage.inputs) == [("hdfs://ns", "/data/today"), ("hdfs://ns", "/models/digits/export")]
    assert [f["name"] for f in as_dict(lineage.inputs[0])["facets"]["schema"]["fields"]] == ["pixels"]
    (predictions,) = lineage.outputs
    assert (predictions.namespace, predictions.name) == ("file", str(out))
    assert as_dict(predictions)["outputFacets"]["outputStatistics"]["rowCount"] == 1797


# --- OpenLineage is imported only when lineage is asked for ---------------------------------------------------


def test_importing_the_operators_does_not_import_openlineage():
    code = (
        "import sys, airflow.sdk\n"
        "before = {m for m in sys.modules if 'openlineage' in m}\n"
        "import airflow_tfos.operators, airflow_tfos.sensors\n"
        "new = sorted({m for m in sys.modules if 'openlineage' in m} - before)\n"
        "print(new, 'openlineage' in sys.modules, 'airflow_tfos.operators.lineage' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[] False False"
