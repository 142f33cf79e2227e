"""The training spec (``spec.json`` in the run directory): what the driver entrypoint runs.

Pure Python: parsed and checked here, with errors that name the field and what to write instead. A spec's
identity is its hash (:func:`spec_hash`, over its canonical JSON): the operator names its request by it, the
export records it, and the driver refuses a ``spec.json`` whose content no longer matches it
(:func:`verified_spec_hash`). :mod:`airflow_tfos.shared.rundir` re-exports the three.

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

import difflib
import hashlib
import importlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from airflow_tfos.shared.errors import FeedConfigError, FeedRefusedError, RunDirError, SpecError
from airflow_tfos.shared.feed import Feed

INPUT_MODES = ("SPARK", "TENSORFLOW")
DATA_FORMATS = ("table", "parquet", "csv", "tfrecord", "function")
#: The formats Spark reads for the driver: what input_mode SPARK feeds, and what batch inference scores. TFRecord
#: files are read by the TF nodes themselves (input_mode TENSORFLOW, ``ctx.dataset()``).
SPARK_FORMATS = ("table", "parquet", "csv", "function")

KINDS = ("train", "inference")
#: Which Keras the nodes use: ``auto`` (Keras 2 from tf-keras when installed), ``tf_keras`` or ``keras3``.
KERAS_MODES = ("auto", "tf_keras", "keras3")
#: The coordinating node's job name (``airflow_tfos.runtime.node.cluster.plan_roles``).
MASTER_NODES = ("chief", "master", None)
_INFERENCE_FIELDS = {
    "model_path", "features", "output_path", "output_col", "output", "outputs", "signature", "batch_size",
}  # fmt: skip
_DATA_FIELDS = {"format", "path", "table", "function", "options"}
#: The fields of ``feed`` (those of ``airflow_tfos.runtime.feed.plan.Feed``) and the JSON types they take.
_FEED_FIELDS = {
    "features": (list, tuple, str),
    "label": (str, list, tuple, type(None)),
    "batch_size": int,
    "shuffle": bool,
    "shuffle_window": int,
    "balance": str,
    "seed": int,
    "cast_floats": (str, type(None)),
    "weight": (str, type(None)),
    "fill": dict,
    "pad": dict,
    "ragged": (list, tuple),
    "densify": (list, tuple),
    "read": str,
}

#: When a field is written into spec.json (and so into its hash): ``ALWAYS``; ``TRAINING``, in a spec of
#: kind ``train`` only; ``SERVING``, when ``serve`` is true; ``WHEN_SET``, when it differs from its default;
#: ``NEVER`` (what spec.json was stored with, not what it asks for). A new field is ``WHEN_SET``: specs
#: that do not use it keep the hash they had before it existed.
ALWAYS, TRAINING, SERVING, WHEN_SET, NEVER = "always", "training", "serving", "when_set", "never"


def _spec(json_types: Any, written: str = WHEN_SET) -> dict[str, Any]:
    """A :class:`RunSpec` field's metadata: the JSON types spec.json may hold for it, and when it is written."""
    return {"json": json_types, "written": written}


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """What one run asks for, from the operator that builds it to the nodes that train: ``spec.json``.

    The operator builds it (:meth:`to_json` is what it writes, and what the spec hash is computed from), the
    driver reads it back with :func:`parse_spec` and starts the TF cluster from it
    (``airflow_tfos.runtime.driver.launcher.TFClusterRun.from_spec``), and the nodes find it as ``NodeJob.spec``.
    Adding a field here (``WHEN_SET``) adds it to the field list :func:`parse_spec` checks.
    """

    train_fn: str = field(default="", metadata=_spec(str, TRAINING))
    args: Any = field(default=None, metadata=_spec((dict, list, type(None)), TRAINING))
    #: TF nodes that train, the chief included (the operator's ``num_nodes``; the cluster adds ``num_ps``
    #: parameter servers and the evaluator); for inference, the executors that score
    num_nodes: int = field(metadata=_spec(int, ALWAYS))
    num_ps: int = field(default=0, metadata=_spec(int, TRAINING))
    master_node: str | None = field(default="chief", metadata=_spec((str, type(None)), TRAINING))
    eval_node: bool = field(default=False, metadata=_spec(bool, TRAINING))
    input_mode: str = field(default="SPARK", metadata=_spec(str, TRAINING))
    data: dict | None = field(default=None, metadata=_spec((dict, type(None)), ALWAYS))
    validation_data: dict | None = field(default=None, metadata=_spec((dict, type(None)), TRAINING))
    feed: dict | None = field(default=None, metadata=_spec((dict, type(None)), TRAINING))
    max_attempts: int = field(default=3, metadata=_spec(int, TRAINING))
    #: seconds one TF cluster attempt may run (the operator's ``training_timeout``)
    timeout: float | None = field(default=None, metadata=_spec((int, float, type(None)), TRAINING))
    keras: str = field(default="auto", metadata=_spec(str, TRAINING))
    gpus_per_node: int = field(default=0, metadata=_spec(int, TRAINING))
    env: dict = field(default_factory=dict, metadata=_spec(dict, ALWAYS))
    #: how long the driver waits, after a stop request, for the next checkpoint before it stops the cluster
    stop_grace_secs: float = field(default=120.0, metadata=_spec((int, float), TRAINING))
    warm_start: str | None = field(default=None, metadata=_spec((str, type(None)), TRAINING))
    #: seconds without the global step advancing before an attempt counts as stalled (None: no watchdog)
    stall_timeout: float | None = field(default=600.0, metadata=_spec((int, float, type(None)), WHEN_SET))
    #: seconds a node's TF process may take to exit after SIGTERM (its stage ended or failed) before it is killed
    kill_grace_secs: float = field(default=5.0, metadata=_spec((int, float), WHEN_SET))
    #: start TensorBoard beside the chief (or worker 0) while the run trains; its address goes to tensorboard.json
    tensorboard: bool = field(default=False, metadata=_spec(bool, WHEN_SET))
    #: the log directory TensorBoard reads and the nodes find as ``ctx.log_dir`` (default ``<run_dir>/tensorboard``
    #: when TensorBoard is on)
    log_dir: str | None = field(default=None, metadata=_spec((str, type(None)), WHEN_SET))
    #: the hash spec.json was written with (:meth:`RunDir.write_spec`); never part of :meth:`to_json`
    spec_hash: str = field(default="", metadata=_spec(str, NEVER))
    kind: str = field(default="train", metadata=_spec(str))
    serve: bool = field(default=False, metadata=_spec(bool))
    #: seconds a serving driver waits without a feed request before it stops (the launch's ``idle_timeout``)
    serve_idle_secs: float | None = field(default=3600.0, metadata=_spec((int, float, type(None)), SERVING))
    inference: dict | None = field(default=None, metadata=_spec((dict, type(None))))
    #: the shipped user code: ``{"packages": [...], "hash": ...}``
    code: dict | None = field(default=None, metadata=_spec((dict, type(None))))
    #: the data functions (``package.module:function``) a feed request may name besides those of ``data`` and
    #: ``validation_data`` (the operators' ``feed_functions``); a request naming another is refused unimported
    feed_functions: list = field(default_factory=list, metadata=_spec(list))

    def to_json(self) -> dict[str, Any]:
        """spec.json's content (without ``spec_hash``): the fields this spec writes, as they are."""
        return {f.name: getattr(self, f.name) for f in fields(self) if self._writes(f)}

    def _writes(self, f: Field) -> bool:
        when = f.metadata["written"]
        if when == TRAINING:
            return self.kind == "train"
        if when == SERVING:
            return self.serve
        if when == WHEN_SET:
            return getattr(self, f.name) != _default(f)
        return when == ALWAYS


