"""The former name of :mod:`airflow_tfos.hooks.webhdfs_connection` (HDFS settings from a ``webhdfs`` connection)."""

from airflow_tfos.hooks.webhdfs_connection import (
    DEFAULT_CONN_ID,
    storage_from_connection,
    webhdfs_config_from_connection,
)

__all__ = ["DEFAULT_CONN_ID", "storage_from_connection", "webhdfs_config_from_connection"]
