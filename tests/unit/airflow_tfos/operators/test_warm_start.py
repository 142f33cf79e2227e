"""``warm_start=ModelInService(registry)``: rendered with the task, looked up by the task after rendering, and the
model it names (or none) is what the spec, and so the run's hash, holds."""

from __future__ import annotations

import pytest

from airflow_tfos.operators import ModelInService, TFoSTrainOperator
from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.registry_gate import decide
from airflow_tfos.shared.spec import spec_hash
from airflow_tfos.shared.storage import LocalStorage
from tests.support.fakes import FakeBackend, make_context, use_backend
from tests.unit.airflow_tfos.shared.test_registry import fake_export

FEED = {"features": ["x"], "label": "y", "batch_size": 32}


def train_op(tmp_path, warm_start) -> TFoSTrainOperator:
    return TFoSTrainOperator(
        task_id="train",
        train_fn="pkg.mod:main_fun",
        num_workers=2,
        data={"format": "parquet", "path": "/data/day"},
        feed=FEED,
        run_dir=str(tmp_path / "run"),
        warm_start=warm_start,
        deferrable=False,
        ship_code=False,
    )


def publish(registry: ModelRegistry, tmp_path, version: str) -> str:
    """Put a (fake) export of ``version`` in service in ``registry``; return its path there."""
    export = fake_export(str(tmp_path), f"run-{version}", version)
    registry.set_current(registry.add_version(version, export, LocalStorage(), {"spec_hash": version, "acc": 0.9}))
    registry.record_decision(version, decide({"acc": 0.9}, None, metric="acc", version=version))
    return registry.current_model_path()


def test_the_registry_and_the_version_are_rendered_with_the_task(tmp_path):
    op = train_op(tmp_path, ModelInService("{{ params.models }}/digits"))
    op.render_template_fields({"params": {"models": str(tmp_path)}, "ts_nodash": "20261121T000000"})
    assert op.warm_start == ModelInService(f"{tmp_path}/digits", before="20261121T000000")


def test_the_task_starts_from_the_model_in_service_before_its_version_and_the_spec_names_it(tmp_path, capsys):
    registry = ModelRegistry(str(tmp_path / "models"))
    first = publish(registry, tmp_path, "20261120T000000")
    publish(registry, tmp_path, "20261122T000000")  # a later night's model: not where the 21st starts from
    op = train_op(tmp_path, ModelInService(str(tmp_path / "models"), before="20261121T000000"))
    use_backend(op, FakeBackend())
    op.prepare(make_context())
    logged = capsys.readouterr().out
    assert op.build_spec().warm_start == first
    assert f"warm start: the model in service in {tmp_path / 'models'} before version 20261121T000000, {first}" in (
        logged
    )
    # the same spec as a DAG that passed the path itself: the same run
    given = train_op(tmp_path, first)
    assert spec_hash(op.build_spec(code=False).to_json()) == spec_hash(given.build_spec(code=False).to_json())


def test_with_nothing_in_service_yet_the_task_trains_from_scratch(tmp_path, capsys):
    op = train_op(tmp_path, ModelInService(str(tmp_path / "empty-registry"), before="20261121T000000"))
    use_backend(op, FakeBackend())
    op.prepare(make_context())
    logged = capsys.readouterr().out
    assert op.build_spec().warm_start is None
    assert "no model in service in" in logged and "training from scratch" in logged


def test_a_registry_must_be_named():
    with pytest.raises(TypeError, match="ModelInService needs the registry's folder"):
        ModelInService("")
