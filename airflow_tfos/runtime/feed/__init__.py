"""Feeding data to TF nodes: InputMode.SPARK (Arrow from DataFrames) and InputMode.TENSORFLOW (files)."""

from airflow_tfos.shared.feed import Feed

__all__ = ["Feed"]
