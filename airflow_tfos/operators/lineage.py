"""OpenLineage for the operators: which datasets a training, feed or inference task read, and what it wrote.

The operators' ``get_openlineage_facets_on_start`` / ``get_openlineage_facets_on_complete`` import this
module inside the method, and the functions here import the OpenLineage classes inside themselves: nothing
loads OpenLineage unless the OpenLineage provider asks for lineage. The naming functions are plain Python.

Dataset names follow OpenLineage's dataset naming spec:

- a local path or ``file:///path``: namespace ``file``, name ``/path`` (``file://host/path``: ``file://host``);
- ``hdfs://namenode:8020/path`` or ``hdfs://nameservice/path``: namespace ``hdfs://namenode:8020`` or
  ``hdfs://nameservice``, name ``/path``; ``webhdfs://host:port/path``: namespace ``webhdfs://host:port``;
- ``s3a://bucket/key``, ``gs://bucket/key``: namespace ``s3://bucket`` / ``gs://bucket``, name ``key``;
- a Spark table ``db.table``: namespace ``hive://host:port`` of the metastore named by the Spark setting
  ``spark.hadoop.hive.metastore.uris`` (or ``spark.hive.metastore.uris``), else ``spark_catalog``; name
  ``db.table`` (``default.table`` when the table has no database).

A path without a scheme means what it means to whoever reads it: data that Spark reads (``input_mode``
``SPARK``) or writes (predictions) is on Spark's default file system (``spark.hadoop.fs.defaultFS`` in
the operator's ``conf``; else HDFS on YARN, local files otherwise); run directories, models and the files
that the TF nodes read themselves (``input_mode`` ``TENSORFLOW``) go through :mod:`airflow_tfos.shared.storage`,
where such a path is a local file.

Facets: input data fed by Spark carries a ``schema`` facet with the feed's feature and label columns; an
exported model carries ``tfosModel`` (format, spec hash, input fingerprint, step, metrics of its
``_SUCCESS``); once the run knows it, a training input carries ``tfosInputFingerprint`` (the hash of its
listing, its files and bytes, the run's fingerprint: :mod:`airflow_tfos.shared.fingerprint`); predictions
carry ``outputStatistics`` (rows written).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.providers.common.compat.openlineage.facet import Dataset, OutputDataset
    from airflow.providers.openlineage.extractors import OperatorLineage

log = logging.getLogger(__name__)

#: Name of the facet describing a model (the OpenLineage convention: custom facets carry a producer prefix).
MODEL_FACET = "tfosModel"
#: Name of the facet describing what a training input was when the run started (its fingerprint).
INPUT_FACET = "tfosInputFingerprint"
#: Format named in the model facet of an export, and of the checkpoints a feed writes.
SAVED_MODEL, CHECKPOINT = "tensorflow_saved_model", "tensorflow_checkpoint"
#: Namespace of Spark tables when no metastore URI is configured.
CATALOG_NAMESPACE = "spark_catalog"
DEFAULT_FS_KEY = "spark.hadoop.fs.defaultFS"
METASTORE_KEYS = ("spark.hadoop.hive.metastore.uris", "spark.hive.metastore.uris")
_OBJECT_STORES = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs"}
_PATH_FORMATS = ("parquet", "csv", "tfrecord")


@dataclass(frozen=True)
class Namespaces:
    """Where names that carry no namespace of their own belong.

    :param default_fs: Spark's default file system, for paths without a scheme that Spark reads or writes.
    :param hdfs: the namespace of ``hdfs:///path`` URIs (which name no namenode).
    :param catalog: the namespace of Spark tables.
    """

    default_fs: str = "file"
    hdfs: str = "hdfs"
    catalog: str = CATALOG_NAMESPACE


def _split_uri(uri: str) -> tuple[str, str, str]:
    """``(scheme, authority, path)`` of ``scheme://authority/path``; globs (``?``, ``*``) are kept as they are."""
    scheme, _, rest = uri.partition("://")
    authority, slash, path = rest.partition("/")
    return scheme.lower(), authority.rpartition("@")[2], slash + path


