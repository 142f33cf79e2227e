"""The Spark job of the example DAGs' ``prepare_data`` task: each day's digits data, what they train and score on.

It needs pyspark, NumPy and scikit-learn, not airflow-tfos: ``SparkSubmitOperator`` ships only this file, so on
YARN it runs with the cluster's (or a packed) Python environment as it is.

scikit-learn's 8x8 digits stand in for data that arrives every day. The held-out test split is the
same every day, so the accuracies of different days' models compare; the training data of a day is
a different sample of the training split, with a little pixel noise, so each day's model differs.

    spark-submit prepare_digits.py --day 2026-11-21 --out hdfs:///data/digits/2026-11-21

writes, overwriting (a rerun of a day writes the same data again)::

    <out>/train/   Parquet: pixels array<float> (64 values in [0, 1]), label int
    <out>/test/    Parquet: the held-out split, same columns
    <out>/score/   Parquet: id long, pixels: what the day's batch inference scores
    <out>/train_csv/, <out>/test_csv/  (with --csv) CSV without header: label, then 64 pixels
"""

from __future__ import annotations

import argparse
import logging
import sys
import zlib

log = logging.getLogger(__name__)

#: The split and seed of the training examples (DigitsArgs' defaults in airflow_tfos.runtime.examples.digits), so
#: every day's test split is the same.
TEST_FRACTION, SEED = 0.2, 42


def day_arrays(day: str, *, fraction: float = 0.6, noise: float = 0.05):
    """Return ``(x_train, y_train, x_test, y_test)`` of ``day``: a day's sample of the training split."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x_all, y_all = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        x_all, y_all, test_size=TEST_FRACTION, random_state=SEED, stratify=y_all
    )
    rng = np.random.default_rng(zlib.crc32(day.encode()))
    pick = rng.permutation(len(x_train))[: int(len(x_train) * fraction)]
    x_day = np.clip(x_train[pick] + rng.normal(0.0, noise, size=x_train[pick].shape), 0.0, 1.0).astype(np.float32)
    return x_day, y_train[pick], x_test, y_test


def write_day(spark, day: str, out: str, *, fraction: float = 0.6, noise: float = 0.05, csv: bool = False) -> dict:
    """Write ``day``'s train/test/score data under ``out`` with Spark; return the row counts."""
    from pyspark.sql.types import ArrayType, FloatType, IntegerType, LongType, StructField, StructType

    x_train, y_train, x_test, y_test = day_arrays(day, fraction=fraction, noise=noise)
    labelled = StructType([StructField("pixels", ArrayType(FloatType()), False), StructField("label", IntegerType())])
    scored = StructType([StructField("id", LongType(), False), StructField("pixels", ArrayType(FloatType()), False)])
    out = out.rstrip("/")
    counts = {}
    for name, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        rows = [(row.tolist(), int(label)) for row, label in zip(x, y, strict=True)]
        frame = spark.createDataFrame(rows, labelled).repartition(2)
        frame.write.mode("overwrite").parquet(f"{out}/{name}")
        counts[name] = len(rows)
        if csv:
            flat = spark.createDataFrame([(int(label), *row.tolist()) for row, label in zip(x, y, strict=True)])
            flat.repartition(4).write.mode("overwrite").csv(f"{out}/{name}_csv")
    score = spark.createDataFrame([(i, row.tolist()) for i, row in enumerate(x_test)], scored).repartition(2)
    score.write.mode("overwrite").parquet(f"{out}/score")
    counts["score"] = len(x_test)
    log.info("wrote the digits of %s to %s: %s", day, out, counts)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write one day's digits data with Spark.")
    parser.add_argument("--day", required=True, help="the day (e.g. the DAG run's {{ ds }})")
    parser.add_argument("--out", required=True, help="where the day's data goes (path or URI)")
    parser.add_argument("--fraction", type=float, default=0.6, help="share of the training split in a day")
    parser.add_argument("--noise", type=float, default=0.05, help="standard deviation of the pixel noise")
    parser.add_argument("--csv", action="store_true", help="also write CSV copies (for InputMode.TENSORFLOW)")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"prepare digits {options.day}").getOrCreate()
    try:
        write_day(spark, options.day, options.out, fraction=options.fraction, noise=options.noise, csv=options.csv)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
