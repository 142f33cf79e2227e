"""A typo in an operator's argument fails when the DAG file is parsed, naming the task, the argument and the
known choices; a templated value is checked once rendered, before anything is submitted. No Spark, no TF."""

from __future__ import annotations

import json
import textwrap
import warnings
from dataclasses import fields

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_tfos.hooks.errors import RunConfigError, TFoSSubmitError
from airflow_tfos.operators import (
    ModelInService,
    TFoSFeedOperator,
    TFoSInferenceOperator,
    TFoSLaunchClusterOperator,
    TFoSTrainOperator,
)
from airflow_tfos.operators.checks import check_proxy_user
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import DATA_FORMATS, RunSpec, SpecError, parse_spec
from tests.conftest import REPO
from tests.support.fakes import FakeBackend, make_context, use_backend
from tests.unit.airflow_tfos.test_operators import FEED, train_op

#: The feed settings, as ``airflow_tfos.runtime.feed.plan.Feed`` names them (the spec's list is pinned to that
#: class by tests/unit/airflow_tfos/runtime/test_driver_faults.py; the Airflow side must not import the runtime).
FEED_KEYS = (
    "balance, batch_size, cast_floats, densify, features, fill, label, pad, ragged, read, seed, shuffle, "
    "shuffle_window, weight"
)


def raises(match: str):
    return pytest.raises(RunConfigError, match=match)


class TestUnknownKeys:
    def test_a_feed_typo_names_the_task_the_key_the_closest_key_and_every_known_one(self, tmp_path):
        with pytest.raises(RunConfigError) as caught:
            train_op(tmp_path, feed={"featurs": ["x"], "label": "y"})
        assert str(caught.value) == (
            "TFoSTrainOperator 'train': feed has unknown field(s): featurs (did you mean 'features'?); "
            f"known: {FEED_KEYS}"
        )
        assert isinstance(caught.value, ValueError)  # what Airflow shows as a DAG import error

    def test_every_unknown_feed_key_is_named(self, tmp_path):
        with raises(r"feed has unknown field\(s\): batchsize \(did you mean 'batch_size'\?\), zzz;"):
            train_op(tmp_path, feed={**FEED, "batchsize": 3, "zzz": 1})

    @pytest.mark.parametrize("argument", ["data", "validation_data"])
    def test_a_data_typo_names_the_argument(self, tmp_path, argument):
        bad = {"format": "parquet", "pth": "/data/day"}
        with raises(rf"'train': {argument} has unknown field\(s\): pth \(did you mean 'path'\?\); known: format, "):
            train_op(tmp_path, **{argument: bad})

    def test_an_unknown_format_lists_the_formats(self, tmp_path):
        with raises(
            rf"'train': data.format must be one of {', '.join(DATA_FORMATS)}, got 'parquett' "
            r"\(did you mean 'parquet'\?\)"
        ):
            train_op(tmp_path, data={"format": "parquett", "path": "/d"})

    def test_inference_data_is_checked_too(self, tmp_path):
        with raises(r"TFoSInferenceOperator 'score': data has unknown field\(s\): tabel \(did you mean 'table'\?\)"):
            TFoSInferenceOperator(
                task_id="score",
                model_path="/m",
                data={"format": "table", "tabel": "t"},
                features=["x"],
                output_path=str(tmp_path / "out"),
            )

    def test_the_feed_operator_checks_its_data(self):
        with raises(r"TFoSFeedOperator 'feed': data.format must be one of .*got 'csvv' \(did you mean 'csv'\?\)"):
            TFoSFeedOperator(task_id="feed", launch_task_id="launch", data={"format": "csvv", "path": "/d"})


