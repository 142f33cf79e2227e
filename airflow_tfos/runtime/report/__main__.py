"""``python -m airflow_tfos.runtime.report``."""

import sys

from airflow_tfos.runtime.report.cli import main

sys.exit(main())