def path_id(path: str, *, default_namespace: str = "file", hdfs_namespace: str = "hdfs") -> tuple[str, str]:
    """The OpenLineage ``(namespace, name)`` of a file or directory, given as a path or a URI.

    :param path: ``/data/x``, ``file:///data/x``, ``hdfs://ns/data/x``, ``webhdfs://host:port/data/x``...
    :param default_namespace: the namespace of a path without a scheme.
    :param hdfs_namespace: the namespace of ``hdfs:///path`` (no namenode in the URI).
    """
    if "://" not in path:
        return default_namespace, path.rstrip("/") or "/"
    scheme, authority, name = _split_uri(path)
    name = name.rstrip("/") or "/"
    if scheme == "file":
        return ("file" if authority in ("", "localhost") else f"file://{authority}"), name
    if scheme == "hdfs" and not authority:
        return hdfs_namespace, name
    if scheme in _OBJECT_STORES:
        return f"{_OBJECT_STORES[scheme]}://{authority}", name.lstrip("/")
    return f"{scheme}://{authority}", name


def table_id(table: str, *, catalog_namespace: str = CATALOG_NAMESPACE) -> tuple[str, str]:
    """The OpenLineage ``(namespace, name)`` of a Spark table (``db.table``; ``default.table`` when unqualified)."""
    name = table.strip().strip("`")
    return catalog_namespace, name if "." in name else f"default.{name}"


def data_id(
    data: dict[str, Any] | None, namespaces: Namespaces, *, read_by_spark: bool = True
) -> tuple[str, str] | None:
    """The ``(namespace, name)`` of a spec's ``data``; None for ``function`` data (which names no dataset).

    :param data: ``{"format": ..., "path"|"table"|"function": ...}`` as in spec.json.
    :param namespaces: where names without a namespace belong.
    :param read_by_spark: Spark reads it (input_mode SPARK), so a path without a scheme is on Spark's default
        file system; False: the TF nodes read it through :mod:`airflow_tfos.shared.storage` (a local path).
    """
    if not isinstance(data, dict):
        return None
    fmt = data.get("format")
    if fmt == "table" and isinstance(data.get("table"), str):
        return table_id(data["table"], catalog_namespace=namespaces.catalog)
    if fmt in _PATH_FORMATS and isinstance(data.get("path"), str):
        default = namespaces.default_fs if read_by_spark else "file"
        return path_id(data["path"], default_namespace=default, hdfs_namespace=namespaces.hdfs)
    return None


def metastore_namespace(conf: dict[str, str]) -> str | None:
    """``hive://host:port`` of the first metastore named by the Spark settings, or None."""
    for key in METASTORE_KEYS:
        uris = (conf.get(key) or "").split(",")[0].strip()
        if uris:
            _, authority, _ = _split_uri(uris if "://" in uris else f"thrift://{uris}")
            return f"hive://{authority}"
    return None


def _cluster_default_fs() -> str | None:
    """``fs.defaultFS`` of the files of ``HADOOP_CONF_DIR``, if any (unreadable files count as none: lineage is
    never worth failing a task for)."""
    from airflow_tfos.hooks.hadoop_conf import hadoop_conf

    try:
        conf = hadoop_conf()
        return conf.get("fs.defaultFS") if conf is not None else None
    except Exception as exc:
        log.debug("cannot read HADOOP_CONF_DIR for lineage: %s", exc)
        return None


