"""``python -m airflow_tfos.runtime.driver --run-dir URI``: the Spark driver's entry point."""

import sys

from airflow_tfos.runtime.driver.entry import main

sys.exit(main())