def _default(f: Field) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


#: The fields spec.json may hold and the JSON types each takes; those it must hold.
_FIELDS = {f.name: f.metadata["json"] for f in fields(RunSpec)}
_REQUIRED = tuple(f.name for f in fields(RunSpec) if f.default is MISSING and f.default_factory is MISSING)


def _never(value: Any) -> bool:
    return False


def unknown_keys(given: Iterable[str], known: Iterable[str], what: str) -> None:
    """Raise :class:`SpecError` unless every key of ``given`` is ``known``; it names ``what`` (``spec.json feed``),
    each unknown key with the closest known one (a likely typo), and every known key."""
    known = sorted(known)
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), known, n=1)
        named.append(f"{key} (did you mean {close[0]!r}?)" if close else str(key))
    raise SpecError(f"{what} has unknown field(s): {', '.join(named)}; known: {', '.join(known)}")


def parse_spec(raw: Any, *, pending: Callable[[Any], bool] = _never) -> RunSpec:
    """Check ``raw`` (the parsed JSON) and return it as a :class:`RunSpec`.

    Every key is checked; a value for which ``pending`` is true (an operator's argument not rendered yet, see
    ``airflow_tfos.hooks.run_dir.templated``) is checked only for its key, and again once rendered. Keys are never
    retired: a spec.json written by an earlier version holds only keys that are still known, so it is still read.
    """
    if not isinstance(raw, dict):
        raise SpecError(f"spec.json must hold a JSON object, not {type(raw).__name__}")
    unknown_keys(raw, _FIELDS, "spec.json")
    missing = [name for name in _REQUIRED if name not in raw]
    if missing:
        raise SpecError(f"spec.json lacks required field(s): {', '.join(missing)}")
    for name, value in raw.items():
        if pending(value):
            continue
        expected = _FIELDS[name]
        if isinstance(value, bool) and expected is int:
            raise SpecError(f"spec.json field {name!r} must be an integer, not a boolean")
        if isinstance(value, bool) and isinstance(expected, tuple) and float in expected:
            raise SpecError(f"spec.json field {name!r} must be a number, not a boolean")
        if not isinstance(value, expected):
            raise SpecError(f"spec.json field {name!r} has the wrong type {type(value).__name__}")
    spec = RunSpec(**raw)
    if spec.kind not in KINDS:
        raise SpecError(f"spec.json kind must be one of {', '.join(KINDS)}, got {spec.kind!r}")
    if spec.kind == "inference":
        _check_inference(spec, pending)
        return spec
    if not spec.train_fn:
        raise SpecError("spec.json lacks required field(s): train_fn")
    split_import_path(spec.train_fn, "train_fn")
    if spec.input_mode not in INPUT_MODES:
        raise SpecError(f"spec.json input_mode must be one of {', '.join(INPUT_MODES)}, got {spec.input_mode!r}")
    check_settings(spec)
    for name in ("data", "validation_data"):
        if getattr(spec, name) is not None:
            check_data(getattr(spec, name), name, pending=pending)
    for index, path in enumerate(spec.feed_functions if isinstance(spec.feed_functions, list) else ()):
        if pending(path):
            continue
        if not isinstance(path, str):
            raise SpecError(f"spec.json feed_functions[{index}] must be a string 'package.module:function'")
        split_import_path(path, f"feed_functions[{index}]")
    if spec.input_mode == "SPARK":
        for name in ("data", "validation_data"):
            check_read_by_spark(getattr(spec, name), name, "input_mode SPARK feeds what Spark reads")
    if spec.input_mode == "SPARK" and spec.data is not None and not spec.feed:
        raise SpecError("spec.json input_mode SPARK with data needs 'feed' (features, label, batch_size)")
    if spec.feed is not None:
        check_feed(spec.feed, pending=pending)
    if spec.validation_data is not None and spec.input_mode != "SPARK":
        raise SpecError("spec.json validation_data is fed by Spark: use input_mode SPARK")
    return spec