def namespaces_for(
    conf: dict[str, str] | None,
    *,
    backend: Callable[[], str] | None = None,
    nameservice: Callable[[], str | None] | None = None,
) -> Namespaces:
    """The namespaces a task's names without one belong to, from its Spark settings and connections.

    :param conf: the operator's Spark settings (``spark.hadoop.fs.defaultFS``, the metastore URIs).
    :param backend: returns ``yarn`` or ``local`` (the Spark connection's backend); asked only when
        ``conf`` names no default file system. Errors count as ``local``.
    :param nameservice: returns the HDFS nameservice of the ``webhdfs`` connection, if it names one; else
        ``fs.defaultFS`` of ``HADOOP_CONF_DIR`` names the namenode of ``hdfs:///path``.
    """
    conf = dict(conf or {})
    hdfs = "hdfs"
    configured = conf.get(DEFAULT_FS_KEY)
    if configured and configured.lower().startswith("hdfs://") and _split_uri(configured)[1]:
        hdfs = path_id(configured)[0]
    elif nameservice is not None:
        try:
            found = nameservice()
        except Exception as exc:
            log.debug("no HDFS nameservice for lineage: %s", exc)
            found = None
        if found:
            hdfs = f"hdfs://{found}"
    if hdfs == "hdfs":  # the cluster's own default file system (HADOOP_CONF_DIR), when it names a namenode
        cluster_fs = _cluster_default_fs()
        if cluster_fs and cluster_fs.lower().startswith("hdfs://") and _split_uri(cluster_fs)[1]:
            hdfs = path_id(cluster_fs)[0]
    if configured:
        default_fs = path_id(configured, hdfs_namespace=hdfs)[0] if "://" in configured else "file"
    else:
        try:
            on_yarn = backend is not None and backend() == "yarn"
        except Exception as exc:
            log.debug("cannot tell the Spark backend for lineage (taking local files): %s", exc)
            on_yarn = False
        default_fs = hdfs if on_yarn else "file"
    return Namespaces(default_fs=default_fs, hdfs=hdfs, catalog=metastore_namespace(conf) or CATALOG_NAMESPACE)


def webhdfs_nameservice(webhdfs_conn_id: str | None) -> str | None:
    """The ``nameservice`` extra of the ``webhdfs`` connection (None without a connection id)."""
    if not webhdfs_conn_id:
        return None
    from airflow.sdk import BaseHook

    return (BaseHook.get_connection(webhdfs_conn_id).extra_dejson or {}).get("nameservice") or None


# --- OpenLineage objects (imported only here, when lineage is asked for) ------------------------------------


@functools.cache
def _model_facet_class() -> type:
    import attr
    from airflow.providers.common.compat.openlineage.facet import DatasetFacet

    @attr.define
    class TFoSModelDatasetFacet(DatasetFacet):
        """A TensorFlow model written by a training run: its format, spec hash, step and metrics."""

        format: str = attr.field(default=SAVED_MODEL)
        specHash: str | None = attr.field(default=None)  # OpenLineage fields are camelCase
        step: int | None = attr.field(default=None)
        metrics: dict[str, Any] = attr.field(factory=dict)
        fingerprint: str | None = attr.field(default=None)

        _additional_skip_redact = ["format", "specHash", "step", "metrics", "fingerprint"]

    return TFoSModelDatasetFacet


@functools.cache
def _input_facet_class() -> type:
    import attr
    from airflow.providers.common.compat.openlineage.facet import DatasetFacet

    @attr.define
    class TFoSInputFingerprintDatasetFacet(DatasetFacet):
        """What a training input was when its run started: its listing's hash, files and bytes."""

        kind: str | None = attr.field(default=None)
        hash: str | None = attr.field(default=None)
        files: int | None = attr.field(default=None)
        bytes: int | None = attr.field(default=None)
        runFingerprint: str | None = attr.field(default=None)

        _additional_skip_redact = ["kind", "hash", "files", "bytes", "runFingerprint"]

    return TFoSInputFingerprintDatasetFacet


def input_fingerprint_facet(found: dict[str, Any], run_fingerprint: str | None):
    """The ``tfosInputFingerprint`` facet of one input's fingerprint (see :mod:`airflow_tfos.shared.fingerprint`)."""
    return _input_facet_class()(
        kind=found.get("kind"),
        hash=found.get("hash"),
        files=found.get("count"),
        bytes=found.get("bytes"),
        runFingerprint=run_fingerprint,
    )


def model_facet(
    *,
    model_format: str = SAVED_MODEL,
    spec_hash: str | None = None,
    step: int | None = None,
    metrics=None,
    fingerprint: str | None = None,
):
    """The ``tfosModel`` dataset facet."""
    return _model_facet_class()(
        format=model_format, specHash=spec_hash, step=step, metrics=dict(metrics or {}), fingerprint=fingerprint
    )


