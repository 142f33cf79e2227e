"""TensorFlowOnSpark 2.2.5's ``pipeline`` module: ``TFEstimator`` and ``TFModel`` as Spark ML stages.

A TFoS program keeps its calls::

    estimator = TFEstimator(main_fun, args).setInputMapping({"image": "image", "label": "label"}) \\
        .setExportDir(args.export_dir).setClusterSize(2).setEpochs(1).setBatchSize(64)
    model = estimator.fit(df)          # main_fun(args, ctx) reads rows with TFNode.DataFeed
    TFModel(args).setInputMapping({"image": "conv2d_input"}).setOutputMapping({"dense_1": "prediction"}) \\
        .setExportDir(args.export_dir).transform(df)

``fit`` runs ``train_fn`` on a cluster from :func:`airflow_tfos.runtime.compat.TFCluster.run` in
InputMode.SPARK, fed the input mapping's columns in name order; ``args`` is ``tf_args`` with every Param
merged in (``args.export_dir``, ``args.batch_size``...), or ``tf_args`` itself when it is an argv list.
``transform`` scores the SavedModel in ``export_dir`` with :func:`airflow_tfos.runtime.driver.inference.predict`
(loaded once per Python worker) and returns only the output mapping's columns, as TFoS did.

Differences from TFoS, each failing with an error that names it: InputMode.TENSORFLOW, ``export_fn``,
``driver_ps_nodes`` and protocols other than ``grpc`` are refused (TFoS 2.x refused the first two as well);
``transform`` needs a SavedModel (``setExportDir``; a checkpoint in ``model_dir`` alone is not scored) and
feeds columns as they are (an image column feeds a model whose input is flat, or that reshapes it first);
``tag_set`` may be unset or ``serve``. ``grace_secs`` is kept but not waited for: ``fit`` returns when
``train_fn`` has returned on every node. Like TFoS's, these stages are not ``MLWritable``: save the
native :mod:`airflow_tfos.runtime.driver.ml` stages instead.
"""

from __future__ import annotations

import argparse
import copy
import logging
from typing import Any

from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters

from airflow_tfos.runtime.compat import TFCluster
from airflow_tfos.runtime.driver.ml import check_columns, check_saved_model

log = logging.getLogger(__name__)


class TFTypeConverters:
    """Type converters for Params that TFoS added to Spark's."""

    @staticmethod
    def toDict(value: Any) -> dict:
        """Accept a dict as is; anything else is a TypeError naming its type."""
        if isinstance(value, dict):
            return value
        raise TypeError(f"Could not convert {type(value).__name__} to dict")


def _mixin(class_name: str, name: str, suffix: str, doc: str, converter) -> type:
    """A Params mix-in with one Param ``name`` and its ``set<suffix>``/``get<suffix>`` methods, as TFoS's."""

    def setter(self, value):
        return self._set(**{name: value})

    def getter(self):
        return self.getOrDefault(name)

    setter.__doc__ = f"Set ``{name}``: {doc}."
    getter.__doc__ = f"Return ``{name}``."
    attributes = {
        name: Param(Params._dummy(), name, doc, typeConverter=converter),
        f"set{suffix}": setter,
        f"get{suffix}": getter,
        "__doc__": f"Mix-in holding the ``{name}`` Param ({doc}).",
        "__module__": __name__,
    }
    return type(class_name, (Params,), attributes)


HasBatchSize = _mixin("HasBatchSize", "batch_size", "BatchSize", "Number of records per batch", TypeConverters.toInt)
HasClusterSize = _mixin(
    "HasClusterSize", "cluster_size", "ClusterSize", "Number of nodes in the cluster", TypeConverters.toInt
)
HasEpochs = _mixin("HasEpochs", "epochs", "Epochs", "Number of epochs to train", TypeConverters.toInt)
HasGraceSecs = _mixin(
    "HasGraceSecs", "grace_secs", "GraceSecs", "Seconds to wait after feeding (kept; not needed)", TypeConverters.toInt
)
HasInputMapping = _mixin(
    "HasInputMapping", "input_mapping", "InputMapping", "DataFrame column to input tensor", TFTypeConverters.toDict
)
HasMasterNode = _mixin(
    "HasMasterNode", "master_node", "MasterNode", "Job name of the master/chief node", TypeConverters.toString
)
HasModelDir = _mixin("HasModelDir", "model_dir", "ModelDir", "Path of the model checkpoints", TypeConverters.toString)
HasOutputMapping = _mixin(
    "HasOutputMapping", "output_mapping", "OutputMapping", "Output tensor to DataFrame column", TFTypeConverters.toDict
)
HasReaders = _mixin("HasReaders", "readers", "Readers", "Number of reader threads (kept; unused)", TypeConverters.toInt)
HasSteps = _mixin("HasSteps", "steps", "Steps", "Maximum number of steps to train", TypeConverters.toInt)
HasTensorboard = _mixin(
    "HasTensorboard", "tensorboard", "Tensorboard", "Launch TensorBoard beside the chief", TypeConverters.toBoolean
)
HasTFRecordDir = _mixin(
    "HasTFRecordDir", "tfrecord_dir", "TFRecordDir", "Path for TFRecords (kept; unused)", TypeConverters.toString
)
HasExportDir = _mixin("HasExportDir", "export_dir", "ExportDir", "Directory of the SavedModel", TypeConverters.toString)
HasSignatureDefKey = _mixin(
    "HasSignatureDefKey",
    "signature_def_key",
    "SignatureDefKey",
    "SavedModel signature to score with",
    TypeConverters.toString,
)
HasTagSet = _mixin("HasTagSet", "tag_set", "TagSet", "Comma-separated SavedModel tags", TypeConverters.toString)