class TestArguments:
    def test_a_dotted_train_fn_suggests_the_colon_form(self, tmp_path):
        with raises(r"train_fn must look like 'package.module:function', got 'pkg.mod.main_fun' "):
            train_op(tmp_path, train_fn="pkg.mod.main_fun")
        with raises(r"did you mean 'pkg.mod:main_fun'\?"):
            train_op(tmp_path, train_fn="pkg.mod.main_fun")

    def test_a_data_function_must_be_an_import_path(self, tmp_path):
        with raises(r"data.function must look like 'package.module:function', got 'make_data'"):
            train_op(tmp_path, data={"format": "function", "function": "make_data"})

    @pytest.mark.parametrize(
        ("num_ps", "message"),
        [
            (-1, "num_ps must be 0 or more, got -1"),
            (True, "field 'num_ps' must be an integer, not a boolean"),
            (1.5, "field 'num_ps' has the wrong type float"),
        ],
    )
    def test_parameter_servers_are_a_count(self, tmp_path, num_ps, message):
        with raises(rf"'train': {message}"):
            train_op(tmp_path, num_ps=num_ps)

    @pytest.mark.parametrize(
        ("timeout", "message"),
        [
            (0, "stall_timeout must be positive seconds or null, got 0"),
            (-5, "stall_timeout must be positive seconds or null, got -5"),
            (True, "field 'stall_timeout' must be a number, not a boolean"),
            ("30", "field 'stall_timeout' has the wrong type str"),
        ],
    )
    def test_stall_timeout_is_positive_seconds(self, tmp_path, timeout, message):
        with raises(rf"'train': {message}"):
            train_op(tmp_path, stall_timeout=timeout)

    def test_stall_timeout_reaches_the_spec_only_when_changed(self, tmp_path):
        assert train_op(tmp_path, stall_timeout=30).build_spec(code=False).to_json()["stall_timeout"] == 30
        assert "stall_timeout" not in train_op(tmp_path).build_spec(code=False).to_json()  # old specs keep their hash

    def test_keras_lists_its_choices(self, tmp_path):
        with raises(r"keras must be one of auto, tf_keras, keras3, got 'keras2'"):
            train_op(tmp_path, keras="keras2")

    @pytest.mark.parametrize("memory", ["2 gigs", "0", "-1g", "", True])
    def test_executor_memory_is_a_spark_memory_size(self, tmp_path, memory):
        with raises(rf"'train': executor_memory must be a Spark memory size such as 512m or 2g .*got {memory!r}"):
            train_op(tmp_path, executor_memory=memory)

    @pytest.mark.parametrize("memory", ["512m", "2g", "2048", 1024, "4G"])
    def test_spark_memory_forms_pass(self, tmp_path, memory):
        train_op(tmp_path, executor_memory=memory, conf={"spark.driver.memory": memory})

    def test_driver_memory_in_conf_is_checked(self, tmp_path):
        with raises(r"conf\['spark.driver.memory'\] must be a Spark memory size .*got '4 gb please'"):
            train_op(tmp_path, conf={"spark.driver.memory": "4 gb please"})

    def test_executor_cores_are_a_count(self, tmp_path):
        with raises(r"executor_cores must be an integer >= 1, got 0"):
            train_op(tmp_path, executor_cores=0)

    @pytest.mark.parametrize(
        ("arguments", "message"),
        [
            ({"master_node": "leader"}, r"master_node must be 'chief', 'master' or None, got 'leader'"),
            ({"max_attempts": 0}, r"max_attempts must be at least 1, got 0"),
            ({"gpus_per_node": -1}, r"gpus_per_node must be 0 or more, got -1"),
            ({"feed": {**FEED, "batch_size": 0}}, r"feed: Feed.batch_size must be a positive integer, got 0"),
            ({"feed": {**FEED, "shuffle_window": 0}}, r"feed: Feed.shuffle_window must be positive, got 0"),
            ({"feed": {**FEED, "balance": "even"}}, r"feed: Feed.balance must be one of 'pad', 'drop', got 'even'"),
            (
                {"feed": {**FEED, "read": "fast"}},
                r"feed: Feed.read must be one of 'auto', 'direct', 'spark', got 'fast'",
            ),
        ],
    )
    def test_what_the_cluster_would_refuse_is_refused_at_parse_time(self, tmp_path, arguments, message):
        with raises(rf"TFoSTrainOperator 'train': {message}"):
            train_op(tmp_path, **arguments)

    def test_inference_batch_size_is_a_count(self, tmp_path):
        with raises(r"TFoSInferenceOperator 'score': batch_size must be an integer >= 1, got 0"):
            TFoSInferenceOperator(
                task_id="score",
                model_path="/m",
                data={"format": "table", "table": "t"},
                features=["x"],
                output_path=str(tmp_path / "out"),
                batch_size=0,
            )

    @pytest.mark.parametrize(
        ("arguments", "message"),
        [
            ({"ready_timeout": 0}, r"ready_timeout must be > 0 seconds, got 0"),
            ({"idle_timeout": -5}, r"idle_timeout must be > 0 seconds or None, got -5"),
        ],
    )
    def test_launch_timeouts_are_positive(self, tmp_path, arguments, message):
        with raises(rf"TFoSLaunchClusterOperator 'launch': {message}"):
            TFoSLaunchClusterOperator(
                task_id="launch", train_fn="pkg.mod:main", run_dir=str(tmp_path), ship_code=False, **arguments
            )

    def test_the_launch_operator_runs_the_same_checks(self, tmp_path):
        with raises(r"TFoSLaunchClusterOperator 'train': feed has unknown field\(s\): lable"):
            TFoSLaunchClusterOperator(
                task_id="train", train_fn="pkg.mod:main", run_dir=str(tmp_path), feed={"features": ["x"], "lable": "y"}
            )


