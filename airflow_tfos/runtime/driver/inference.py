"""Batch inference of a DataFrame with a SavedModel, in Arrow batches on the executors.

No TF cluster is needed: every partition is scored on its own (``mapInArrow`` without barrier), on as
many executors as there are partitions. The model is loaded once per Python worker and kept for the
next tasks that worker runs (Spark reuses its Python workers). A SavedModel on ``hdfs://`` or
``webhdfs://`` is fetched into a local cache first, by the driver and on each executor
(:mod:`airflow_tfos.runtime.program.saved_models`), and fetched again when the export has changed. On a Kerberized
HDFS the executors, which hold no Kerberos ticket, fetch it with the WebHDFS delegation token the driver
obtained (:mod:`airflow_tfos.shared.storage.tokens`): it travels inside the scoring function, like the training
nodes' job, and is this Python worker's only while it scores a partition.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_tfos.runtime.feed.plan import check_schema
from airflow_tfos.runtime.program import saved_models
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed
from airflow_tfos.shared.storage.kerberos import delegation_token, use_delegation_token
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV

log = logging.getLogger(__name__)

_MODELS: dict[tuple[str, str | None, str], Any] = {}


def _signature(model_path: str, signature: str, version: str | None = None, webhdfs_config: str | None = None):
    """The signature of the SavedModel at ``model_path``, loaded once per process (and per ``version`` of a
    remote export: :func:`airflow_tfos.runtime.program.saved_models.remote_version`, read here when not given)."""
    remote = saved_models.is_remote(model_path)
    if remote and version is None:
        version = saved_models.remote_version(model_path, webhdfs_config)
    key = (model_path, version, signature)
    if key not in _MODELS:
        import tensorflow as tf

        local = saved_models.fetch(model_path, version, webhdfs_config) if remote else model_path
        loaded = tf.saved_model.load(local)
        if signature not in loaded.signatures:
            raise FeedConfigError(
                f"SavedModel {model_path} has no signature {signature!r} (it has: {', '.join(loaded.signatures)})"
            )
        _MODELS[key] = (loaded, loaded.signatures[signature])
    return _MODELS[key][1]


def _input_spec(fn) -> dict:
    _, kwargs = fn.structured_input_signature
    return kwargs


@dataclass(frozen=True)
class _Output:
    """One of the model's outputs written as a column: ``float``, ``array<float>`` (``width`` set) or ``string``."""

    name: str
    column: str
    width: int | None
    text: bool

    def spark_type(self):
        from pyspark.sql.types import ArrayType, FloatType, StringType

        if self.text:
            return StringType()
        return FloatType() if self.width is None else ArrayType(FloatType(), containsNull=False)

    def arrow(self, result):
        import numpy as np
        import pyarrow as pa

        if self.text:
            return pa.array(result.reshape(-1), type=pa.binary()).cast(pa.string())
        result = result.astype(np.float32)
        if self.width is None:
            return pa.array(result.reshape(-1), type=pa.float32())
        return pa.FixedSizeListArray.from_arrays(pa.array(result.reshape(-1)), self.width).cast(
            pa.list_(pa.field("element", pa.float32(), nullable=False))
        )


def _outputs(fn, output: str | None, outputs: str | Sequence[str] | None, output_col: str) -> list[_Output]:
    """The outputs to write: ``output`` into ``output_col``, or each of ``outputs`` (``"*"``: all) into a
    column of its own name."""
    import tensorflow as tf

    specs = fn.structured_outputs
    if outputs is None:
        wanted = {output or sorted(specs)[0]: output_col}
    else:
        names = sorted(specs) if outputs == "*" else [outputs] if isinstance(outputs, str) else list(outputs)
        wanted = {n: n for n in names}
    found = []
    for name, column in wanted.items():
        if name not in specs:
            raise FeedConfigError(f"the model has no output {name!r} (it has: {', '.join(sorted(specs))})")
        shape = specs[name].shape
        width = None if shape.rank == 1 or (shape.rank == 2 and shape[1] == 1) else int(shape[-1])
        text = specs[name].dtype == tf.string
        if text and width is not None:
            raise FeedConfigError(f"output {name!r} holds several strings per row: only one string per row is written")
        found.append(_Output(name, column, width, text))
    return found


