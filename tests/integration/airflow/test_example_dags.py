"""The example DAGs, run by real Airflow (``airflow dags test`` on SQLite) on a real local Spark cluster.

The nightly DAG is run through the demo itself (``scripts/demo.py``, what ``make demo`` runs), for two
consecutive days, in a temporary demo directory.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.rundir import RunDir
from tests.conftest import REPO

EXAMPLES = REPO / "example_dags"
DAY1, DAY2 = "2026-11-20", "2026-11-21"


def load_demo():
    spec = importlib.util.spec_from_file_location("tfos_demo", REPO / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_dags_parse_with_the_expected_tasks():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(EXAMPLES))
    assert bag.import_errors == {}
    nightly = bag.dags["tfos_nightly_digits"]
    assert set(nightly.task_ids) == {
        "prepare_data",
        "train",
        "exported",
        "evaluate",
        "publish",
        "batch_inference",
    }
    assert nightly.max_active_runs == 1 and nightly.catchup is False
    assert nightly.get_task("train").upstream_task_ids == {"prepare_data"}  # the warm start is the task's own lookup
    assert nightly.get_task("train").retries == 2
    lifecycle = bag.dags["tfos_lifecycle_digits"]
    assert lifecycle.get_task("shutdown").trigger_rule == "all_done"
    assert lifecycle.get_task("batch_inference").upstream_task_ids == {"publish"}
    sweep = bag.dags["tfos_sweep_digits"]
    assert sweep.get_task("publish").upstream_task_ids == {"pick_best"}
    scoring = bag.dags["tfos_scoring_digits"]  # runs once per model the nightly DAG puts in service
    published = nightly.get_task("publish")
    assert list(scoring.timetable.asset_condition.objects) == [published.model_asset()]
    assert scoring.get_task("score").upstream_task_ids == {"describe_model"}
    assert set(bag.dags) == {
        "tfos_nightly_digits", "tfos_lifecycle_digits", "tfos_migrated_digits", "tfos_sweep_digits",
        "tfos_scoring_digits",
    }  # fmt: skip


def test_the_docs_lifecycle_example_is_the_example_dag_as_written():
    """docs/airflow.md's lifecycle block is the example DAG's body between its START and END markers, so what
    a reader copies is what test_lifecycle_example_... runs."""
    source = (EXAMPLES / "example_tfos_lifecycle.py").read_text()
    body = textwrap.dedent(source.split("# [START lifecycle]\n")[1].split("    # [END lifecycle]")[0])
    page = (REPO / "docs" / "airflow.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert body in blocks, "docs/airflow.md's lifecycle example differs from example_dags/example_tfos_lifecycle.py"


@pytest.fixture(scope="module")
def demo(tmp_path_factory, monkeypatch_module):
    root = tmp_path_factory.mktemp("demo")
    monkeypatch_module.setenv("AIRFLOW_TFOS_DEMO_DIR", str(root))
    module = load_demo()
    assert root.resolve() == module.DEMO
    (root / "logs").mkdir()
    assert module.airflow(module.demo_env(), "db", "migrate", log=root / "logs" / "migrate.log", timeout=300) == 0
    return module


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def dags_test(demo, dag_id: str, day: str, timeout: float = 900, *, skip: str | None = None) -> str:
    """``airflow dags test``; ``skip``: a pattern of task ids marked success without running (a rerun's
    Spark data job, which is not this project's and takes half a minute)."""
    log = demo.DEMO / "logs" / f"{dag_id}-{day}-test.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    extra = ["--mark-success-pattern", skip] if skip else []
    code = demo.airflow(demo.demo_env(), "dags", "test", dag_id, day, *extra, log=log, timeout=timeout)
    text = log.read_text(errors="replace")
    assert code == 0 and "state=failed" not in text, text[-6000:]
    return text


def local_apps(demo) -> list[dict]:
    apps = demo.DEMO / "spark-apps" / "apps"
    return [json.loads(p.read_text()) for p in sorted(apps.glob("*.json")) if p.name.count(".") == 1]


def run_demo(demo, timeout: float) -> str:
    """``scripts/demo.py --days 2`` as ``make demo`` runs it; its output, once it has succeeded."""
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py"), "--days", "2"],
        env=demo.demo_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    return out


@pytest.mark.integration
class TestNightlyDemo:
    def test_two_days_train_warm_start_publish_and_score(self, demo):
        out = run_demo(demo, timeout=1200)
        sys.stdout.write(out[out.find("=" * 78) :])
        day1, day2 = demo.day_summary(demo.FIRST_DAY), demo.day_summary(demo.FIRST_DAY.replace(day=21))
        registry = ModelRegistry(str(demo.DEMO / "models" / "digits"))
        # day 1 from scratch; day 2 from day 1's model, scored against it on the same held-out data
        assert day1["metrics"]["warm_start"] is None
        assert day2["metrics"]["warm_start"] == registry.version("20261120T000000")["model_path"]
        assert day2["metrics"]["baseline_test_accuracy"] > 0.85  # the warm-start model, before any step
        for day in (day1, day2):
            assert day["metrics"]["test_accuracy"] >= 0.9, day
            assert day["decision"] is not None, day
            assert Path(day["report"]).is_file()
            assert day["predictions"], day
        decisions = registry.decisions()
        assert [d["version"] for d in decisions] == ["20261120T000000", "20261121T000000"]
        expected = "20261121T000000" if decisions[1]["published"] else "20261120T000000"
        assert registry.current()["version"] == expected
        assert f"  {'test accuracy':<29}{day2['metrics']['test_accuracy']:.4f}\n" in out
        assert "make demo-ui" in out
        # the day's batch inference: one probability vector per row, with the model in service
        scored = pq.read_table(day2["predictions"]).to_pydict()
        assert len(scored["id"]) == 360
        assert all(len(p) == 10 and abs(sum(p) - 1.0) < 1e-3 for p in scored["probabilities"])
        # progress reached the task log while training
        log = (demo.DEMO / "logs" / f"tfos_nightly_digits-{DAY2}.log").read_text()
        assert "step 168/168 (100%)" in log and "steps/s" in log
        # the warm start is the registry's answer, looked up by the training task: none the first night
        first_log = (demo.DEMO / "logs" / f"tfos_nightly_digits-{DAY1}.log").read_text()
        assert "warm start: no model in service in " in first_log and "training from scratch" in first_log
        assert f"warm start: the model in service in {registry.uri} before version 20261121T000000, " in log

    def test_the_demo_run_again_skips_the_days_airflow_finished(self, demo):
        before, decisions = local_apps(demo), ModelRegistry(str(demo.DEMO / "models" / "digits")).decisions()
        if len(decisions) < 2:
            pytest.skip("the demo's two days did not run first (test_two_days_train_warm_start_publish_and_score)")
        out = run_demo(demo, timeout=600)
        for day in (DAY1, DAY2):
            assert f"tfos_nightly_digits for {day}: done already (its Airflow run succeeded), nothing submitted" in out
        assert local_apps(demo) == before  # no Spark application submitted
        assert ModelRegistry(str(demo.DEMO / "models" / "digits")).decisions() == decisions  # nothing published
        assert "Model in service: version" in out  # the summary still printed


@pytest.mark.integration
def test_lifecycle_example_launch_feed_checkpoint_shutdown_publish_and_score(demo):
    text = dags_test(demo, "tfos_lifecycle_digits", DAY1)
    (app,) = [a for a in local_apps(demo) if "tfos_lifecycle_digits/launch/" in a.get("run_dir", "")]
    rundir = RunDir(app["run_dir"])
    assert rundir.latest_checkpoint().step >= 20
    assert rundir.stop_requested() is not None
    assert rundir.export_success()["metrics"]["test_accuracy"] >= 0.85
    assert "is FINISHED" in text  # the application sensor
    # publish took the export from the launch's run directory; batch inference scored with the model in service
    registry = ModelRegistry(str(demo.DEMO / "models" / "digits-lifecycle"))
    (decision,) = registry.decisions()
    assert decision["published"] and decision["candidate"] == rundir.export_success()["metrics"]["test_accuracy"]
    assert registry.current()["spec_hash"] == rundir.export_success()["spec_hash"]
    scored = pq.read_table(str(demo.DEMO / "predictions" / "tfos_lifecycle_digits" / DAY1)).to_pydict()
    assert len(scored["id"]) == 360 and all(len(p) == 10 for p in scored["probabilities"])
    # (the lifecycle run again, with its first run's stop request in the run directory: test_dag_runs.py)


@pytest.mark.integration
def test_migrated_tfos_program_reads_its_files_and_exports_a_usable_model(demo):
    dags_test(demo, "tfos_migrated_digits", DAY1)
    export = demo.DEMO / "tfos-export" / "digits" / DAY1
    assert (export / "saved_model.pb").is_file()
    done = subprocess.run(
        [sys.executable, "-c", SCORE_EXPORT, str(export)],
        env={**demo.demo_env(), "TF_USE_LEGACY_KERAS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    accuracy = float(done.stdout.strip().splitlines()[-1])
    assert accuracy >= 0.85, accuracy


#: Loads a SavedModel and prints its accuracy on the held-out digits (run in a fresh process: tf-keras).
SCORE_EXPORT = """
import sys
import numpy as np
import tensorflow as tf
from airflow_tfos.runtime.examples.digits import load_split
_, _, x, y = load_split(0.2, 42)
model = tf.keras.models.load_model(sys.argv[1])
print(float(np.mean(np.argmax(model.predict(x, verbose=0), axis=1) == y)))
"""
