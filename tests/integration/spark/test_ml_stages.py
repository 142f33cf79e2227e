"""The native Spark ML stages on the local cluster: TFoSEstimator / TFoSModel in a Pipeline after feature
transformers, fitted on real TF, saved, loaded and used to transform."""

from __future__ import annotations

import time

import numpy as np
import pytest

from airflow_tfos.runtime.driver.ml import TFoSEstimator, TFoSModel
from airflow_tfos.shared.errors import FeedConfigError
from tests.integration.spark import ml_programs

pytestmark = pytest.mark.integration

COLORS = {"red": 0, "green": 1, "blue": 2}  # most frequent first: StringIndexer's order
WIDTH = 8


def mixed_rows(rows: int, seed: int):
    """Rows of a sparse vector ``sv`` (size 8: ``a`` at 0, a 1.0 at a random other index), a string ``color``,
    a weight ``w`` and a label: 1 when ``2 a - rank(color) > 0.5``."""
    from pyspark.ml.linalg import SparseVector

    rng = np.random.default_rng(seed)
    a = rng.random(rows)
    colors = rng.choice(list(COLORS), size=rows, p=[0.5, 0.3, 0.2])
    other = rng.integers(1, WIDTH, size=rows)
    labels = (2 * a - np.array([COLORS[c] for c in colors]) > 0.5).astype(float)
    return [
        (
            i,
            SparseVector(WIDTH, {0: float(a[i]), int(other[i]): 1.0}),
            str(colors[i]),
            2.0 if colors[i] == "blue" else 1.0,
            float(labels[i]),
        )
        for i in range(rows)
    ]


def pipeline(export_dir: str, **estimator_params):
    from pyspark.ml import Pipeline
    from pyspark.ml.feature import StringIndexer, VectorAssembler

    estimator = TFoSEstimator(
        mainFun=ml_programs.train_classifier,
        exportDir=export_dir,
        featuresCol="features",
        labelCol="label",
        weightCol="w",
        numNodes=2,
        epochs=10,
        batchSize=32,
        tfArgs={"width": WIDTH + 1, "classes": 2},
        **estimator_params,
    )
    return Pipeline(
        stages=[
            StringIndexer(inputCol="color", outputCol="color_index"),
            VectorAssembler(inputCols=["sv", "color_index"], outputCol="features"),
            estimator,
        ]
    )


@pytest.fixture(scope="module")
def mixed(spark):
    frame = spark.createDataFrame(mixed_rows(600, seed=3), ["id", "sv", "color", "w", "label"]).repartition(3)
    return frame.cache()


@pytest.fixture(scope="module")
def fitted(mixed, tmp_path_factory):
    export_dir = str(tmp_path_factory.mktemp("ml") / "export")
    return pipeline(export_dir).fit(mixed), export_dir


def accuracy(scored) -> float:
    rows = scored.select("label", "prediction").collect()
    predicted = np.argmax(np.array([r.prediction for r in rows]), axis=1)
    return float(np.mean(predicted == np.array([r.label for r in rows])))


def test_pipeline_of_indexer_assembler_and_estimator_trains_on_sparse_string_and_weight(mixed, fitted):
    model, export_dir = fitted
    indexer, assembler, tf_model = model.stages
    assert indexer.labels == list(COLORS)  # the rank the labels were made with
    assert isinstance(tf_model, TFoSModel) and tf_model.getExportDir() == export_dir
    features = assembler.transform(indexer.transform(mixed)).select("features").collect()
    assert any(type(r.features).__name__ == "SparseVector" for r in features)  # sparse rows were fed
    scored = model.transform(mixed)
    assert scored.count() == mixed.count() == 600
    assert set(scored.columns) >= {"id", "sv", "color", "w", "label", "features", "prediction"}
    assert accuracy(scored) >= 0.85


def test_fitted_pipeline_saves_and_loads_and_predicts_the_same(mixed, fitted, tmp_path):
    from pyspark.ml import PipelineModel

    model, export_dir = fitted
    model.write().overwrite().save(str(tmp_path / "pipeline"))
    loaded = PipelineModel.load(str(tmp_path / "pipeline"))
    assert isinstance(loaded.stages[-1], TFoSModel) and loaded.stages[-1].getExportDir() == export_dir
    before = {r.id: r.prediction for r in model.transform(mixed).select("id", "prediction").collect()}
    after = {r.id: r.prediction for r in loaded.transform(mixed).select("id", "prediction").collect()}
    assert before.keys() == after.keys() and all(np.allclose(before[k], after[k]) for k in before)


def test_unfitted_pipeline_saves_the_training_function_by_reference(spark, tmp_path):
    from pyspark.ml import Pipeline

    pipeline(str(tmp_path / "export")).save(str(tmp_path / "unfitted"))
    estimator = Pipeline.load(str(tmp_path / "unfitted")).getStages()[-1]
    assert estimator.getOrDefault("mainFun") == "tests.integration.spark.ml_programs:train_classifier"
    assert estimator._train_function() is ml_programs.train_classifier
    assert estimator.getOrDefault("tfArgs") == {"width": WIDTH + 1, "classes": 2}


def test_a_lambda_trains_but_cannot_be_saved(tmp_path):
    estimator = TFoSEstimator(mainFun=lambda args, ctx: None, exportDir=str(tmp_path))
    with pytest.raises(ValueError, match="mainFun='module:function'"):
        estimator.save(str(tmp_path / "stage"))


def test_a_bad_reference_names_itself():
    with pytest.raises(ValueError, match="'tests.integration.spark.ml_programs:nope' cannot be imported"):
        TFoSEstimator(mainFun="tests.integration.spark.ml_programs:nope")._train_function()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"featuresCol": "pixels"}, "column 'pixels' is not in the training DataFrame .* fix setFeaturesCol"),
        ({"labelCol": "y"}, "column 'y' is not in the training DataFrame .* fix setLabelCol"),
        ({"weightCol": "color"}, "weight column 'color' has type string"),
    ],
)
def test_a_missing_column_fails_before_any_tf_process(mixed, tmp_path, params, message):
    estimator = TFoSEstimator(mainFun=ml_programs.train_classifier, exportDir=str(tmp_path), **params)
    frame = mixed.withColumnRenamed("sv", "features")
    started = time.monotonic()
    with pytest.raises(FeedConfigError, match=message):
        estimator.fit(frame)
    assert time.monotonic() - started < 5


def test_transform_without_the_feature_column_names_it(mixed, fitted):
    _, export_dir = fitted
    with pytest.raises(FeedConfigError, match="column 'features' is not in the DataFrame to transform"):
        TFoSModel(exportDir=export_dir).transform(mixed)


def test_a_model_dir_that_does_not_exist_is_named(mixed, tmp_path):
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(FileNotFoundError, match=f"SavedModel directory {missing} does not exist: fix setExportDir"):
        TFoSModel(exportDir=missing, featuresCol="sv").transform(mixed)
    with pytest.raises(FileNotFoundError, match=f"{tmp_path} holds no SavedModel"):
        TFoSModel(exportDir=str(tmp_path), featuresCol="sv").transform(mixed)


def test_a_program_that_exports_nothing_fails_naming_the_export_dir(mixed, tmp_path):
    export_dir = str(tmp_path / "export")
    estimator = TFoSEstimator(
        mainFun=ml_programs.export_nothing, exportDir=export_dir, featuresCol="sv", numNodes=1, batchSize=64
    )
    with pytest.raises(FileNotFoundError, match=f"wrote no SavedModel to {export_dir}"):
        estimator.fit(mixed)