class TestTemplatedValues:
    def test_a_templated_value_passes_construction_but_its_key_is_checked(self, tmp_path):
        train_op(tmp_path, data={"format": "{{ params.fmt }}", "path": "{{ ds }}"}, executor_memory="2g")
        with raises(r"data has unknown field\(s\): pth"):
            train_op(tmp_path, data={"format": "{{ params.fmt }}", "pth": "{{ ds }}"})
        with raises(r"feed has unknown field\(s\): batchsize"):
            train_op(tmp_path, feed={"features": "{{ params.cols }}", "batchsize": "{{ params.n }}"})

    def test_an_xcom_argument_waits_for_rendering(self, tmp_path):
        from datetime import datetime

        from airflow.sdk import DAG, task

        with DAG("xcom_data", start_date=datetime(2026, 1, 1), schedule=None):

            @task
            def today():
                return {"format": "parquet", "path": "/d"}

            op = train_op(tmp_path, data=today())
            with raises(r"feed has unknown field\(s\): lable"):
                train_op(tmp_path, task_id="typo", data=today(), feed={"features": ["x"], "lable": "y"})
        assert "xcom_pull" in str(op.data)

    def test_a_wholly_templated_argument_waits_for_rendering(self, tmp_path):
        train_op(tmp_path, feed="{{ params.feed }}", conf="{{ params.conf }}")

    @pytest.mark.parametrize(
        ("rendered", "message"),
        [
            ({"data": {"format": "parket", "path": "/d"}}, r"data.format must be one of .*got 'parket'"),
            ({"conf": {"spark.executor.memory": "lots"}}, r"conf\['spark.executor.memory'\] must be a Spark memory"),
            ({"feed": {"features": ["x"], "batch_size": "64"}}, r"feed field 'batch_size' has the wrong type str"),
        ],
    )
    def test_rendered_values_are_checked_before_anything_is_submitted(self, tmp_path, rendered, message):
        op = train_op(
            tmp_path,
            data={"format": "{{ params.fmt }}", "path": "/d"},
            conf={"spark.executor.memory": "{{ params.mem }}"},
            feed={"features": ["x"], "batch_size": "{{ params.n }}"},
        )
        backend = FakeBackend()
        use_backend(op, backend)
        defaults = {
            "data": {"format": "parquet", "path": "/d"},
            "conf": {"spark.executor.memory": "1g"},
            "feed": {"features": ["x"], "batch_size": 64},
        }
        for name, value in {**defaults, **rendered}.items():  # what Airflow's rendering leaves there
            setattr(op, name, value)
        with raises(rf"TFoSTrainOperator 'train': {message}") as caught:
            op.execute(make_context())
        assert isinstance(caught.value, AirflowFailException)  # no retry: it would render the same value
        assert backend.submitted == []
        assert RunDir(str(tmp_path)).read_spec() is None

    def test_rendering_through_airflow_then_the_check(self, tmp_path):
        op = train_op(tmp_path, data={"format": "{{ params.fmt }}", "path": "/d"}, params={"fmt": "parqet"})
        op.render_template_fields({"params": {"fmt": "parqet"}})
        assert op.data == {"format": "parqet", "path": "/d"}
        backend = FakeBackend()
        use_backend(op, backend)
        with raises(r"data.format must be one of .*got 'parqet' \(did you mean 'parquet'\?\)"):
            op.execute(make_context())
        assert backend.submitted == []


