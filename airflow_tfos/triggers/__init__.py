"""Triggers (run in the triggerer while a deferrable task waits)."""

from airflow_tfos.triggers.tfos import TFoSApplicationTrigger, TFoSRunDirTrigger

__all__ = ["TFoSApplicationTrigger", "TFoSRunDirTrigger"]