def check_settings(spec: RunSpec) -> None:
    """Raise :class:`SpecError` naming the field unless the TF cluster's settings in ``spec`` can run: its layout,
    limits and node settings. The one check of them, for a spec.json (:func:`parse_spec`) and for a cluster
    started from Python (``TFClusterRun`` builds its spec and checks it here)."""
    if spec.num_nodes < 1:
        raise SpecError(f"spec.json num_nodes must be at least 1, got {spec.num_nodes}")
    if spec.num_ps < 0:
        raise SpecError(f"spec.json num_ps must be 0 or more, got {spec.num_ps}")
    if spec.keras not in KERAS_MODES:
        raise SpecError(f"spec.json keras must be one of {', '.join(KERAS_MODES)}, got {spec.keras!r}")
    if spec.master_node not in MASTER_NODES:
        raise SpecError(f"spec.json master_node must be 'chief', 'master' or None, got {spec.master_node!r}")
    if spec.max_attempts < 1:
        raise SpecError(f"spec.json max_attempts must be at least 1, got {spec.max_attempts}")
    if spec.gpus_per_node < 0:
        raise SpecError(f"spec.json gpus_per_node must be 0 or more, got {spec.gpus_per_node}")
    if spec.timeout is not None and not spec.timeout > 0:
        raise SpecError(f"spec.json timeout must be positive seconds or null, got {spec.timeout!r}")
    if not spec.kill_grace_secs >= 0:
        raise SpecError(f"spec.json kill_grace_secs must be 0 or more seconds, got {spec.kill_grace_secs!r}")
    if spec.stall_timeout is not None and not spec.stall_timeout > 0:
        raise SpecError(f"spec.json stall_timeout must be positive seconds or null, got {spec.stall_timeout!r}")