class TestSpec:
    BASE = {"train_fn": "a.b:c", "num_nodes": 2}

    def test_an_unknown_spec_field_names_the_closest_known_one(self):
        with pytest.raises(
            SpecError, match=r"spec.json has unknown field\(s\): num_node \(did you mean 'num_nodes'\?\)"
        ):
            parse_spec({**self.BASE, "num_node": 3})

    def test_an_unknown_feed_key_in_spec_json_is_an_error(self):
        spec = {**self.BASE, "data": {"format": "parquet", "path": "/d"}, "feed": {"features": ["x"], "lable": "y"}}
        with pytest.raises(SpecError, match=r"spec.json feed has unknown field\(s\): lable \(did you mean 'label'\?\)"):
            parse_spec(spec)

    def test_an_unknown_inference_key_is_an_error(self):
        inference = {"model_path": "/m", "features": ["x"], "output_path": "/o", "output_coll": "p"}
        with pytest.raises(
            SpecError, match=r"inference has unknown field\(s\): output_coll \(did you mean 'output_col'"
        ):
            parse_spec(
                {"kind": "inference", "num_nodes": 1, "data": {"format": "table", "table": "t"}, "inference": inference}
            )

    def test_negative_parameter_servers_are_an_error(self):
        with pytest.raises(SpecError, match="num_ps must be 0 or more, got -1"):
            parse_spec({**self.BASE, "num_ps": -1})

    def test_a_spec_written_by_the_first_release_is_still_read(self):
        """The fields of the first spec.json (the driver entrypoint's first commit) are all still known."""
        first = {
            "train_fn": "my_pkg.training:main_fun",
            "args": {"epochs": 5},
            "num_nodes": 2,
            "num_ps": 0,
            "input_mode": "SPARK",
            "data": {"format": "parquet", "path": "hdfs:///data/day=2026-11-21"},
            "feed": {"features": ["pixels"], "label": "label", "batch_size": 64},
            "max_attempts": 3,
            "env": {},
            "spec_hash": "0" * 16,
        }
        assert parse_spec(first).feed == first["feed"]
        assert {f.name for f in fields(RunSpec)} >= set(first)


DAG_WITH_A_TYPO = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_tfos.operators import TFoSTrainOperator

with DAG("typo", start_date=datetime(2026, 1, 1), schedule=None):
    TFoSTrainOperator(
        task_id="nightly_train",
        train_fn="pkg.mod:main_fun",
        data={"format": "parquet", "path": "/data/day"},
        feed={"featurs": ["x"], "label": "y"},
        ship_code=False,
    )
