"""OpenLineage facets of the operators, with the OpenLineage provider installed (the ``test`` extra).

The operators run against the scripted backend of fakes.py and a real run directory; the lineage they
report is read the way the provider reads it (its DefaultExtractor) and serialized the way the
OpenLineage client sends it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from openlineage.client.serde import Serde

from airflow_tfos.hooks.run_dir import run_tag
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
from tests.conftest import REPO
from tests.support.fakes import FakeBackend, make_context, use_backend

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
        "num_workers": 2,
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


def test_hdfs_paths_naming_no_namenode_take_the_clusters_default_file_system(tmp_path, monkeypatch):
    conf_dir = tmp_path / "hadoop-conf"
    conf_dir.mkdir()
    (conf_dir / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name><value>hdfs://nn.example:8020</value></property>"
        "</configuration>"
    )
    op = train_op(tmp_path, data={"format": "parquet", "path": "hdfs:///data/day=2026-11-21"})
    use_backend(op, FakeBackend())
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    assert ids(op.get_openlineage_facets_on_start().inputs) == [("hdfs", "/data/day=2026-11-21")]
    monkeypatch.setenv("HADOOP_CONF_DIR", str(conf_dir))
    assert ids(op.get_openlineage_facets_on_start().inputs) == [("hdfs://nn.example:8020", "/data/day=2026-11-21")]


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


# --- the parent job handed to the Spark application -----------------------------------------------------------


@pytest.fixture
def yarn_submit(monkeypatch, tmp_path):
    """The real TFoSHook on YARN: the RM emulator and a stand-in spark-submit that records its command line."""
    from airflow_tfos.hooks.tfos import TFoSHook
    from airflow_tfos.testing.yarn import ResourceManagerEmulator
    from tests.support.tfos_hook_fakes import SubmissionBroker, read_records, write_fake_spark_submit

    with ResourceManagerEmulator() as rm, SubmissionBroker(rm) as broker:
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_OL", json.dumps({"conn_type": "spark", "host": "yarn"}))
        monkeypatch.setenv(
            "AIRFLOW_CONN_YARN_OL", json.dumps({"conn_type": "yarn", "host": rm.addresses[0], "login": "a"})
        )
        monkeypatch.setenv("FAKE_YARN_BROKER", broker.url)
        monkeypatch.setenv("FAKE_SPARK_SUBMIT_RECORDS", str(tmp_path / "records"))
        binary = str(write_fake_spark_submit(tmp_path / "bin"))

        def submit(**conf) -> dict[str, str]:
            hook = TFoSHook(
                spark_conn_id="spark_ol", yarn_conn_id="yarn_ol", spark_binary=binary, tracker_dir=str(tmp_path / "t")
            )
            hook.submit("hdfs:///runs/ol", tag=f"tfos-ol-{len(list((tmp_path / 'records').glob('*')))}",
                        name="ol", num_nodes=2, conf=conf)  # fmt: skip
            return read_records(tmp_path / "records")[-1]["conf"]

        yield submit


@pytest.fixture(autouse=False)
def fresh_openlineage_conf():
    """The provider caches its settings (namespace, transport): read them again from this test's environment."""
    from airflow.providers.openlineage import conf as ol_conf

    def clear():
        for value in vars(ol_conf).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()

    clear()
    yield
    clear()


def _task_context():
    """A task's context as the task runner sets it (its TI and DAG run), for the provider's macros."""
    from types import SimpleNamespace

    dag_run = SimpleNamespace(
        logical_date=datetime(2026, 11, 21, tzinfo=UTC), run_after=None, conf={}, clear_number=0, dag_id="nightly"
    )
    ti = SimpleNamespace(dag_id="nightly", task_id="train", try_number=2, map_index=-1, dag_run=dag_run)
    ti.get_template_context = lambda: {"dag_run": dag_run}
    return {"ti": ti, "dag_run": dag_run}


def test_the_submitted_application_carries_the_task_s_openlineage_parent(
    yarn_submit, monkeypatch, fresh_openlineage_conf
):
    from uuid import UUID

    from airflow.sdk.execution_time.context import set_current_context

    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps({"type": "console"}))
    monkeypatch.setenv("AIRFLOW__OPENLINEAGE__NAMESPACE", "prod-airflow")
    assert not any(k.startswith("spark.openlineage") for k in yarn_submit())  # outside a task: nothing
    with set_current_context(_task_context()):
        conf = yarn_submit()
        kept = yarn_submit(**{"spark.openlineage.parentRunId": "given-by-the-user"})
    run_id = conf["spark.openlineage.parentRunId"]
    assert UUID(run_id).version == 7  # the provider's run id of the task: a UUIDv7 of its logical date
    assert int(UUID(run_id).hex[:12], 16) // 1000 == int(datetime(2026, 11, 21, tzinfo=UTC).timestamp())
    assert conf["spark.openlineage.parentJobName"] == "nightly.train"
    assert conf["spark.openlineage.parentJobNamespace"] == conf["spark.openlineage.rootParentJobNamespace"]
    assert conf["spark.openlineage.parentJobNamespace"] == "prod-airflow"
    assert conf["spark.openlineage.rootParentJobName"] == "nightly"
    assert UUID(conf["spark.openlineage.rootParentRunId"]) != UUID(run_id)
    assert (
        kept["spark.openlineage.parentRunId"] == "given-by-the-user" and "spark.openlineage.parentJobName" not in kept
    )


def test_no_openlineage_settings_without_the_provider_or_when_it_is_disabled(
    yarn_submit, monkeypatch, fresh_openlineage_conf
):
    from airflow.sdk.execution_time.context import set_current_context

    with set_current_context(_task_context()):
        monkeypatch.setenv("AIRFLOW__OPENLINEAGE__DISABLED", "true")
        assert not any(k.startswith("spark.openlineage") for k in yarn_submit())
        monkeypatch.delenv("AIRFLOW__OPENLINEAGE__DISABLED")
        monkeypatch.setenv("AIRFLOW__OPENLINEAGE__TRANSPORT", json.dumps({"type": "console"}))
        monkeypatch.setitem(sys.modules, "airflow.providers.openlineage.utils.spark", None)  # not installed
        assert not any(k.startswith("spark.openlineage") for k in yarn_submit())
