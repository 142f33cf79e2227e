"""Operators: training as one task, or as launch / feed / shutdown tasks; publishing; batch inference."""

from airflow_tfos.operators.inference import TFoSInferenceOperator
from airflow_tfos.operators.lifecycle import TFoSFeedOperator, TFoSShutdownClusterOperator
from airflow_tfos.operators.publish import TFoSPublishModelOperator
from airflow_tfos.operators.train import TFoSLaunchClusterOperator, TFoSTrainOperator
from airflow_tfos.operators.warm_start import ModelInService

__all__ = [
    "ModelInService",
    "TFoSFeedOperator",
    "TFoSInferenceOperator",
    "TFoSLaunchClusterOperator",
    "TFoSPublishModelOperator",
    "TFoSShutdownClusterOperator",
    "TFoSTrainOperator",
]
