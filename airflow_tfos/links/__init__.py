"""Extra links shown on TFoS tasks in the Airflow UI."""

from airflow_tfos.links.tfos import SparkApplicationLink, TensorBoardLink, TrainingReportLink

__all__ = ["SparkApplicationLink", "TensorBoardLink", "TrainingReportLink"]