def input_dataset(ident: tuple[str, str], *, columns: Iterable[str] = (), fingerprint=None) -> Dataset:
    """An input dataset; ``columns`` (the fed feature and label columns) become its ``schema`` facet, and a
    ``tfosInputFingerprint`` facet (``fingerprint``) is added when given."""
    from airflow.providers.common.compat.openlineage.facet import (
        Dataset,
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
    )

    names = list(dict.fromkeys(c for c in columns if isinstance(c, str) and c))
    facets = {"schema": SchemaDatasetFacet(fields=[SchemaDatasetFacetFields(name=c) for c in names])} if names else {}
    if fingerprint is not None:
        facets[INPUT_FACET] = fingerprint
    return Dataset(namespace=ident[0], name=ident[1], facets=facets)


def output_dataset(ident: tuple[str, str], *, model=None, rows: int | None = None) -> OutputDataset:
    """An output dataset, with a ``tfosModel`` facet and/or ``outputStatistics`` (rows) when given."""
    from airflow.providers.common.compat.openlineage.facet import (
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
    )

    facets = {MODEL_FACET: model} if model is not None else {}
    statistics = {"outputStatistics": OutputStatisticsOutputDatasetFacet(rowCount=rows)} if rows is not None else {}
    return OutputDataset(namespace=ident[0], name=ident[1], facets=facets, outputFacets=statistics)


def operator_lineage(inputs: list, outputs: list) -> OperatorLineage:
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(inputs=inputs, outputs=outputs)


def _columns(feed: Any) -> list[str]:
    if not isinstance(feed, dict):
        return []
    features = feed.get("features")
    features = [features] if isinstance(features, str) else list(features or [])
    label = feed.get("label")
    labels = [label] if isinstance(label, str) else list(label) if isinstance(label, list | tuple) else []
    return [*features, *labels]


def _storage_id(path: str, namespaces: Namespaces) -> tuple[str, str]:
    return path_id(path, default_namespace="file", hdfs_namespace=namespaces.hdfs)


