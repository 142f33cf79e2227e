"""Where the extra links of a finished or running task lead, and the model Asset events of publishing.

The operators run at the hook boundary (a scripted backend) on real run directories and registries; the
history server is a small HTTP server the test starts, standing in for Spark's (which is not installed here).
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import replace

import pytest
from airflow.sdk import AssetAlias
from airflow.sdk.exceptions import TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

from airflow_tfos.hooks.backends.state import AppState
from airflow_tfos.hooks.spark_conf import spark_defaults
from airflow_tfos.hooks.tfos import TFoSHook
from airflow_tfos.links.tfos import SparkApplicationLink, TensorBoardLink, history_server_url
from airflow_tfos.operators import TFoSPublishModelOperator
from airflow_tfos.operators.publish import PUBLISHED_MODELS_ALIAS, model_asset, model_asset_uri
from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.rundir import RunDir
from tests.support.fakes import FakeBackend, history_server_stand_in, make_context, use_backend
from tests.unit.airflow_tfos.test_operators import export, train_op

UI = "http://127.0.0.1:4041"
BOARD = "http://127.0.0.1:6123"


def recording_context():
    """A task context whose task instance keeps every value pushed under each key, in order."""
    context = make_context()
    pushed: dict[str, list] = {}
    original = context["ti"].xcom_push

    def push(key, value):
        pushed.setdefault(key, []).append(value)
        original(key, value)

    context["ti"].xcom_push = push
    return context, pushed


def scripted_run(op, tmp_path, *, running_polls: int, on_poll=None) -> FakeBackend:
    """A backend whose application runs for ``running_polls`` polls with a UI, then ends with an export."""
    backend = FakeBackend()
    use_backend(op, backend)
    rundir, digest = RunDir(str(tmp_path)), op.request_hash()
    backend.on_submit = lambda app_id: export(rundir, digest)
    backend.next_script = [("RUNNING", "UNDEFINED")] * running_polls + [("FINISHED", "SUCCEEDED")]
    original, polls = backend.get_state, [0]

    def get_state(app_id):
        polls[0] += 1
        if on_poll:
            on_poll(polls[0], rundir)
        state = original(app_id)
        return replace(state, tracking_url=UI) if state.state == "RUNNING" else state

    backend.get_state = get_state
    return backend


class TestTensorBoardLink:
    def test_leads_to_the_address_the_node_recorded_while_the_application_runs_and_is_empty_after(self, tmp_path):
        op = train_op(tmp_path, tensorboard=True)
        assert op.build_spec(code=False).to_json()["tensorboard"] is True

        def node(poll, rundir):  # the chief starts TensorBoard on the 2nd poll and stops it at the end
            if poll == 2:
                rundir.write_tensorboard(BOARD, attempt=0)
            if poll == 5:
                rundir.clear_tensorboard()

        scripted_run(op, tmp_path, running_polls=6, on_poll=node)
        context, pushed = recording_context()
        op.execute(context)
        # the UI reads the link's own key while the task runs: the address, then nothing once TensorBoard stopped
        assert pushed[TensorBoardLink().xcom_key] == [BOARD, ""]
        assert TensorBoardLink().get_link(op, ti_key=None) == ""  # what the finished task keeps

    def test_off_by_default_never_reads_nor_pushes_an_address(self, tmp_path):
        op = train_op(tmp_path)
        assert "tensorboard" not in op.build_spec(code=False).to_json()  # specs without it keep their hash
        scripted_run(op, tmp_path, running_polls=3, on_poll=lambda poll, rundir: rundir.write_tensorboard(BOARD))
        context, pushed = recording_context()
        op.execute(context)
        assert TensorBoardLink().xcom_key not in pushed
        assert TensorBoardLink().get_link(op, ti_key=None) == ""


class TestApplicationLinkWhileDeferred:
    def test_the_link_leads_to_the_resource_managers_proxy_before_the_task_defers(self, tmp_path):
        """The trigger pushes no link while it waits: the task looks for the UI address the RM gives once it
        accepted the application (not at once after the submit) and pushes it before deferring."""
        op, backend = train_op(tmp_path, deferrable=True), FakeBackend()
        use_backend(op, backend)
        proxy = "http://rm.example:8088/proxy/{}/"

        def submitted(app_id):
            backend.script[app_id] = [
                AppState(app_id, "SUBMITTED"),
                AppState(app_id, "ACCEPTED"),
                AppState(app_id, "ACCEPTED", tracking_url=proxy.format(app_id)),
            ]

        backend.on_submit = submitted
        context, pushed = recording_context()
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        app_id = deferred.value.trigger.application_id
        assert pushed[SparkApplicationLink().xcom_key] == [proxy.format(app_id)]


class TestApplicationLinkAfterTheEnd:
    def test_a_local_application_that_ended_has_no_link_its_ui_ended_with_it(self, tmp_path):
        op = train_op(tmp_path)
        scripted_run(op, tmp_path, running_polls=2)
        context, pushed = recording_context()
        op.execute(context)
        assert pushed[SparkApplicationLink().xcom_key] == [UI]  # shown while it ran
        assert context["ti"].xcoms["tracking_url"] == UI  # recorded for the record
        assert SparkApplicationLink().get_link(op, ti_key=None) == ""

    def test_an_ended_application_links_the_history_server_when_one_is_named(self, tmp_path):
        op = train_op(tmp_path)
        backend = scripted_run(op, tmp_path, running_polls=2)
        backend.history = "http://history:18080/history/application_1700000000000_0100"
        op.execute(make_context())
        assert SparkApplicationLink().get_link(op, ti_key=None) == backend.history

    def test_a_deferred_task_does_not_keep_the_ui_the_trigger_saw_live(self, tmp_path):
        op = train_op(tmp_path)
        use_backend(op, FakeBackend())
        export(RunDir(str(tmp_path)), op.request_hash())
        app = AppState("local-1", "FINISHED", "SUCCEEDED")
        context = make_context()
        op.execute_complete(context, {"status": "done", "app": app.to_json(), "tracking_url": UI})
        assert context["ti"].xcoms["tracking_url"] == UI
        assert SparkApplicationLink().get_link(op, ti_key=None) == ""


@pytest.fixture
def history_server():
    with history_server_stand_in() as address:
        yield address


class TestHistoryServerUrl:
    APP = "application_1700000000000_0007"

    def test_from_the_spark_connection_extra_and_it_opens(self, history_server, monkeypatch):
        extra = {"spark.yarn.historyServer.address": history_server}
        connection = {"conn_type": "spark", "host": "yarn", "extra": extra}
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_HIST", json.dumps(connection))
        hook = TFoSHook(spark_conn_id="spark_hist")
        url = hook.history_url(AppState(self.APP, "FINISHED", "SUCCEEDED"))
        assert url == f"http://{history_server}/history/{self.APP}"
        with urllib.request.urlopen(url, timeout=10) as reply:
            assert reply.status == 200 and self.APP in reply.read().decode()
        assert hook.history_url(AppState(self.APP, "RUNNING")) is None  # its own UI is live: that is the link

    def test_the_operators_conf_wins_and_local_or_unnamed_gives_none(self, monkeypatch):
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_PLAIN", json.dumps({"conn_type": "spark", "host": "yarn"}))
        hook = TFoSHook(spark_conn_id="spark_plain")
        ended = AppState(self.APP, "FAILED", "FAILED")
        assert hook.history_url(ended) is None
        conf = {"spark.yarn.historyServer.address": "https://shs.example:18481/"}
        assert hook.history_url(ended, conf) == f"https://shs.example:18481/history/{self.APP}"
        assert hook.history_url(AppState("local-1-abc", "FINISHED", "SUCCEEDED"), conf) is None

    def test_else_from_the_clusters_spark_defaults(self, monkeypatch, tmp_path):
        (tmp_path / "spark-defaults.conf").write_text(
            "# the cluster's settings\nspark.eventLog.enabled true\nspark.yarn.historyServer.address = shs.lab:18080\n"
        )
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_PLAIN", json.dumps({"conn_type": "spark", "host": "yarn"}))
        hook = TFoSHook(spark_conn_id="spark_plain")
        ended = AppState(self.APP, "FINISHED", "SUCCEEDED")
        monkeypatch.delenv("SPARK_CONF_DIR", raising=False)
        assert hook.history_url(ended) is None
        monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
        assert hook.history_url(ended) == f"http://shs.lab:18080/history/{self.APP}"
        assert spark_defaults()["spark.eventLog.enabled"] == "true"

    def test_the_address_takes_http_unless_it_names_a_scheme(self):
        assert history_server_url("shs:18080", "a") == "http://shs:18080/history/a"
        assert history_server_url("https://shs/", "a") == "https://shs/history/a"


def exported_run(tmp_path, name: str, loss: float) -> str:
    rundir = RunDir(str(tmp_path / name))
    staging = rundir.export_staging()
    with open(os.path.join(staging, "saved_model.pb"), "w") as f:
        f.write(name)
    rundir.publish_export(staging, spec_hash="h", step=60, metrics={"loss": loss})
    return rundir.uri


def publish_with_events(run_dir: str, registry: str, version: str):
    op = TFoSPublishModelOperator(
        task_id="publish", run_dir=run_dir, registry=registry, version=version, metric="loss", higher_is_better=False
    )
    context = make_context("publish")
    context["outlet_events"] = OutletEventAccessors()
    result = op.execute(context)
    return result, context["outlet_events"][AssetAlias(PUBLISHED_MODELS_ALIAS)].asset_alias_events


class TestModelAsset:
    def test_a_published_model_emits_one_event_a_rejected_one_and_a_rerun_none(self, tmp_path):
        registry = str(tmp_path / "registry")
        good = exported_run(tmp_path, "good", 0.5)
        result, events = publish_with_events(good, registry, "20261120T000000")
        assert result["published"]
        (event,) = events
        assert event.dest_asset_key.uri == model_asset(registry).uri == f"tfos-model://local{registry}"
        in_service = ModelRegistry(registry).current()
        assert event.extra["version"] == in_service["version"] == "20261120T000000"
        assert event.extra["model_path"] == in_service["model_path"] == result["model_path"]
        assert event.extra["metrics"] == {"loss": 0.5} and event.extra["metric"] == "loss"

        rejected, events = publish_with_events(exported_run(tmp_path, "worse", 0.9), registry, "20261121T000000")
        assert not rejected["published"] and events == []
        again, events = publish_with_events(good, registry, "20261120T000000")
        assert again["reason"] == "already in service" and events == []

    def test_the_operator_declares_the_alias_beside_the_users_outlets(self, tmp_path):
        op = TFoSPublishModelOperator(task_id="p", run_dir="/r", registry="/reg", outlets=[model_asset("/other")])
        assert [getattr(o, "name", None) for o in op.outlets][-1] == PUBLISHED_MODELS_ALIAS and len(op.outlets) == 2
        assert TFoSPublishModelOperator(task_id="q", run_dir="/r", registry="/reg", emit_asset=False).outlets == []

    def test_uris_name_the_registry_on_its_storage(self):
        assert model_asset_uri("/data/models/digits/") == "tfos-model://local/data/models/digits"
        assert model_asset_uri("file:///data/models/digits") == "tfos-model://local/data/models/digits"
        # the same registry through RPC or WebHDFS addresses is the same model
        assert model_asset_uri("hdfs://nn1:8020/models/digits") == model_asset_uri("webhdfs://nn1:9870/models/digits")
        assert model_asset_uri("hdfs:///models/digits") == "tfos-model://hdfs/models/digits"
        for bad, why in (("models/digits", "absolute"), ("s3://b/m", "neither"), ("{{ var.value.reg }}", "templated")):
            with pytest.raises(ValueError, match=why):
                model_asset_uri(bad)
