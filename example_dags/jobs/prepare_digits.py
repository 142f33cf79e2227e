"""The Spark job of the example DAGs' ``prepare_data`` task: write one day's digits data.

Run by ``SparkSubmitOperator``; the work is in :mod:`airflow_tfos.runtime.examples.digits_data`.
"""

import sys

from airflow_tfos.runtime.examples.digits_data import main

if __name__ == "__main__":
    sys.exit(main())