def _usable(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and "{{" not in value


# --- per operator --------------------------------------------------------------------------------------------


def training_lineage(
    *,
    namespaces: Namespaces,
    data: dict | None,
    validation_data: dict | None,
    feed: dict | None,
    input_mode: str,
    warm_start: str | None,
    export_path: str | None,
    export: dict[str, Any] | None = None,
    fingerprint: dict[str, Any] | None = None,
) -> OperatorLineage:
    """A training run's lineage: its data (and validation data, and the model it starts from) in, the export out.

    :param namespaces: see :func:`namespaces_for`.
    :param data: the spec's ``data``. :param validation_data: the spec's ``validation_data``.
    :param feed: the spec's ``feed`` (its columns become the inputs' ``schema`` facet).
    :param input_mode: ``SPARK`` or ``TENSORFLOW``.
    :param warm_start: the exported model the run starts from, if any.
    :param export_path: the run directory's ``export/`` (None: no output, e.g. before the run directory is known).
    :param export: the export's ``_SUCCESS`` record (spec hash, step, metrics), once it is there.
    :param fingerprint: the run's fingerprint of its input and code, once computed (fingerprint.json).
    """
    by_spark = input_mode == "SPARK"
    columns = _columns(feed) if by_spark else []
    inputs = []
    found = (fingerprint or {}).get("inputs") or {}
    for name, item in (("data", data), ("validation_data", validation_data)):
        ident = data_id(item, namespaces, read_by_spark=by_spark)
        if ident is not None:
            facet = input_fingerprint_facet(found[name], fingerprint.get("hash")) if name in found else None
            inputs.append(input_dataset(ident, columns=columns, fingerprint=facet))
    if _usable(warm_start):
        inputs.append(input_dataset(_storage_id(warm_start, namespaces)))
    outputs = []
    if _usable(export_path):
        model = None
        if export:
            model = model_facet(
                spec_hash=export.get("spec_hash"),
                step=export.get("step"),
                metrics=export.get("metrics"),
                fingerprint=export.get("fingerprint"),
            )
        outputs.append(output_dataset(_storage_id(export_path, namespaces), model=model))
    return operator_lineage(inputs, outputs)


def feed_lineage(
    *,
    namespaces: Namespaces,
    data: dict | None,
    checkpoints_path: str | None,
    result: dict[str, Any] | None = None,
) -> OperatorLineage:
    """A feed's lineage: its data in (read by Spark), the run's checkpoints out (with the step reached).

    :param namespaces: see :func:`namespaces_for`.
    :param data: the feed's ``data`` (None: the spec's, which this task does not name).
    :param checkpoints_path: the run directory's ``checkpoints/``.
    :param result: the feed's done record (its ``step``), once it is there.
    """
    ident = data_id(data, namespaces, read_by_spark=True)
    inputs = [input_dataset(ident)] if ident else []
    outputs = []
    if _usable(checkpoints_path):
        step = (result or {}).get("step")
        model = model_facet(model_format=CHECKPOINT, step=step) if step is not None else None
        outputs.append(output_dataset(_storage_id(checkpoints_path, namespaces), model=model))
    return operator_lineage(inputs, outputs)


def inference_lineage(
    *,
    namespaces: Namespaces,
    data: dict | None,
    model_path: str | None,
    features: Iterable[str],
    output_path: str | None,
    rows: int | None = None,
) -> OperatorLineage:
    """Batch inference's lineage: the scored data and the model in, the predictions out (with their row count).

    :param namespaces: see :func:`namespaces_for`.
    :param data: what is scored (read by Spark). :param model_path: the SavedModel.
    :param features: the columns fed to the model (the data's ``schema`` facet).
    :param output_path: where the predictions are written (by Spark).
    :param rows: how many predictions were written, once known.
    """
    inputs = []
    ident = data_id(data, namespaces, read_by_spark=True)
    if ident is not None:
        inputs.append(input_dataset(ident, columns=features))
    if _usable(model_path):
        inputs.append(input_dataset(_storage_id(model_path, namespaces)))
    outputs = []
    if _usable(output_path):
        ident = path_id(output_path, default_namespace=namespaces.default_fs, hdfs_namespace=namespaces.hdfs)
        outputs.append(output_dataset(ident, rows=rows))
    return operator_lineage(inputs, outputs)


# --- the operators' glue (what each operator's get_openlineage_facets_on_* returns) ---------------------------


def operator_namespaces(operator: Any, backend: Callable[[], str]) -> Namespaces:
    """The namespaces of an operator's names without one: from its ``conf`` and its connections."""
    conf = getattr(operator, "conf", None)
    return namespaces_for(
        conf if isinstance(conf, dict) else {},
        backend=backend,
        nameservice=lambda: webhdfs_nameservice(operator.webhdfs_conn_id),
    )


def run_operator_lineage(
    operator: Any, export: dict[str, Any] | None, fingerprint: dict[str, Any] | None = None
) -> OperatorLineage:
    """Lineage of ``TFoSTrainOperator`` / ``TFoSLaunchClusterOperator`` (the export once ``export`` is known).

    :param operator: the operator (after ``execute`` when the task is complete).
    :param export: the export's ``_SUCCESS`` record, if this task ended with one.
    :param fingerprint: the fingerprint of the run's input and code, if this task computed it.
    """
    known = _usable(operator.run_dir)
    return training_lineage(
        namespaces=operator_namespaces(operator, lambda: operator.hook.backend),
        data=operator.data,
        validation_data=operator.validation_data,
        feed=operator.feed,
        input_mode=operator.input_mode,
        warm_start=operator.warm_start,
        export_path=operator.run_dir_contents.path("export") if known and (export or not operator.serve) else None,
        export=export,
        fingerprint=fingerprint,
    )


def feed_operator_lineage(operator: Any, result: dict[str, Any] | None) -> OperatorLineage:
    """Lineage of ``TFoSFeedOperator``; ``result`` is the feed's done record once known."""
    known = _usable(operator.run_dir)
    return feed_lineage(
        namespaces=operator_namespaces(operator, lambda: operator.apps.tfos_hook.backend),
        data=operator.data,
        checkpoints_path=operator.run_dir_hook.run_dir_contents.path("checkpoints") if known else None,
        result=result,
    )


def inference_operator_lineage(operator: Any, result: dict[str, Any] | None) -> OperatorLineage:
    """Lineage of ``TFoSInferenceOperator``; ``result`` (its row count) once known."""
    return inference_lineage(
        namespaces=operator_namespaces(operator, lambda: operator.hook.backend),
        data=operator.data,
        model_path=operator.model_path,
        features=operator.features,
        output_path=operator.output_path,
        rows=(result or {}).get("rows"),
    )
