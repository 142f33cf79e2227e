"""Where the operators let a run directory be, and what the hook tells the driver about the spec.

Rendering is simulated as Airflow does it before ``execute``: the templated field is replaced by its value.
"""

from __future__ import annotations

import json
import stat
import time

import pytest

from airflow_tfos.hooks.errors import RunConfigError
from airflow_tfos.hooks.tfos import TFoSHook
from airflow_tfos.operators import (
    TFoSFeedOperator,
    TFoSPublishModelOperator,
    TFoSShutdownClusterOperator,
    TFoSTrainOperator,
)
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.spec import spec_digest, spec_hash
from tests.support.fakes import FakeBackend, FakeTI, make_context, use_backend
from tests.support.tfos_hook_fakes import read_records, write_fake_spark_submit
from tests.unit.airflow_tfos.test_operators import exporting, train_op

FROM_CONF = "{{ dag_run.conf['run_dir'] }}"


@pytest.fixture
def base(tmp_path, monkeypatch):
    """``[tfos] run_dir_base`` for this test."""
    folder = tmp_path / "base"
    monkeypatch.setenv("AIRFLOW__TFOS__RUN_DIR_BASE", str(folder))
    return folder


def rendered(op, value: str):
    op.run_dir = value  # what Jinja made of the template
    return op


def test_a_templated_run_dir_outside_the_base_is_refused_before_anything_is_written(tmp_path, base):
    outside = tmp_path / "elsewhere" / "run"
    op, backend = rendered(train_op(FROM_CONF), str(outside)), FakeBackend()
    use_backend(op, backend)
    with pytest.raises(RunConfigError, match=r"not inside \[tfos\] run_dir_base.*allow_run_dir_outside_base=True"):
        op.execute(make_context())
    assert backend.submitted == [] and not outside.exists()


def test_the_dag_author_may_opt_out_of_the_base(tmp_path, base):
    outside = tmp_path / "elsewhere" / "run"
    op, backend = rendered(train_op(FROM_CONF, allow_run_dir_outside_base=True), str(outside)), FakeBackend()
    use_backend(op, backend)
    exporting(backend, RunDir(str(outside)), op.request_hash())
    assert op.execute(make_context())["run_dir"] == str(outside)


def test_templated_run_dirs_inside_the_base_are_normalised_and_dot_dot_is_refused(tmp_path, base):
    op, backend = rendered(train_op(FROM_CONF), f"{base}//nightly/./day/"), FakeBackend()
    use_backend(op, backend)
    exporting(backend, RunDir(str(base / "nightly" / "day")), op.request_hash())
    assert op.execute(make_context())["run_dir"] == str(base / "nightly" / "day")

    escaping = rendered(train_op(FROM_CONF), f"{base}/../victim")
    use_backend(escaping, FakeBackend())
    with pytest.raises(RunConfigError, match=r"'\.\.' segment"):
        escaping.execute(make_context())
    with pytest.raises(RunConfigError, match=r"'\.\.' segment"):
        train_op(f"{base}/../victim")  # written as is: refused when the DAG is parsed


def test_a_mapped_instances_run_dir_is_bound_to_the_base_even_when_not_templated(tmp_path, base):
    """``.expand(run_dir=upstream.output)`` hands the operator a plain string that came from data."""
    outside = str(tmp_path / "elsewhere" / "run")
    context = make_context()
    context["ti"].map_index = 0
    op, backend = train_op(outside), FakeBackend()
    use_backend(op, backend)
    with pytest.raises(RunConfigError, match=r"not inside \[tfos\] run_dir_base.*allow_run_dir_outside_base=True"):
        op.execute(context)
    assert backend.submitted == []
    allowed, backend = train_op(outside, allow_run_dir_outside_base=True), FakeBackend()
    use_backend(allowed, backend)
    exporting(backend, RunDir(outside), allowed.request_hash())
    assert allowed.execute(context)["run_dir"] == outside


def test_a_default_run_dir_never_leaves_the_base(base):
    op = TFoSTrainOperator(task_id="train", train_fn="pkg.mod:main_fun", deferrable=False)  # no run_dir
    use_backend(op, FakeBackend())
    context = make_context()
    context["ti"] = FakeTI(dag_id="..", task_id="..")  # ids Airflow's own pattern allows
    with pytest.raises(RunConfigError, match=r"'\.\.' segment"):
        op.execute(context)


def test_feed_shutdown_and_publish_check_their_templated_run_dir(tmp_path, base):
    outside = str(tmp_path / "elsewhere")
    ops = [
        TFoSFeedOperator(task_id="feed", run_dir=FROM_CONF, data={"format": "parquet", "path": "/d"}),
        TFoSShutdownClusterOperator(task_id="stop", run_dir=FROM_CONF),
        TFoSPublishModelOperator(task_id="publish", run_dir=FROM_CONF, registry=str(tmp_path / "registry")),
    ]
    for op in ops:
        use_backend(op, FakeBackend())
        with pytest.raises(RunConfigError, match=r"\[tfos\] run_dir_base"):
            rendered(op, outside).execute(make_context(op.task_id))


def test_the_submitted_spec_hash_reaches_the_hook_and_the_run_dir_is_private(tmp_path):
    op, backend = train_op(tmp_path / "run"), FakeBackend()
    use_backend(op, backend)
    exporting(backend, RunDir(str(tmp_path / "run")), op.request_hash())
    op.execute(make_context())
    written = RunDir(str(tmp_path / "run")).read_spec()
    assert backend.submitted[0]["spec_hash"] == spec_digest(written)  # all 64 digits
    assert spec_digest(written).startswith(written["spec_hash"]) and written["spec_hash"] == spec_hash(written)
    assert stat.S_IMODE((tmp_path / "run").stat().st_mode) == 0o700


def test_the_hook_puts_the_spec_hash_on_the_driver_command_line(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_TRUST_TEST", json.dumps({"conn_type": "spark", "host": "local-cluster[2,1,1024]"})
    )
    monkeypatch.setenv("FAKE_SPARK_SUBMIT_RECORDS", str(tmp_path / "records"))
    hook = TFoSHook(spark_conn_id="spark_trust_test", tracker_dir=str(tmp_path / "tracker"),
                    spark_binary=str(write_fake_spark_submit(tmp_path / "bin")))  # fmt: skip
    app_id = hook.submit(str(tmp_path / "run"), tag="tfos-trust", name="n", num_nodes=2, executor_memory="768m",
                         spec_hash="0123456789abcdef")  # fmt: skip
    deadline = time.monotonic() + 60
    while not hook.get_state(app_id).is_terminal and time.monotonic() < deadline:
        time.sleep(0.1)
    (record,) = read_records(tmp_path / "records")
    args = record["options"]["args"]
    assert args[args.index("--spec-hash") + 1] == "0123456789abcdef"
    assert args[:2] == ["--run-dir", str(tmp_path / "run")]
