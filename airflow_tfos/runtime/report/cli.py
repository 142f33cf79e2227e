"""``python -m airflow_tfos.runtime.report --run-dir URI``: (re)build a run directory's training report."""

from __future__ import annotations

import argparse
import logging
import sys

from airflow_tfos.runtime.report import ReportError, write_report
from airflow_tfos.shared.errors import RunDirError
from airflow_tfos.shared.storage.webhdfs_config import add_config_option, use_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_tfos.runtime.report", description="(Re)build a run directory's training report."
    )
    parser.add_argument("--run-dir", required=True, help="the run directory (path or URI)")
    add_config_option(parser)
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if options.webhdfs_config:
            use_config(options.webhdfs_config)
        path = write_report(options.run_dir)
    except (ReportError, RunDirError, ValueError, OSError) as exc:
        sys.stderr.write(f"airflow-tfos report: {exc}\n")
        return 1
    sys.stdout.write(f"{path}\n")
    return 0