"""


def test_a_dag_file_with_a_typo_fails_to_import_with_the_message(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "typo_dag.py").write_text(textwrap.dedent(DAG_WITH_A_TYPO))
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.dags == {}
    [error] = bag.import_errors.values()
    assert "TFoSTrainOperator 'nightly_train': feed has unknown field(s): featurs (did you mean 'features'?)" in error


@pytest.mark.parametrize(
    "folder",
    [
        "example_dags",
        "docs/quickstart",
        "tests/integration/airflow/dags",
        "tests/drills/dags",
        "tests/integration/hadoop/dags",
    ],
)
def test_every_dag_folder_still_builds_with_no_deprecation_warning(folder):
    from airflow.dag_processing.dagbag import DagBag

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bag = DagBag(dag_folder=str(REPO / folder))
    assert bag.import_errors == {}
    assert bag.dags
    deprecated = [str(w.message) for w in caught if "num_nodes is now spelled num_workers" in str(w.message)]
    assert not deprecated, deprecated


def test_the_feed_operator_checks_its_rendered_data_before_requesting_the_feed(tmp_path):
    op = TFoSFeedOperator(task_id="feed", run_dir=str(tmp_path), data={"format": "{{ params.fmt }}", "path": "/d"})
    op.data = {"format": "tfrecords", "path": "/d"}  # what rendering left
    with raises(r"TFoSFeedOperator 'feed': data.format must be one of .*got 'tfrecords' \(did you mean 'tfrecord'\?\)"):
        op.execute(make_context(task_id="feed"))
    assert RunDir(str(tmp_path)).pending_feeds() == []


def test_the_spec_choices_are_the_runtimes():
    """What the Airflow side checks at parse time is what the cluster accepts: the runtime has no lists of its own,
    it reads the spec's (importing them starts no Spark and no TF)."""
    import re
    from pathlib import Path

    import airflow_tfos
    from airflow_tfos.runtime.feed import plan
    from airflow_tfos.runtime.node import cluster
    from airflow_tfos.shared import feed, spec

    runtime = Path(airflow_tfos.__file__).parent / "runtime"
    own = [p.name for p in runtime.rglob("*.py") if re.search(r"^\w+_MODES\s*=", p.read_text(), re.MULTILINE)]
    assert own == [] and plan.BALANCE_MODES is feed.BALANCE_MODES
    assert set(spec.MASTER_NODES) == {cluster.CHIEF, cluster.MASTER, None}
    assert FEED_KEYS.split(", ") == sorted(feed.Feed.__dataclass_fields__)


