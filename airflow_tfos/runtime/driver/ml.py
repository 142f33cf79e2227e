"""Spark ML stages on the native API: a TF model as one stage of an ordinary ``pyspark.ml.Pipeline``.

>>> from pyspark.ml import Pipeline
>>> from pyspark.ml.feature import VectorAssembler
>>> from airflow_tfos.runtime import TFoSEstimator
>>> estimator = TFoSEstimator(mainFun="my_pkg.train:main_fun", exportDir="/models/m1", numNodes=2,
...                           featuresCol="features", labelCol="label", epochs=2, batchSize=32)
>>> model = Pipeline(stages=[VectorAssembler(inputCols=["a", "b"], outputCol="features"), estimator]).fit(df)
>>> model.transform(df).select("prediction")

``fit`` runs ``main_fun(args, ctx)`` on a TF cluster in a Spark barrier stage, fed with the DataFrame's
feature, label and weight columns (``ctx.dataset()``, see ``docs/feed.md``); ``args`` is the estimator's
``tfArgs`` dict plus ``export_dir``, ``epochs``, ``batch_size``, ``features_col``, ``label_col`` and
``weight_col``. The program must export a SavedModel to ``args["export_dir"]``. The fitted
:class:`TFoSModel` scores with :func:`airflow_tfos.runtime.driver.inference.predict` (the model is loaded once
per Python worker). Both stages save and load with Spark ML's default writers, so a fitted
``PipelineModel`` does too; the training function is then saved as its ``module:function`` reference.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from typing import Any

from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import HasFeaturesCol, HasLabelCol, HasPredictionCol, HasWeightCol
from pyspark.ml.util import DefaultParamsReadable, DefaultParamsWritable
from pyspark.sql.types import NumericType

from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed

log = logging.getLogger(__name__)

#: files one of which every SavedModel directory holds
SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")


def _to_dict(value: Any) -> dict:
    if not isinstance(value, dict):
        raise TypeError(f"expected a dict, got {type(value).__name__}")
    return dict(value)


def function_reference(fn: Callable) -> str | None:
    """Return ``module:function`` for a function importable by that name, or None (a lambda, a closure, or a
    function of ``__main__``, which executors and a later ``load`` cannot import)."""
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<" in name or "." in name:
        return None
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return f"{module}:{name}" if found is fn else None


def resolve_function(reference: str) -> Callable:
    """Import ``module:function`` and return the function; the error names the reference and what failed."""
    module, sep, name = reference.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"mainFun must be 'module:function' (e.g. 'my_pkg.train:main_fun'), got {reference!r}")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"mainFun {reference!r} cannot be imported: {error}") from error
    if not callable(fn):
        raise ValueError(f"mainFun {reference!r} is not callable")
    return fn


def _hadoop_status(spark, path: str):
    """The Hadoop ``FileStatus`` of ``path`` (local or any file system the Spark driver can reach), or None."""
    jvm = spark.sparkContext._jvm
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return fs.getFileStatus(hpath) if fs.exists(hpath) else None


def saved_model_time(spark, export_dir: str) -> float | None:
    """Return when the SavedModel in ``export_dir`` was written (epoch seconds), or None if there is none."""
    for name in SAVED_MODEL_FILES:
        status = _hadoop_status(spark, export_dir.rstrip("/") + "/" + name)
        if status is not None:
            return status.getModificationTime() / 1000.0
    return None


def check_saved_model(spark, export_dir: str | None, setting: str) -> None:
    """Fail unless ``export_dir`` holds a SavedModel, naming the path and the ``setting`` to change."""
    if not export_dir:
        raise ValueError(f"no SavedModel directory is set: call {setting}(path)")
    if _hadoop_status(spark, export_dir) is None:
        raise FileNotFoundError(f"SavedModel directory {export_dir} does not exist: fix {setting}")
    if saved_model_time(spark, export_dir) is None:
        raise FileNotFoundError(
            f"{export_dir} holds no SavedModel (no {' or '.join(SAVED_MODEL_FILES)}): fix {setting}, or export "
            "the model there first"
        )


def check_columns(df, columns: dict[str, str | None], what: str) -> None:
    """Fail naming the first of ``columns`` (column -> the setter that names it) missing from ``df``."""
    present = set(df.columns)
    for column, setter in columns.items():
        if column is not None and column not in present:
            raise FeedConfigError(
                f"column {column!r} is not in the {what} (its columns: {', '.join(df.columns) or 'none'}); "
                f"fix {setter} or add the column"
            )


class _TFoSStageParams(HasFeaturesCol, HasPredictionCol):
    """Params shared by :class:`TFoSEstimator` and :class:`TFoSModel`."""

    exportDir = Param(
        Params._dummy(), "exportDir", "SavedModel directory the program exports to", TypeConverters.toString
    )
    batchSize = Param(Params._dummy(), "batchSize", "rows per batch (per node; per scoring call)", TypeConverters.toInt)
    signature = Param(Params._dummy(), "signature", "SavedModel signature to score with", TypeConverters.toString)
    outputName = Param(
        Params._dummy(),
        "outputName",
        "signature output written to predictionCol ('' = the first by name)",
        TypeConverters.toString,
    )

    def __init__(self) -> None:
        super().__init__()
        self._setDefault(batchSize=64, signature="serving_default", outputName="")

    def setFeaturesCol(self, value: str):
        """Set the feature column (a vector, an array or a number column)."""
        return self._set(featuresCol=value)

    def setPredictionCol(self, value: str):
        """Set the column the model's output is written to."""
        return self._set(predictionCol=value)

    def setExportDir(self, value: str):
        """Set the SavedModel directory."""
        return self._set(exportDir=value)

    def getExportDir(self) -> str | None:
        """Return the SavedModel directory, or None if it is not set."""
        return self.getOrDefault(self.exportDir) if self.isDefined(self.exportDir) else None

    def setBatchSize(self, value: int):
        """Set the rows per batch."""
        return self._set(batchSize=value)

    def getBatchSize(self) -> int:
        """Return the rows per batch."""
        return self.getOrDefault(self.batchSize)

    def setSignature(self, value: str):
        """Set the SavedModel signature scored with."""
        return self._set(signature=value)

    def setOutputName(self, value: str):
        """Set which output of the signature becomes the prediction column."""
        return self._set(outputName=value)


