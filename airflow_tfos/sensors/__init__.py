"""Sensors: YARN application state and run-directory checkpoints."""

from airflow_tfos.sensors.tfos import TFoSCheckpointSensor, YarnApplicationSensor

__all__ = ["TFoSCheckpointSensor", "YarnApplicationSensor"]