def _model_inputs(fn, arrays: dict, features: Sequence[str]) -> dict:
    import numpy as np

    from airflow_tfos.runtime.feed.columns import as_tensor

    spec = _input_spec(fn)
    if len(spec) == 1:
        ((name, tensor),) = spec.items()
        value = arrays[features[0]] if len(features) == 1 else np.stack([arrays[f] for f in features], axis=1)
        return {name: as_tensor(_fit_shape(value, tensor, name).astype(tensor.dtype.as_numpy_dtype, copy=False))}
    missing = [name for name in spec if name not in arrays]
    if missing:
        raise FeedConfigError(
            f"the model takes inputs {sorted(spec)}; name feature columns after them (missing: {missing})"
        )
    return {
        name: as_tensor(_fit_shape(arrays[name], t, name).astype(t.dtype.as_numpy_dtype, copy=False))
        for name, t in spec.items()
    }


def _fit_shape(value, tensor, name: str):
    """``value`` (one row per entry) in the shape of the model input ``tensor``: a flat column of 784 numbers
    for a ``(None, 28, 28, 1)`` input is reshaped row by row, as TFoS's TFModel did; a count that does not
    match is an error naming the input."""
    import numpy as np

    if not isinstance(value, np.ndarray) or tensor.shape.rank is None:
        return value  # sparse values, or an input of any shape
    if tensor.shape.rank == 2 and value.ndim == 1:
        return value.reshape(-1, 1)
    row = tensor.shape[1:]
    if value.ndim == 1 or not row.is_fully_defined() or tuple(value.shape[1:]) == tuple(row.as_list()):
        return value
    if int(np.prod(value.shape[1:])) != row.num_elements():
        raise FeedConfigError(
            f"the model's input {name!r} takes rows of shape {tuple(row.as_list())} ({row.num_elements()} values), "
            f"but the feature columns give {int(np.prod(value.shape[1:]))} values per row"
        )
    return value.reshape(-1, *row.as_list())


def _sparse_inputs(fn, features: Sequence[str]) -> frozenset[str]:
    """The feature columns the model takes as ``tf.SparseTensor`` (sparse vectors stay sparse for them)."""
    import tensorflow as tf

    spec = _input_spec(fn)
    if len(spec) == 1 and len(features) == 1:
        return frozenset(features) if isinstance(next(iter(spec.values())), tf.SparseTensorSpec) else frozenset()
    return frozenset(name for name, t in spec.items() if isinstance(t, tf.SparseTensorSpec))