class TestTrapsOfANewcomer:
    """Mistakes a first DAG makes, each refused before anything is written or submitted, with the fix named."""

    def yarn_op(self, tmp_path, backend=None, **kwargs):
        op = train_op(tmp_path, **kwargs)
        backend = backend or FakeBackend()
        backend.backend = "yarn"  # what TFoSHook says for a spark connection whose master is yarn
        use_backend(op, backend)
        return op, backend

    def test_a_local_run_dir_with_a_yarn_master_is_refused_before_anything_is_written(self, tmp_path):
        op, backend = self.yarn_op(tmp_path / "run")
        with pytest.raises(AirflowFailException) as caught:
            op.prepare(make_context())
        assert str(caught.value).startswith(
            f"TFoSTrainOperator 'train': run_dir '{tmp_path / 'run'}' is on the local disk of the host that runs "
            "this task, but the Spark master is 'yarn': the application's driver and TF nodes run in YARN containers "
            "on other hosts, which cannot reach it. Give run_dir as an hdfs:// (or webhdfs://) URI; if every host "
            "mounts this path at the same place (NFS), pass local_paths_shared=True"
        )
        assert backend.submitted == [] and not (tmp_path / "run").exists()

    def test_the_default_run_dir_names_the_setting_to_change(self, tmp_path, monkeypatch):
        monkeypatch.setenv("AIRFLOW_TFOS_RUN_DIR_BASE", str(tmp_path / "runs"))
        op, _ = self.yarn_op(tmp_path / "run")
        op.run_dir = op._run_dir_as_written = None  # no run_dir argument: the default one
        with pytest.raises(AirflowFailException, match=r"run_dir '.*' is on the local disk .* Set \[tfos\] "
                           r"run_dir_base \(or \$AIRFLOW_TFOS_RUN_DIR_BASE\) to an HDFS folder"):  # fmt: skip
            op.prepare(make_context())

    @pytest.mark.parametrize(
        ("argument", "value"),
        [("warm_start", "/models/last"), ("log_dir", "file:///tmp/tb"), ("warm_start", "ModelInService")],
    )
    def test_a_local_warm_start_log_dir_or_registry_is_refused_too(self, tmp_path, argument, value):
        named = argument
        if value == "ModelInService":
            value = ModelInService(str(tmp_path / "models"))
            named = r"warm_start=ModelInService\(\.\.\.\)'s registry"
        op, backend = self.yarn_op("hdfs://nn/runs/r", **{argument: value})
        with pytest.raises(AirflowFailException, match=rf"'train': {named} '.*' is on the local disk"):
            op.prepare(make_context())
        assert backend.submitted == []

    def test_local_paths_every_host_mounts_are_allowed_when_the_dag_says_so(self, tmp_path):
        op, _ = self.yarn_op(tmp_path / "run", local_paths_shared=True)
        assert op.prepare(make_context()) is None  # nothing done yet: the task would submit now

    def test_a_local_master_takes_local_paths(self, tmp_path):
        op = train_op(tmp_path / "run")
        use_backend(op, FakeBackend())
        assert op.prepare(make_context()) is None

    def test_inference_checks_its_model_and_output_too(self, tmp_path):
        op = TFoSInferenceOperator(
            task_id="score", model_path="/models/current", data={"format": "parquet", "path": "hdfs://nn/d"},
            features=["x"], output_path="hdfs://nn/out", run_dir="hdfs://nn/runs/s",
        )  # fmt: skip
        backend = FakeBackend()
        backend.backend = "yarn"
        use_backend(op, backend)
        with pytest.raises(AirflowFailException, match=r"'score': model_path '/models/current' is on the local disk"):
            op.prepare(make_context("score"))

    @pytest.mark.parametrize("argument", ["data", "validation_data"])
    def test_tfrecord_files_in_spark_input_mode_fail_the_dag_import(self, tmp_path, argument):
        with pytest.raises(RunConfigError) as caught:
            train_op(tmp_path, **{argument: {"format": "tfrecord", "path": "hdfs://nn/data/day"}})
        assert str(caught.value) == (
            f"TFoSTrainOperator 'train': {argument}.format 'tfrecord' is read by the TF nodes themselves, but "
            "input_mode SPARK feeds what Spark reads (table, parquet, csv, function): use input_mode TENSORFLOW "
            "and read the files in train_fn (ctx.shard_files() and tfrecord_dataset()), or write the data as Parquet"
        )

    def test_tfrecord_files_in_tensorflow_input_mode_are_fine(self, tmp_path):
        train_op(tmp_path, input_mode="TENSORFLOW", feed=None, data={"format": "tfrecord", "path": "hdfs://nn/d"})

    def test_num_nodes_still_works_with_a_warning_and_the_same_spec(self, tmp_path):
        with pytest.warns(Warning, match=r"'train': num_nodes is now spelled num_workers: .* The spec and its hash "
                          "are the same either way"):  # fmt: skip
            old = train_op(tmp_path, num_workers=None, num_nodes=3)
        new = train_op(tmp_path, num_workers=3)
        assert old.build_spec(code=False).to_json() == new.build_spec(code=False).to_json()
        assert new.build_spec(code=False).num_nodes == 3 and new.num_executors() == 3
        with raises("give num_workers \\(num_nodes is its old spelling\\), not both"):
            train_op(tmp_path, num_workers=2, num_nodes=2)

    def test_the_spec_check_names_the_argument_the_dag_wrote(self, tmp_path):
        with raises(r"'train': num_workers must be at least 1, got 0$"):
            train_op(tmp_path, num_workers=0)

    def test_driver_memory_queue_and_name_reach_the_submission_as_spark_submit_spells_them(self, tmp_path):
        op = train_op(tmp_path / "run", driver_memory="3g", yarn_queue="nightly", name="churn {{ ds }}")
        op.render_template_fields({"ds": "2026-11-21"})
        resources = op.app_resources(make_context()["ti"])
        assert resources.name == "churn 2026-11-21"
        assert resources.conf == {"spark.driver.memory": "3g", "spark.yarn.queue": "nightly"}
        assert train_op(tmp_path / "run").app_resources(make_context()["ti"]).conf == {}
        with raises(r"driver_memory and conf\['spark.driver.memory'\] set the same Spark setting: give one of them"):
            train_op(tmp_path, driver_memory="3g", conf={"spark.driver.memory": "2g"})
        with raises("driver_memory must be a Spark memory size"):
            train_op(tmp_path, driver_memory="lots")

    def test_inference_templates_what_it_ships_and_takes_a_signature(self, tmp_path):
        op = TFoSInferenceOperator(
            task_id="score", model_path="/m", data={"format": "table", "table": "t"}, features=["x"],
            output_path=str(tmp_path / "out"), packed_env="{{ params.env }}", py_files=["{{ params.zip }}"],
            signature="predict_proba",
        )  # fmt: skip
        op.render_template_fields({"params": {"env": "hdfs://nn/envs/env.tar.gz#environment", "zip": "/code.zip"}})
        assert (op.packed_env, op.py_files) == ("hdfs://nn/envs/env.tar.gz#environment", ["/code.zip"])
        assert op.build_spec(code=False).inference["signature"] == "predict_proba"
        op.signature = "serving_default"  # the default is left out of the spec: earlier runs keep their hash
        assert "signature" not in op.build_spec(code=False).inference