class HasInputMode(Params):
    """Mix-in holding the ``input_mode`` Param; only InputMode.SPARK feeds a DataFrame to ``fit``."""

    input_mode = Param(Params._dummy(), "input_mode", "Input mode (1=SPARK)", typeConverter=TypeConverters.toInt)

    def setInputMode(self, value):
        """Set ``input_mode``; InputMode.TENSORFLOW is refused, as by TFoS 2.x."""
        if value == TFCluster.InputMode.TENSORFLOW:
            raise ValueError(
                "TFEstimator does not support InputMode.TENSORFLOW (TFoS 2.x refused it too): keep "
                "InputMode.SPARK, or save the DataFrame with dfutil.saveAsTFRecords and call TFCluster.run "
                "with InputMode.TENSORFLOW yourself"
            )
        if value != TFCluster.InputMode.SPARK:
            raise ValueError(f"input_mode must be InputMode.SPARK, got {value!r}")
        return self._set(input_mode=value)

    def getInputMode(self):
        """Return ``input_mode``."""
        return self.getOrDefault(self.input_mode)


class HasNumPS(Params):
    """Mix-in holding the ``num_ps`` and ``driver_ps_nodes`` Params."""

    num_ps = Param(Params._dummy(), "num_ps", "Number of PS nodes", typeConverter=TypeConverters.toInt)
    driver_ps_nodes = Param(
        Params._dummy(), "driver_ps_nodes", "Run PS nodes on the driver (unsupported)", TypeConverters.toBoolean
    )

    def setNumPS(self, value):
        """Set ``num_ps``."""
        return self._set(num_ps=value)

    def getNumPS(self):
        """Return ``num_ps``."""
        return self.getOrDefault(self.num_ps)

    def setDriverPSNodes(self, value):
        """Set ``driver_ps_nodes``; only False is supported."""
        if value:
            raise ValueError(
                "driver_ps_nodes=True is not supported: parameter servers run in executors; "
                "call setDriverPSNodes(False)"
            )
        return self._set(driver_ps_nodes=value)

    def getDriverPSNodes(self):
        """Return ``driver_ps_nodes``."""
        return self.getOrDefault(self.driver_ps_nodes)


class HasProtocol(Params):
    """Mix-in holding the ``protocol`` Param; only ``grpc`` is supported."""

    protocol = Param(
        Params._dummy(), "protocol", "Network protocol for TF (grpc)", typeConverter=TypeConverters.toString
    )

    def setProtocol(self, value):
        """Set ``protocol``; only ``grpc``."""
        if value != "grpc":
            raise ValueError(f"protocol {value!r} is not supported: TF nodes talk grpc; call setProtocol('grpc')")
        return self._set(protocol=value)

    def getProtocol(self):
        """Return ``protocol``."""
        return self.getOrDefault(self.protocol)


class Namespace:
    """Arguments as attributes, made from a dict, an ``argparse.Namespace``, another Namespace, or an argv list
    (then kept as ``argv``)."""

    argv = None

    def __init__(self, d: Any) -> None:
        if isinstance(d, list):
            self.argv = d
        elif isinstance(d, dict):
            self.__dict__.update(d)
        elif isinstance(d, (argparse.Namespace, Namespace)):
            self.__dict__.update(vars(d))
        else:
            raise TypeError(
                f"tf_args must be a dict, a list, an argparse.Namespace or a Namespace, got {type(d).__name__}"
            )

    def __iter__(self):
        return iter(self.argv if self.argv else list(self.__dict__))

    def __repr__(self) -> str:
        if self.argv:
            return repr(self.argv)
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in sorted(self.__dict__.items()))})"

    def __eq__(self, other: object) -> bool:
        if self.argv:
            return self.argv == other
        return isinstance(other, (Namespace, argparse.Namespace)) and self.__dict__ == vars(other)

    __hash__ = None  # type: ignore[assignment]


class TFParams(Params):
    """Mix-in keeping the program's namespace-style ``args`` and merging the stage's Params into them."""

    args: Namespace | None = None

    def merge_args_params(self) -> Namespace:
        """Return a copy of ``args`` with every Param's value (set or default) as an attribute."""
        merged = copy.copy(self.args)
        for param in self.params:
            if self.isDefined(param):
                setattr(merged, param.name, self.getOrDefault(param))
        return merged


def _check_mapping(mapping: dict, what: str, setter: str) -> None:
    if not mapping:
        raise ValueError(f"the {what} is empty: call {setter}({{column: tensor, ...}})")