def _check_inference(spec: RunSpec, pending: Callable[[Any], bool]) -> None:
    if spec.data is None or spec.inference is None:
        raise SpecError(
            "spec.json kind inference needs 'data' (what to score) and 'inference' (model_path, features, ...)"
        )
    check_data(spec.data, "data", pending=pending)
    check_read_by_spark(spec.data, "data", "batch inference reads it with Spark")
    if pending(spec.inference):
        return
    unknown_keys(spec.inference, _INFERENCE_FIELDS, "spec.json inference")
    for name in ("model_path", "features", "output_path"):
        if not spec.inference.get(name):
            raise SpecError(f"spec.json inference needs {name!r}")


def check_data(data: Any, name: str, *, pending: Callable[[Any], bool] = _never) -> None:
    """Raise :class:`SpecError` naming the field unless ``data`` describes an input the driver can read; values
    for which ``pending`` is true (not rendered yet) are left to the check after rendering."""
    if not isinstance(data, dict):
        if pending(data):
            return
        raise SpecError(f"spec.json {name} must be a mapping such as {{'format': 'parquet', 'path': ...}}")
    unknown_keys(data, _DATA_FIELDS, f"spec.json {name}")
    fmt = data.get("format")
    if pending(fmt):
        return
    if fmt not in DATA_FORMATS:
        close = difflib.get_close_matches(str(fmt), DATA_FORMATS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(f"spec.json {name}.format must be one of {', '.join(DATA_FORMATS)}, got {fmt!r}{hint}")
    needs = {"table": "table", "function": "function"}.get(fmt, "path")
    if not data.get(needs):
        raise SpecError(f"spec.json {name} with format {fmt!r} needs {needs!r}")
    if fmt == "function" and not pending(data["function"]):
        split_import_path(data["function"], f"{name}.function")


def check_read_by_spark(data: Any, name: str, why: str) -> None:
    """Raise :class:`SpecError` naming the fix when ``data`` (checked by :func:`check_data`) is in a format that only
    the TF nodes read (TFRecord), where Spark must read it."""
    fmt = data.get("format") if isinstance(data, dict) else None
    if isinstance(fmt, str) and fmt in DATA_FORMATS and fmt not in SPARK_FORMATS:
        raise SpecError(
            f"spec.json {name}.format {fmt!r} is read by the TF nodes themselves, but {why} "
            f"({', '.join(SPARK_FORMATS)}): use input_mode TENSORFLOW and read the files in train_fn "
            f"(ctx.shard_files() and tfrecord_dataset()), or write the data as Parquet"
        )


#: Options of Spark's file sources that a feed request may set (matched case-insensitively, as Spark does).
_FILE_SOURCE_OPTIONS = frozenset(
    {"pathglobfilter", "recursivefilelookup", "modifiedbefore", "modifiedafter", "ignorecorruptfiles",
     "ignoremissingfiles", "basepath"}
)  # fmt: skip
#: The reader options a feed request may set for each format Spark reads: those Spark documents for the source.
#: Any other key is refused: Spark copies a reader's options into the Hadoop configuration of the read, where
#: keys such as ``fs.<scheme>.impl``, ``io.compression.codecs`` or ``parquet.crypto.factory.class`` name classes
#: that the driver and the executors load and instantiate.
FEED_READER_OPTIONS = {
    "parquet": _FILE_SOURCE_OPTIONS | {"mergeschema", "datetimerebasemode", "int96rebasemode"},
    "csv": _FILE_SOURCE_OPTIONS
    | {
        "sep", "delimiter", "encoding", "charset", "quote", "escape", "comment", "header", "inferschema",
        "preferdate", "enforceschema", "ignoreleadingwhitespace", "ignoretrailingwhitespace", "nullvalue",
        "nanvalue", "positiveinf", "negativeinf", "dateformat", "timestampformat", "timestampntzformat",
        "enabledatetimeparsingfallback", "maxcolumns", "maxcharspercolumn", "mode", "columnnameofcorruptrecord",
        "multiline", "chartoescapequoteescaping", "samplingratio", "emptyvalue", "locale", "linesep",
        "unescapedquotehandling",
    },
    "table": frozenset(),
}  # fmt: skip
#: A table a feed request may name: ``table``, ``db.table`` or ``catalog.db.table``, unquoted. A quoted part
#: (`` `...` ``) could name a Java class as the data source of a path (Spark's SQL on files), which Spark loads.
_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,2}")


