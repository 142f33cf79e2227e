"""Former path of the Spark ML stages, which earlier docs showed: import them from :mod:`airflow_tfos.runtime`
(``from airflow_tfos.runtime import TFoSEstimator, TFoSModel``)."""

from airflow_tfos.runtime.driver.ml import TFoSEstimator, TFoSModel

__all__ = ["TFoSEstimator", "TFoSModel"]
