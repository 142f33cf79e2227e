"""TensorFlowOnSpark's pipeline module (TFEstimator, TFModel) on the local cluster, with a program in the shape
of TFoS's mnist_pipeline.py that changes nothing but its import."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from airflow_tfos.runtime.compat.pipeline import TFEstimator, TFModel
from airflow_tfos.shared.errors import FeedConfigError
from tests.integration.spark.test_compat import load_migrated
from tests.integration.spark.tfos_programs import mnist_data

pytestmark = pytest.mark.integration

MNIST_PIPELINE = Path(__file__).parent / "tfos_programs" / "mnist_pipeline.py"
KERAS_AT_TOP = Path(__file__).parent / "tfos_programs" / "keras_at_top.py"
ROWS = 400


@pytest.fixture(scope="module")
def digits(spark):
    images, labels = mnist_data.generate(ROWS, seed=5)  # MNIST-shaped: 784 pixels 0-255, a label 0-9
    rows = [(image.reshape(-1).tolist(), int(label)) for image, label in zip(images, labels, strict=True)]
    frame = spark.createDataFrame(rows, ["pixels", "digit"]).repartition(2)
    return frame.cache()


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return load_migrated(tmp_path_factory.mktemp("program"), MNIST_PIPELINE)


@pytest.fixture(scope="module")
def fitted(program, digits, tmp_path_factory):
    """The program's TFEstimator as the last stage of a Pipeline after a feature transformer, fitted once."""
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import SQLTransformer

    base = tmp_path_factory.mktemp("mnist")
    args = program.parse_args(
        ["--rows", str(ROWS), "--model_dir", str(base / "model"), "--export_dir", str(base / "export")]
    )
    rename = SQLTransformer(statement="SELECT pixels AS image, digit AS label FROM __THIS__")
    return args, Pipeline(stages=[rename, program.build_estimator(args)]).fit(digits)


def accuracy(predictions, labels) -> float:
    return float(np.mean(np.argmax(np.array(predictions), axis=1) == np.array(labels)))


def test_tfos_mnist_pipeline_program_trains_and_scores_after_changing_only_its_import(program, digits, fitted):
    args, pipeline_model = fitted
    assert (Path(args.export_dir) / "saved_model.pb").exists()
    tf_model = pipeline_model.stages[-1]
    assert isinstance(tf_model, TFModel)
    assert tf_model.getExportDir() == args.export_dir and tf_model.getBatchSize() == args.batch_size
    labels = [r.digit for r in digits.select("digit").collect()]
    images = digits.selectExpr("pixels AS image")
    scored = program.inference(images, args)  # TFModel(args) with the program's own mappings
    assert scored.columns == ["prediction"]
    predictions = [r.prediction for r in scored.collect()]
    assert len(predictions) == ROWS and all(len(p) == 10 for p in predictions)
    assert accuracy(predictions, labels) >= 0.7  # chance: 0.1


def test_fitted_pipeline_model_transforms_through_its_tfmodel(digits, fitted):
    _, pipeline_model = fitted
    pipeline_model.stages[-1].setInputMapping({"image": "reshape_input"}).setOutputMapping({"dense": "prediction"})
    scored = pipeline_model.transform(digits).collect()
    labels = [r.digit for r in digits.select("digit").collect()]
    assert len(scored) == ROWS
    assert accuracy([r.prediction for r in scored], labels) >= 0.7


def test_bad_input_fails_before_any_tf_process_naming_the_column_or_path(digits, tmp_path):
    started = time.monotonic()
    images = digits.selectExpr("pixels AS image", "digit AS label")
    estimator = TFEstimator(lambda args, ctx: None, {}).setInputMapping({"image": "x", "labels": "y"})
    with pytest.raises(FeedConfigError, match="column 'labels' is not in the DataFrame to fit .* fix setInputMapping"):
        estimator.fit(images)
    with pytest.raises(ValueError, match="export_fn is not supported.*export_saved_model"):
        TFEstimator(lambda args, ctx: None, {}, export_fn=print).setInputMapping({"image": "x"}).fit(images)
    model = TFModel({}).setInputMapping({"image": "x"}).setOutputMapping({"dense": "prediction"})
    missing = str(tmp_path / "no-export")
    with pytest.raises(FileNotFoundError, match=f"SavedModel directory {missing} does not exist: fix setExportDir"):
        model.setExportDir(missing).transform(images)
    with pytest.raises(FeedConfigError, match="column 'image' is not in the DataFrame to transform"):
        model.transform(digits)
    with pytest.raises(ValueError, match="output mapping is empty: call setOutputMapping"):
        TFModel({}).setInputMapping({"image": "x"}).transform(images)
    assert time.monotonic() - started < 10


def test_a_program_that_imports_keras_at_the_top_of_its_module_trains_with_one_keras(spark, tmp_path):
    """TFoS's tests/test_pipeline.py shape: the driver pickles Keras 3's Sequential and Dense (its module's imports),
    the node's tf.keras is Keras 2 (keras="auto" with tf-keras installed); before, compile failed in the chief with
    "Could not interpret optimizer identifier"."""
    import tensorflow as tf

    driver_keras = type(tf.keras.Sequential()).__module__.split(".")[0]
    program = load_migrated(tmp_path, KERAS_AT_TOP)
    assert program.Sequential.__module__.split(".")[0] == driver_keras == "keras"  # the driver's: Keras 3
    rng = np.random.default_rng(7)
    features = rng.random((ROWS, 2))
    rows = [(f.tolist(), [float(f @ np.array([3.14, 1.618]))]) for f in features]
    frame = spark.createDataFrame(rows, ["col1", "col2"]).repartition(2)
    args = program.parse_args(["--rows", str(ROWS), "--export_dir", str(tmp_path / "export")])
    model = program.fit(frame, args)
    assert (tmp_path / "export" / "saved_model.pb").exists()
    scored = program.score(model, spark.createDataFrame([([1.0, 1.0], [0.0])], ["c1", "c2"])).head()
    assert np.isfinite(np.ravel(scored.cout)).all()
