"""A tiny PySpark application for the lab's YARN: one executor's Python worker sums a range, then the driver
sleeps for the seconds given (0: none), so that a test can find it running."""

from __future__ import annotations

import sys
import time

from pyspark.sql import SparkSession

if __name__ == "__main__":
    spark = SparkSession.builder.appName("hadoop-lab-app").getOrCreate()
    assert spark.sparkContext.parallelize(range(1000), 2).sum() == 499500
    time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 0)
    spark.stop()
