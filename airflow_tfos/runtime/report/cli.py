"""``python -m airflow_tfos.runtime.report --run-dir URI``: (re)build a run directory's training report."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from airflow_tfos.runtime.report import ReportError, write_report
from airflow_tfos.shared.rundir import RunDirError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_tfos.runtime.report", description="(Re)build a run directory's training report."
    )
    parser.add_argument("--run-dir", required=True, help="the run directory (path or URI)")
    parser.add_argument(
        "--webhdfs-config",
        metavar="JSON",
        help="HDFS settings (a WebHDFSConfig JSON) for hdfs:// paths; default: $AIRFLOW_TFOS_WEBHDFS",
    )
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if options.webhdfs_config:
            from airflow_tfos.shared.storage.webhdfs_config import ENV_VAR, WebHDFSConfig

            os.environ[ENV_VAR] = WebHDFSConfig.from_json(options.webhdfs_config).to_json()
        path = write_report(options.run_dir)
    except (ReportError, RunDirError, ValueError, OSError) as exc:
        sys.stderr.write(f"airflow-tfos report: {exc}\n")
        return 1
    sys.stdout.write(f"{path}\n")
    return 0