def predict(
    df,
    model_path: str,
    features: str | Sequence[str],
    *,
    output_col: str = "prediction",
    output: str | None = None,
    outputs: str | Sequence[str] | None = None,
    signature: str = "serving_default",
    batch_size: int = 1024,
    webhdfs_token: str | None = None,
):
    """Return ``df`` with a column of the model's predictions, row for row.

    Feature columns take the types training takes (``docs/feed.md``): numbers, arrays, Spark ML vectors
    (sparse ones stay sparse for a model input that takes a ``tf.SparseTensor``), strings, decimals,
    dates and timestamps.

    :param df: the rows to score; every column is kept.
    :param model_path: the SavedModel directory: a local path readable from the driver and every executor,
        or an ``hdfs://`` / ``webhdfs://`` URI (fetched into a local cache on each machine; ``hdfs://`` takes
        its namenodes from ``AIRFLOW_TFOS_WEBHDFS``, the driver's passed on to executors that have none).
    :param features: the columns fed to the model: one (an array column, or a scalar), several scalars
        (stacked into one input), or columns named like the model's inputs.
    :param output_col: name of the new column: ``float`` for one value per row, ``array<float>`` for
        several, ``string`` for a string output.
    :param output: which of the signature's outputs to take (default: the first by name).
    :param outputs: instead of ``output``: several outputs (``"*"``: all of them), each written to a column
        named after it.
    :param signature: the SavedModel signature to call.
    :param batch_size: rows per call of the model (Arrow batches are split to this size).
    :param webhdfs_token: for a model on a Kerberized HDFS: the WebHDFS delegation token the executors fetch
        it with (:class:`~airflow_tfos.shared.storage.tokens.TokenKeeper`, kept alive until the scored rows are
        written); default: the token this process was given, if any.
    """
    from pyspark.sql.types import StructField, StructType

    feed = Feed(features=features, batch_size=batch_size, shuffle=False)
    check_schema([(f.name, f.dataType.simpleString()) for f in df.schema.fields], feed, "DataFrame to score")
    if output is not None and outputs is not None:
        raise FeedConfigError("pass output= (one output, into output_col) or outputs= (several), not both")
    webhdfs_config = os.environ.get(WEBHDFS_ENV) or None  # holds no secret (WebHDFSConfig.to_json)
    version = saved_models.remote_version(model_path, webhdfs_config) if saved_models.is_remote(model_path) else None
    fn = _signature(model_path, signature, version, webhdfs_config)
    written = _outputs(fn, output, outputs, output_col)
    for out in written:
        if out.column in df.columns:
            hint = "choose another output_col" if outputs is None else "rename the DataFrame's column"
            raise FeedConfigError(f"the DataFrame already has a column {out.column!r}: {hint}")
    schema = StructType([*df.schema.fields, *(StructField(o.column, o.spark_type(), nullable=False) for o in written)])
    columns = list(feed.features)
    sparse = _sparse_inputs(fn, columns)
    token = webhdfs_token or delegation_token()

    def score(batches: Iterator) -> Iterator:
        if not token:
            yield from _score(batches)
            return
        previous = delegation_token()
        use_delegation_token(token)  # this Python worker's, while it scores this partition
        try:
            yield from _score(batches)
        finally:
            use_delegation_token(previous)

    def _score(batches: Iterator) -> Iterator:
        import pyarrow as pa

        from airflow_tfos.runtime.feed.columns import normalize_column, to_numpy

        fn = _signature(model_path, signature, version, webhdfs_config)
        widths: dict[str, int] = {}
        for batch in batches:
            for start in range(0, batch.num_rows, batch_size):
                part = batch.slice(start, batch_size)
                fed = [normalize_column(c, part.column(c), widths, "DataFrame to score", feed) for c in columns]
                arrays = to_numpy(pa.RecordBatch.from_arrays(fed, columns), columns, widths, sparse)
                result = fn(**_model_inputs(fn, arrays, columns))
                values = [o.arrow(result[o.name].numpy()) for o in written]
                names = [*part.schema.names, *(o.column for o in written)]
                yield pa.RecordBatch.from_arrays([*part.columns, *values], names)

    return df.mapInArrow(score, schema)


class _HadoopFiles:
    """What :func:`~airflow_tfos.shared.staging.replace_dir` needs, through the Hadoop file system Spark writes with."""

    def __init__(self, spark, path: str):
        self._path = spark._jvm.org.apache.hadoop.fs.Path
        self.fs = self._path(path).getFileSystem(spark._jsc.hadoopConfiguration())

    def exists(self, path: str) -> bool:
        return bool(self.fs.exists(self._path(path)))

    def rename(self, src: str, dst: str) -> None:
        if self.exists(dst):  # Hadoop would move src into dst
            raise FileExistsError(f"cannot rename {src} to {dst}: the target exists")
        if not self.fs.rename(self._path(src), self._path(dst)):
            raise OSError(f"cannot rename {src} to {dst}")

    def delete(self, path: str) -> None:
        self.fs.delete(self._path(path), True)

    def listdir(self, path: str) -> list[str]:
        if not self.exists(path):
            return []
        return sorted(str(status.getPath().getName()) for status in self.fs.listStatus(self._path(path)))


def write_predictions(scored, output_path: str) -> int:
    """Write ``scored`` as Parquet at ``output_path``, replacing what is there only once it is complete.

    The rows are written to a staging directory beside it (``.staging-<name>-<id>``), then swapped in by
    renames (:func:`~airflow_tfos.shared.staging.replace_dir`): a failed run leaves the previous predictions
    whole, and a reader sees the old ones or the new ones. Staging directories that failed runs left are
    removed once a run succeeds. Return the number of rows written.
    """
    import uuid

    from airflow_tfos.shared.staging import STAGING_PREFIX, discard_stale, replace_dir

    final = output_path.rstrip("/")
    if "/" not in final:
        raise FeedConfigError(f"output_path {output_path!r} must be an absolute path or a URI")
    parent, name = final.rsplit("/", 1)
    staging = f"{parent}/{STAGING_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    spark = scored.sparkSession
    scored.write.mode("errorifexists").parquet(staging)
    rows = spark.read.parquet(staging).count()
    files = _HadoopFiles(spark, final)
    replace_dir(files, staging, final)
    discard_stale(files, parent, name)
    return rows
