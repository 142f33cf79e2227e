"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def _version() -> str:
    try:
        return version("airflow-tfos")
    except PackageNotFoundError:
        return "0.0.0"


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-tfos",
        "name": "TensorFlow on Spark (airflow-tfos)",
        "description": "Distributed TensorFlow training inside Spark clusters, run nightly from Airflow.",
        "versions": [_version()],
        "integrations": [
            {
                "integration-name": "TensorFlow on Spark",
                "external-doc-url": "https://pypi.org/project/airflow-tfos/",
                "tags": ["software"],
            }
        ],
        # Hooks, operators, sensors, triggers, connection types and extra links are listed here as
        # they are added.
    }