def allowed_feed_functions(spec: Mapping[str, Any] | RunSpec) -> frozenset[str]:
    """The data functions a feed request of a run of ``spec`` (spec.json's content, or the parsed spec) may
    name: its ``feed_functions``, and the functions its own ``data`` and ``validation_data`` read with."""
    get = spec.get if isinstance(spec, Mapping) else lambda name: getattr(spec, name, None)
    allowed = {path for path in get("feed_functions") or () if isinstance(path, str)}
    for name in ("data", "validation_data"):
        data = get(name)
        if isinstance(data, dict) and data.get("format") == "function" and isinstance(data.get("function"), str):
            allowed.add(data["function"])
    return frozenset(allowed)


def check_feed_data(data: Any, allowed_functions: Iterable[str], name: str = "feed data") -> None:
    """Raise :class:`SpecError` unless a feed request's ``data`` can be read, and :class:`FeedRefusedError` if it
    names a data function not in ``allowed_functions`` (see :func:`allowed_feed_functions`), a reader option not
    in :data:`FEED_READER_OPTIONS` or a quoted table name. Nothing it names is imported or read here.

    A feed request is read from the run directory, where others may be able to write: unlike spec.json, whose
    hash the submission gives, nothing vouches for it, so it may only choose among what the spec allows.
    """
    check_data(data, name)
    fmt = data["format"]
    if fmt == "function":
        allowed = sorted(allowed_functions)
        if data["function"] not in allowed:
            raise FeedRefusedError(
                f"{name}.function {data['function']!r} is not a data function the run's spec allows (allowed: "
                f"{', '.join(allowed) or 'none'}): nothing was imported. To feed with it, add it to feed_functions "
                "of the operator that launches the run (TFoSLaunchClusterOperator or TFoSTrainOperator) and launch "
                "the run again"
            )
        options = data.get("options") or {}
        if not isinstance(options, dict) or not all(isinstance(key, str) for key in options):
            raise SpecError(f"{name}.options must be a mapping of keyword arguments for {data['function']!r}")
        return
    if fmt == "table" and not _TABLE_NAME.fullmatch(str(data["table"])):
        raise FeedRefusedError(
            f"{name}.table {data['table']!r} is not a plain table name: a feed request may name 'table', "
            "'db.table' or 'catalog.db.table' (letters, digits, underscores), without quotes"
        )
    options = data.get("options") or {}
    if not isinstance(options, dict):
        raise SpecError(f"{name}.options must be a mapping of reader options")
    allowed = FEED_READER_OPTIONS.get(fmt)
    if allowed is None:
        return  # read by the TF nodes' own code (input_mode TENSORFLOW)
    refused = sorted(key for key in options if str(key).lower() not in allowed)
    if refused:
        raise FeedRefusedError(
            f"{name}.options {', '.join(map(repr, refused))} cannot be set by a feed request: a feed may set only "
            f"Spark's {fmt} reader options ({', '.join(sorted(allowed)) or 'none'}). Give Hadoop and other Spark "
            "settings to the launch instead (its conf, e.g. spark.hadoop.*)"
        )
    for key, value in options.items():
        if not isinstance(value, str | int | float | bool):
            raise SpecError(f"{name}.options[{key!r}] must be a string, number or boolean")