class TFEstimator(
    Estimator,
    TFParams,
    HasInputMapping,
    HasClusterSize,
    HasNumPS,
    HasInputMode,
    HasMasterNode,
    HasProtocol,
    HasGraceSecs,
    HasTensorboard,
    HasModelDir,
    HasExportDir,
    HasTFRecordDir,
    HasBatchSize,
    HasEpochs,
    HasReaders,
    HasSteps,
):
    """Spark ML Estimator training ``train_fn(args, ctx)`` on a TF cluster fed the DataFrame's mapped columns.

    :param train_fn: the TF "main" function; it reads rows (the input mapping's columns, in name order) with
        ``TFNode.DataFeed`` and exports a SavedModel to ``args.export_dir``.
    :param tf_args: the program's arguments (argparse Namespace, dict, or argv list).
    :param export_fn: TFoS 1.x's export function: not supported (export inside ``train_fn``).
    """

    def __init__(self, train_fn, tf_args, export_fn=None) -> None:
        super().__init__()
        self.train_fn = train_fn
        self.export_fn = export_fn
        self.args = Namespace(tf_args)
        self._setDefault(
            input_mapping={},
            cluster_size=1,
            num_ps=0,
            driver_ps_nodes=False,
            input_mode=TFCluster.InputMode.SPARK,
            master_node="chief",
            protocol="grpc",
            tensorboard=False,
            model_dir=None,
            export_dir=None,
            tfrecord_dir=None,
            batch_size=100,
            epochs=1,
            readers=1,
            steps=1000,
            grace_secs=30,
        )

    def _fit(self, dataset):
        if self.export_fn is not None:
            raise ValueError(
                "export_fn is not supported (TFoS 2.x refused it too): export the model inside train_fn, e.g. "
                "compat.export_saved_model(model, args.export_dir, ctx.job_name == 'chief')"
            )
        mapping = self.getInputMapping()
        _check_mapping(mapping, "input mapping", "setInputMapping")
        check_columns(dataset, dict.fromkeys(sorted(mapping), "setInputMapping"), "DataFrame to fit")
        merged = self.merge_args_params()
        tf_args = self.args.argv if self.args.argv else merged
        log.info("TFEstimator: training on %d nodes with %s", merged.cluster_size, merged)
        cluster = TFCluster.run(
            dataset.sparkSession.sparkContext,
            self.train_fn,
            tf_args,
            merged.cluster_size,
            merged.num_ps,
            merged.tensorboard,
            TFCluster.InputMode.SPARK,
            master_node=merged.master_node,
            driver_ps_nodes=merged.driver_ps_nodes,
        )
        cluster.train(dataset.select(sorted(mapping)).rdd, merged.epochs)
        cluster.shutdown()  # train() returned when train_fn had returned everywhere: no grace_secs to wait
        return self._copyValues(TFModel(self.args))


class TFModel(
    Model,
    TFParams,
    HasInputMapping,
    HasOutputMapping,
    HasBatchSize,
    HasModelDir,
    HasExportDir,
    HasSignatureDefKey,
    HasTagSet,
):
    """Spark ML Model scoring a SavedModel: the input mapping's columns feed the signature's inputs, and each
    output of the output mapping becomes a column; ``transform`` returns those columns only, row for row.

    :param tf_args: the program's arguments (argparse Namespace, dict, or argv list).
    """

    def __init__(self, tf_args) -> None:
        super().__init__()
        self.args = Namespace(tf_args)
        self._setDefault(
            input_mapping={},
            output_mapping={},
            batch_size=100,
            model_dir=None,
            export_dir=None,
            signature_def_key=None,
            tag_set=None,
        )

    def _transform(self, dataset):
        from pyspark.sql import functions as F

        from airflow_tfos.runtime.driver.inference import predict

        inputs, outputs = self.getInputMapping(), self.getOutputMapping()
        _check_mapping(inputs, "input mapping", "setInputMapping")
        _check_mapping(outputs, "output mapping", "setOutputMapping")
        check_columns(dataset, dict.fromkeys(sorted(inputs), "setInputMapping"), "DataFrame to transform")
        if len(set(inputs.values())) < len(inputs):
            raise ValueError(
                f"the input mapping {inputs} feeds one tensor from several columns: map each column to its own"
            )
        tags = self.getTagSet()
        if tags not in (None, "", "serve"):
            raise ValueError(f"tag_set {tags!r} is not supported: SavedModels are loaded with their 'serve' tags")
        if self.getExportDir() is None and self.getModelDir():
            raise ValueError("TFModel scores a SavedModel, not a checkpoint in model_dir: call setExportDir(path)")
        check_saved_model(dataset.sparkSession, self.getExportDir(), "setExportDir")
        fed = dataset.select([F.col(column).alias(tensor) for column, tensor in sorted(inputs.items())])
        scored = predict(
            fed,
            self.getExportDir(),
            [tensor for _, tensor in sorted(inputs.items())],
            outputs=sorted(outputs),
            signature=self.getSignatureDefKey() or "serving_default",
            batch_size=self.getBatchSize(),
        )
        return scored.select([F.col(tensor).alias(column) for tensor, column in sorted(outputs.items())])