class TFoSModel(Model, _TFoSStageParams, DefaultParamsReadable, DefaultParamsWritable):
    """A SavedModel as a Spark ML ``Model``: ``transform`` adds a prediction column, one value per row.

    The prediction column is ``float`` for a model with one output value per row, ``array<float>`` for
    several (e.g. class probabilities). Every column of the input is kept.

    :param exportDir: the SavedModel directory, readable from the driver and every executor.
    :param featuresCol: the feature column (default ``features``).
    :param predictionCol: the new column (default ``prediction``).
    :param batchSize: rows per call of the model.
    :param signature: the signature to call (default ``serving_default``).
    :param outputName: the signature output to write (default: the first by name).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self._set(**kwargs)

    def _transform(self, dataset):
        from airflow_tfos.runtime.driver.inference import predict

        check_columns(dataset, {self.getFeaturesCol(): "setFeaturesCol"}, "DataFrame to transform")
        check_saved_model(dataset.sparkSession, self.getExportDir(), "setExportDir")
        return predict(
            dataset,
            self.getExportDir(),
            self.getFeaturesCol(),
            output_col=self.getPredictionCol(),
            output=self.getOrDefault(self.outputName) or None,
            signature=self.getOrDefault(self.signature),
            batch_size=self.getBatchSize(),
        )


class TFoSEstimator(
    Estimator, _TFoSStageParams, HasLabelCol, HasWeightCol, DefaultParamsReadable, DefaultParamsWritable
):
    """A TF training program as a Spark ML ``Estimator``: ``fit(df)`` trains on a TF cluster and returns a
    :class:`TFoSModel` on the SavedModel the program exported.

    :param mainFun: the training function ``main_fun(args, ctx)``, or its ``'module:function'`` reference
        (needed to save the stage when the function is not importable by name).
    :param exportDir: where the program must export its SavedModel (``args["export_dir"]``).
    :param featuresCol: the feature column fed to TF (default ``features``): a vector (``VectorAssembler``'s
        output), an array, or a number.
    :param labelCol: the label column (default ``label``); ``''`` feeds no label.
    :param weightCol: a column of per-row sample weights (default: none).
    :param numNodes: TF nodes that train (default 2).
    :param numPs: parameter servers besides them (default 0).
    :param epochs: passed to the program as ``args["epochs"]`` (default 1).
    :param batchSize: rows per batch on each node (default 64).
    :param densify: feed a vector column as a dense tensor even when some rows are sparse (default True).
    :param shuffle: shuffle the rows each epoch (default True).
    :param tfArgs: more arguments for the program (a dict of JSON values), merged into ``args``.
    :param runDir: the run's directory (``ctx.run_dir``), e.g. for checkpoints (default: none).
    :param timeout: seconds the training may take (0: no limit).
    """

    mainFun = Param(Params._dummy(), "mainFun", "training function, as 'module:function'", TypeConverters.toString)
    numNodes = Param(Params._dummy(), "numNodes", "TF nodes that train", TypeConverters.toInt)
    numPs = Param(Params._dummy(), "numPs", "parameter server nodes", TypeConverters.toInt)
    epochs = Param(Params._dummy(), "epochs", "epochs, passed to the program as args['epochs']", TypeConverters.toInt)
    densify = Param(Params._dummy(), "densify", "feed vectors as dense tensors", TypeConverters.toBoolean)
    shuffle = Param(Params._dummy(), "shuffle", "shuffle rows each epoch", TypeConverters.toBoolean)
    tfArgs = Param(Params._dummy(), "tfArgs", "more arguments for the program (JSON values)", _to_dict)
    runDir = Param(Params._dummy(), "runDir", "the run's directory", TypeConverters.toString)
    timeout = Param(Params._dummy(), "timeout", "seconds the training may take (0: no limit)", TypeConverters.toFloat)

    def __init__(self, *, mainFun: str | Callable | None = None, **kwargs: Any) -> None:
        super().__init__()
        self._setDefault(
            labelCol="label", numNodes=2, numPs=0, epochs=1, densify=True, shuffle=True, tfArgs={}, timeout=0.0
        )
        self._main_fun: Callable | None = None
        if mainFun is not None:
            self.setMainFun(mainFun)
        self._set(**kwargs)

    def setMainFun(self, value: str | Callable):
        """Set the training function, or its ``'module:function'`` reference."""
        if not callable(value):
            self._main_fun = None
            return self._set(mainFun=value)
        self._main_fun = value
        reference = function_reference(value)
        if reference is None:
            self.clear(self.mainFun)  # runs, but cannot be saved: write() says so
            return self
        return self._set(mainFun=reference)

    def setLabelCol(self, value: str):
        """Set the label column (``''``: none)."""
        return self._set(labelCol=value)

    def setWeightCol(self, value: str):
        """Set the sample weight column."""
        return self._set(weightCol=value)

    def setNumNodes(self, value: int):
        """Set the TF nodes that train."""
        return self._set(numNodes=value)

    def setNumPs(self, value: int):
        """Set the parameter servers."""
        return self._set(numPs=value)

    def setEpochs(self, value: int):
        """Set the epochs passed to the program."""
        return self._set(epochs=value)

    def setDensify(self, value: bool):
        """Set whether vectors are fed dense."""
        return self._set(densify=value)

    def setShuffle(self, value: bool):
        """Set whether rows are shuffled each epoch."""
        return self._set(shuffle=value)

    def setTfArgs(self, value: dict):
        """Set more arguments for the program."""
        return self._set(tfArgs=value)

    def setRunDir(self, value: str):
        """Set the run's directory."""
        return self._set(runDir=value)

    def setTimeout(self, value: float):
        """Set the seconds the training may take (0: no limit)."""
        return self._set(timeout=value)

    def write(self):
        """Return a writer; the training function must be known by its ``module:function`` reference."""
        if not self.isDefined(self.mainFun):
            raise ValueError(
                "this TFoSEstimator's training function cannot be saved (a lambda, a closure or a function of "
                "__main__): put it in a module and pass mainFun='module:function'"
            )
        return super().write()

    def _train_function(self) -> Callable:
        if self._main_fun is not None:
            return self._main_fun
        if not self.isDefined(self.mainFun):
            raise ValueError("no training function is set: pass mainFun=main_fun or mainFun='module:function'")
        return resolve_function(self.getOrDefault(self.mainFun))

    def _optional(self, param: Param) -> str | None:
        value = self.getOrDefault(param) if self.isDefined(param) else None
        return value or None

    def _feed(self, dataset) -> Feed:
        features = self.getFeaturesCol()
        is_vector = dataset.schema[features].dataType.simpleString() == "vector"
        return Feed(
            features=features,
            label=self._optional(self.labelCol),
            weight=self._optional(self.weightCol),
            batch_size=self.getBatchSize(),
            shuffle=self.getOrDefault(self.shuffle),
            densify=(features,) if is_vector and self.getOrDefault(self.densify) else (),
        )

    def _check(self, dataset) -> None:
        check_columns(
            dataset,
            {
                self.getFeaturesCol(): "setFeaturesCol",
                self._optional(self.labelCol): "setLabelCol",
                self._optional(self.weightCol): "setWeightCol",
            },
            "training DataFrame",
        )
        weight = self._optional(self.weightCol)
        if weight is not None and not isinstance(dataset.schema[weight].dataType, NumericType):
            raise FeedConfigError(
                f"weight column {weight!r} has type {dataset.schema[weight].dataType.simpleString()}: "
                "sample weights must be numbers"
            )
        if not self.getExportDir():
            raise ValueError("no export directory is set: call setExportDir(path); the program exports its model there")

    def _fit(self, dataset):
        from airflow_tfos.runtime.driver.launcher import run

        self._check(dataset)
        main_fun = self._train_function()
        export_dir = self.getExportDir()
        args = {
            **self.getOrDefault(self.tfArgs),
            "export_dir": export_dir,
            "epochs": self.getOrDefault(self.epochs),
            "batch_size": self.getBatchSize(),
            "features_col": self.getFeaturesCol(),
            "label_col": self._optional(self.labelCol),
            "weight_col": self._optional(self.weightCol),
        }
        spark = dataset.sparkSession
        started = time.time()
        timeout = self.getOrDefault(self.timeout)
        log.info(
            "training %s on %d nodes, exporting to %s",
            getattr(main_fun, "__name__", main_fun),
            self.getOrDefault(self.numNodes),
            export_dir,
        )
        run(
            spark.sparkContext,
            main_fun,
            args,
            num_nodes=self.getOrDefault(self.numNodes) + self.getOrDefault(self.numPs),
            num_ps=self.getOrDefault(self.numPs),
            run_dir=self._optional(self.runDir),
            timeout=timeout if timeout > 0 else None,
            data=dataset,
            feed=self._feed(dataset),
        )
        written = saved_model_time(spark, export_dir)
        if written is None or written < started - 2.0:
            raise FileNotFoundError(
                f"the training program wrote no SavedModel to {export_dir} (args['export_dir']): export the "
                "trained model there, e.g. compat.export_saved_model(model, args['export_dir'], ctx.is_chief)"
            )
        model = TFoSModel()
        self._copyValues(model)
        return model._set(exportDir=export_dir)
