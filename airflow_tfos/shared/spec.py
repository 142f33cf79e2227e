"""The training spec (``spec.json`` in the run directory): what the driver entrypoint runs.

Pure Python: parsed and checked here, with errors that name the field and what to write instead.

.. code-block:: json

    {
      "train_fn": "my_pkg.training:main_fun",
      "args": {"epochs": 5},
      "num_nodes": 2,
      "input_mode": "SPARK",
      "data": {"format": "parquet", "path": "hdfs:///data/day=2026-11-21"},
      "feed": {"features": ["pixels"], "label": "label", "batch_size": 64},
      "max_attempts": 3
    }
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

INPUT_MODES = ("SPARK", "TENSORFLOW")
DATA_FORMATS = ("table", "parquet", "csv", "tfrecord", "function")

_FIELDS = {
    "train_fn": str,
    "args": (dict, list, type(None)),
    "num_nodes": int,
    "num_ps": int,
    "master_node": (str, type(None)),
    "eval_node": bool,
    "input_mode": str,
    "data": (dict, type(None)),
    "validation_data": (dict, type(None)),
    "feed": (dict, type(None)),
    "max_attempts": int,
    "timeout": (int, float, type(None)),
    "keras": str,
    "gpus_per_node": int,
    "env": dict,
    "stop_grace_secs": (int, float),
    "spec_hash": str,
    "kind": str,
    "serve": bool,
    "warm_start": (str, type(None)),
    "inference": (dict, type(None)),
    "code": (dict, type(None)),
    "serve_idle_secs": (int, float, type(None)),
}
_REQUIRED = ("num_nodes",)
KINDS = ("train", "inference")
_INFERENCE_FIELDS = {"model_path", "features", "output_path", "output_col", "output", "signature", "batch_size"}
_DATA_FIELDS = {"format", "path", "table", "function", "options"}
#: The fields of ``feed`` (those of ``airflow_tfos.runtime.feed.plan.Feed``) and the JSON types they take.
_FEED_FIELDS = {
    "features": (list, tuple, str),
    "label": (str, type(None)),
    "batch_size": int,
    "shuffle": bool,
    "shuffle_window": int,
    "balance": str,
    "seed": int,
    "cast_floats": (str, type(None)),
}


class SpecError(ValueError):
    """spec.json cannot be run; the message names the field."""


@dataclass(frozen=True)
class RunSpec:
    """A checked spec. Fields as in spec.json."""

    num_nodes: int
    train_fn: str = ""
    args: Any = None
    num_ps: int = 0
    master_node: str | None = "chief"
    eval_node: bool = False
    input_mode: str = "SPARK"
    data: dict | None = None
    validation_data: dict | None = None
    feed: dict | None = None
    max_attempts: int = 3
    timeout: float | None = None
    keras: str = "auto"
    gpus_per_node: int = 0
    env: dict = field(default_factory=dict)
    stop_grace_secs: float = 120.0
    spec_hash: str = ""
    kind: str = "train"
    serve: bool = False
    warm_start: str | None = None
    inference: dict | None = None
    code: dict | None = None
    serve_idle_secs: float | None = None


def parse_spec(raw: Any) -> RunSpec:
    """Check ``raw`` (the parsed JSON) and return it as a :class:`RunSpec`."""
    if not isinstance(raw, dict):
        raise SpecError(f"spec.json must hold a JSON object, not {type(raw).__name__}")
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise SpecError(f"unknown field(s) in spec.json: {', '.join(unknown)} (known: {', '.join(sorted(_FIELDS))})")
    missing = [name for name in _REQUIRED if name not in raw]
    if missing:
        raise SpecError(f"spec.json lacks required field(s): {', '.join(missing)}")
    for name, value in raw.items():
        expected = _FIELDS[name]
        if isinstance(value, bool) and expected is int:
            raise SpecError(f"spec.json field {name!r} must be an integer, not a boolean")
        if not isinstance(value, expected):
            raise SpecError(f"spec.json field {name!r} has the wrong type {type(value).__name__}")
    spec = RunSpec(**raw)
    if spec.kind not in KINDS:
        raise SpecError(f"spec.json kind must be one of {', '.join(KINDS)}, got {spec.kind!r}")
    if spec.kind == "inference":
        _check_inference(spec)
        return spec
    if not spec.train_fn:
        raise SpecError("spec.json lacks required field(s): train_fn")
    split_import_path(spec.train_fn, "train_fn")
    if spec.num_nodes < 1:
        raise SpecError(f"spec.json num_nodes must be at least 1, got {spec.num_nodes}")
    if spec.input_mode not in INPUT_MODES:
        raise SpecError(f"spec.json input_mode must be one of {', '.join(INPUT_MODES)}, got {spec.input_mode!r}")
    for name in ("data", "validation_data"):
        if getattr(spec, name) is not None:
            check_data(getattr(spec, name), name)
    if spec.input_mode == "SPARK" and spec.data is not None and not spec.feed:
        raise SpecError("spec.json input_mode SPARK with data needs 'feed' (features, label, batch_size)")
    if spec.feed is not None:
        check_feed(spec.feed)
    if spec.validation_data is not None and spec.input_mode != "SPARK":
        raise SpecError("spec.json validation_data is fed by Spark: use input_mode SPARK")
    return spec


def _check_inference(spec: RunSpec) -> None:
    if spec.data is None or spec.inference is None:
        raise SpecError(
            "spec.json kind inference needs 'data' (what to score) and 'inference' (model_path, features, ...)"
        )
    check_data(spec.data, "data")
    unknown = sorted(set(spec.inference) - _INFERENCE_FIELDS)
    if unknown:
        raise SpecError(f"spec.json inference has unknown field(s): {', '.join(unknown)}")
    for name in ("model_path", "features", "output_path"):
        if not spec.inference.get(name):
            raise SpecError(f"spec.json inference needs {name!r}")


def check_data(data: dict, name: str) -> None:
    """Raise :class:`SpecError` naming the field unless ``data`` describes an input the driver can read."""
    unknown = sorted(set(data) - _DATA_FIELDS)
    if unknown:
        raise SpecError(f"spec.json {name} has unknown field(s): {', '.join(unknown)}")
    fmt = data.get("format")
    if fmt not in DATA_FORMATS:
        raise SpecError(f"spec.json {name}.format must be one of {', '.join(DATA_FORMATS)}, got {fmt!r}")
    needs = {"table": "table", "function": "function"}.get(fmt, "path")
    if not data.get(needs):
        raise SpecError(f"spec.json {name} with format {fmt!r} needs {needs!r}")
    if fmt == "function":
        split_import_path(data["function"], f"{name}.function")


def check_feed(feed: dict) -> None:
    """Raise :class:`SpecError` naming the field unless ``feed`` has only known fields of the right types."""
    unknown = sorted(set(feed) - set(_FEED_FIELDS))
    if unknown:
        raise SpecError(
            f"spec.json feed has unknown field(s): {', '.join(unknown)} (known: {', '.join(sorted(_FEED_FIELDS))})"
        )
    if "features" not in feed:
        raise SpecError("spec.json feed needs 'features' (the feature column or columns)")
    for name, value in feed.items():
        expected = _FEED_FIELDS[name]
        if (isinstance(value, bool) and expected is int) or not isinstance(value, expected):
            raise SpecError(f"spec.json feed field {name!r} has the wrong type {type(value).__name__}")
    if not isinstance(feed["features"], str) and not all(isinstance(f, str) for f in feed["features"]):
        raise SpecError("spec.json feed field 'features' must name columns (strings)")


def split_import_path(path: str, name: str) -> tuple[str, str]:
    """Split ``package.module:function``; raise naming the field when it is not of that form."""
    module, sep, attr = path.partition(":")
    if not sep or not module or not attr or not all(p.isidentifier() for p in [*module.split("."), *attr.split(".")]):
        raise SpecError(f"spec.json {name} must look like 'package.module:function', got {path!r}")
    return module, attr


def import_callable(path: str, name: str):
    """Import ``package.module:function``; raise naming the field and the module when it fails."""
    module_name, attr = split_import_path(path, name)
    try:
        target = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(
            f"cannot import {name} {path!r}: {exc}. Ship the module to the driver and executors "
            "(--py-files, or install it in the Spark Python environment)"
        ) from exc
    for part in attr.split("."):
        if not hasattr(target, part):
            raise SpecError(f"cannot import {name} {path!r}: module {module_name!r} has no {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise SpecError(f"{name} {path!r} is not callable")
    return target
