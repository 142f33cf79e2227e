"""Operators: training as one task, or as launch / feed / shutdown tasks; batch inference."""

from airflow_tfos.operators.inference import TFoSInferenceOperator
from airflow_tfos.operators.lifecycle import TFoSFeedOperator, TFoSShutdownClusterOperator
from airflow_tfos.operators.train import TFoSLaunchClusterOperator, TFoSTrainOperator

__all__ = [
    "TFoSFeedOperator",
    "TFoSInferenceOperator",
    "TFoSLaunchClusterOperator",
    "TFoSShutdownClusterOperator",
    "TFoSTrainOperator",
]
