"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from airflow_tfos import __version__
from airflow_tfos.hooks.yarn_rest import YARN_CONNECTION_TYPE


def get_provider_info() -> dict:
    return {
        "package-name": "airflow-tfos",
        "name": "TensorFlow on Spark (airflow-tfos)",
        "description": "Distributed TensorFlow training inside Spark clusters, run nightly from Airflow.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "TensorFlow on Spark",
                "external-doc-url": "https://github.com/airflow-tfos/airflow-tfos/tree/main/docs",
                "tags": ["software"],
            }
        ],
        "operators": [
            {
                "integration-name": "TensorFlow on Spark",
                "python-modules": [
                    "airflow_tfos.operators.train",
                    "airflow_tfos.operators.lifecycle",
                    "airflow_tfos.operators.inference",
                    "airflow_tfos.operators.publish",
                ],
            }
        ],
        "sensors": [{"integration-name": "TensorFlow on Spark", "python-modules": ["airflow_tfos.sensors.tfos"]}],
        "hooks": [
            {
                "integration-name": "TensorFlow on Spark",
                "python-modules": [
                    "airflow_tfos.hooks.tfos",
                    "airflow_tfos.hooks.yarn",
                    "airflow_tfos.hooks.backends.local_tracker",
                    "airflow_tfos.hooks.run_dir",
                    "airflow_tfos.hooks.webhdfs_connection",
                    "airflow_tfos.hooks.registry",
                ],
            }
        ],
        "triggers": [{"integration-name": "TensorFlow on Spark", "python-modules": ["airflow_tfos.triggers.tfos"]}],
        # The spark and webhdfs connection types come from the Spark and HDFS providers.
        "connection-types": [YARN_CONNECTION_TYPE],
        "extra-links": [
            "airflow_tfos.links.tfos.SparkApplicationLink",
            "airflow_tfos.links.tfos.TensorBoardLink",
            "airflow_tfos.links.tfos.TrainingReportLink",
        ],
        # The api-server app behind the Training report link (also the airflow.plugins entry point).
        "plugins": [{"name": "airflow_tfos_reports", "plugin-class": "airflow_tfos.plugins.reports.TFoSReportsPlugin"}],
        "config": {
            "tfos": {
                "description": "airflow-tfos settings.",
                "options": {
                    "run_dir_base": {
                        "description": "Where default run directories go (a path or URI); templated "
                        "run_dir values must render to a folder under it unless the operator has "
                        "allow_run_dir_outside_base=True. Default $AIRFLOW_HOME/tfos-runs.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "hdfs://nameservice1/user/airflow/tfos-runs",
                        "default": None,
                    },
                    "local_paths_shared": {
                        "description": "Whether every host of the Spark cluster mounts local paths at the same "
                        "place (NFS): with a YARN master, operators refuse a local run directory, warm start, "
                        "log directory, model or output unless this (or the operator's local_paths_shared) is "
                        "True, since the containers run on other hosts.",
                        "version_added": "0.2.0",
                        "type": "boolean",
                        "example": None,
                        "default": "False",
                    },
                    "serve_reports": {
                        "description": "Serve training reports (report.html and its PNG plots) from the "
                        "api-server under tfos/reports/, the target of the Training report extra link; "
                        "signed-in users only. False turns it off.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": None,
                        "default": "True",
                    },
                },
            }
        },
    }