def test_a_packed_env_with_an_alias_of_its_own_is_refused_and_its_own_alias_taken(tmp_path):
    with raises(r"packed_env 'hdfs:///envs/e.tar.gz#py' names an alias of its own: give the archive alone"):
        train_op(tmp_path, packed_env="hdfs:///envs/e.tar.gz#py")
    train_op(tmp_path, packed_env="hdfs:///envs/e.tar.gz#environment")  # the alias it is unpacked as anyway


# --- proxy_user: refused with Spark's own keytab login when the DAG is parsed, and before anything is submitted
# when the webhdfs connection would not read the run directory as the proxied user (run directories are 0700)
def train(**kwargs) -> TFoSTrainOperator:
    return TFoSTrainOperator(task_id="train", train_fn="pkg.mod:train", num_workers=2, **kwargs)


@pytest.mark.parametrize("key", ["spark.kerberos.keytab", "spark.kerberos.principal", "spark.yarn.keytab"])
def test_proxy_user_with_spark_s_own_keytab_login_is_refused_when_the_dag_is_parsed(key):
    with pytest.raises(ValueError, match=rf"proxy_user='alice' together with conf {key}: Spark refuses --proxy-user"):
        train(proxy_user="alice", conf={key: "x"})
    assert train(proxy_user="alice", conf={"spark.yarn.queue": "etl"}).proxy_user == "alice"
    assert "proxy_user" in TFoSTrainOperator.template_fields


def _webhdfs(monkeypatch, **extra) -> None:
    conn = {"conn_type": "webhdfs", "host": "nn", "port": 9870, "extra": {"auth": "kerberos", **extra}}
    monkeypatch.setenv("AIRFLOW_CONN_WEBHDFS_TEAM", json.dumps(conn))


def test_a_webhdfs_connection_that_reads_as_someone_else_is_refused_naming_it(monkeypatch):
    _webhdfs(monkeypatch)
    with pytest.raises(TFoSSubmitError) as refused:
        check_proxy_user("alice", "hdfs:///runs/d/t/1", "webhdfs_team")
    assert str(refused.value).startswith("proxy_user 'alice', but connection 'webhdfs_team' reads HDFS as 'its own")
    assert "set the connection's extra doas to 'alice'" in str(refused.value)
    _webhdfs(monkeypatch, doas="bob")
    with pytest.raises(TFoSSubmitError, match="reads HDFS as 'bob'"):
        check_proxy_user("alice", "hdfs:///runs/d/t/1", "webhdfs_team")


def test_a_webhdfs_connection_of_the_proxied_user_passes(monkeypatch):
    _webhdfs(monkeypatch, doas="alice")
    check_proxy_user("alice", "hdfs:///runs/d/t/1", "webhdfs_team")
    _webhdfs(monkeypatch, proxy_user="alice")  # WebHDFSHook's name: Airflow masks its value in logs
    check_proxy_user("alice", "hdfs:///runs/d/t/1", "webhdfs_team")
    check_proxy_user("alice", "/local/runs/d/t/1", "webhdfs_team")  # a local run directory: no HDFS user
    check_proxy_user(None, "hdfs:///runs/d/t/1", "webhdfs_team")