def check_feed(feed: Any, *, pending: Callable[[Any], bool] = _never) -> None:
    """Raise :class:`SpecError` naming the field unless ``feed`` has only known fields of the right types; values
    for which ``pending`` is true (not rendered yet) are left to the check after rendering."""
    if not isinstance(feed, dict):
        if pending(feed):
            return
        raise SpecError("spec.json feed must be a mapping such as {'features': [...], 'label': ..., 'batch_size': 64}")
    unknown_keys(feed, _FEED_FIELDS, "spec.json feed")
    if "features" not in feed:
        raise SpecError("spec.json feed needs 'features' (the feature column or columns)")
    for name, value in feed.items():
        if pending(value):
            continue
        expected = _FEED_FIELDS[name]
        if (isinstance(value, bool) and expected is int) or not isinstance(value, expected):
            raise SpecError(f"spec.json feed field {name!r} has the wrong type {type(value).__name__}")
    for name in ("features", "label", "ragged", "densify"):
        value = feed.get(name)
        if isinstance(value, (list, tuple)) and not all(isinstance(column, str) for column in value):
            raise SpecError(f"spec.json feed field {name!r} must name columns (strings)")
    if any(pending(value) for value in feed.values()):
        return  # the rest is checked once rendered
    try:
        Feed(**feed)  # the feed's own rules, written once (Feed.__post_init__)
    except FeedConfigError as exc:
        raise SpecError(f"spec.json feed: {exc}") from None


def split_import_path(path: str, name: str) -> tuple[str, str]:
    """Split ``package.module:function``; raise naming the field when it is not of that form."""
    module, sep, attr = path.partition(":")
    if not sep or not module or not attr or not all(p.isidentifier() for p in [*module.split("."), *attr.split(".")]):
        dotted = path.rpartition(".")
        hint = f" (did you mean {dotted[0] + ':' + dotted[2]!r}?)" if not sep and all(dotted) else ""
        raise SpecError(f"spec.json {name} must look like 'package.module:function', got {path!r}{hint}")
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


def spec_digest(spec: dict[str, Any]) -> str:
    """The full SHA-256 (hex) of what a spec asks for (its canonical JSON, without its own ``spec_hash``)."""
    body = {k: v for k, v in spec.items() if k != "spec_hash"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def spec_hash(spec: dict[str, Any]) -> str:
    """A stable hash of what a spec asks for: the first 16 hex digits of :func:`spec_digest` (names the request)."""
    return spec_digest(spec)[:16]


def verified_spec_hash(spec: dict[str, Any], expected: str | None = None) -> str:
    """The hash of ``spec``, recomputed from its content; RunDirError if it differs from ``expected`` (given out
    of band at submission: the full :func:`spec_digest`, or its 16-digit :func:`spec_hash`) or from the
    ``spec_hash`` stored in it: then spec.json was changed after it was written.
    """
    full = spec_digest(spec)
    digest = full[:16]
    if expected is not None and expected.lower() not in (full, digest):
        raise RunDirError(
            f"spec.json is not the spec that was submitted: its content hashes to {digest}, the submission "
            f"named {expected}; nothing of it was run. It was changed after submission: keep the run directory "
            "writable by its owner only, then submit again (a new spec.json is written)"
        )
    stored = spec.get("spec_hash")
    if stored is not None and stored != digest:
        raise RunDirError(
            f"spec.json holds the spec_hash {stored!r}, but its content hashes to {digest}: it was changed after "
            "it was written, so nothing of it was run. Submit again; to run an edited spec by hand, remove its "
            "spec_hash field"
        )
    return digest
