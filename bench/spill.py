"""The Spark path's local spill, without Spark: rows of 784 float64 features + a label written the way a
barrier task spills them (checks, then the Arrow file), then replayed as one epoch of NumPy batches the way
the node reads them, with the features stored as float32 (``Feed(cast_floats="float32")``, the default:
cast once, at the spill) against float64 (the feed before that: cast at every read), side by side.

Arrow batches of 10,000 rows come from memory, as Spark's Arrow stream would hand them over; what is timed is
what this project does with them. Alternating rounds; medians printed.

    python bench/spill.py [--rows 50000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_tfos.runtime import Feed
from airflow_tfos.runtime.feed.dataset import FeedShare, iter_epoch
from airflow_tfos.runtime.feed.spill import SpillWriter

WIDTH = 784
SPARK_BATCH = 10_000  # rows per Arrow batch (spark.sql.execution.arrow.maxRecordsPerBatch)


def batches(rows: int) -> list[pa.RecordBatch]:
    rng = np.random.default_rng(0)
    out = []
    for start in range(0, rows, SPARK_BATCH):
        n = min(SPARK_BATCH, rows - start)
        values = pa.array(rng.random(n * WIDTH))
        x = pa.ListArray.from_arrays(pa.array(np.arange(0, n * WIDTH + 1, WIDTH, dtype=np.int32)), values)
        out.append(pa.record_batch([x, pa.array(rng.random(n))], ["x", "y"]))
    return out


def one_round(data: list[pa.RecordBatch], rows: int, stored_as: str | None, folder: str) -> dict[str, float]:
    """Spill ``data`` with floats stored as ``stored_as`` (None: as Spark sent them), then read one epoch."""
    feed = Feed("x", label="y", batch_size=256, shuffle=True, cast_floats=stored_as)
    path = os.path.join(folder, f"spill-{stored_as}")
    started = time.perf_counter()
    writer = SpillWriter(path, feed.columns, feed=feed)
    for batch in data:
        writer.write(batch)
    stats = writer.close()
    spilled = time.perf_counter() - started
    # The node's read; with features spilled as float64 the read casts them (cast_floats="float32" again).
    read_feed = Feed("x", label="y", batch_size=256, shuffle=True, cast_floats="float32")
    share = FeedShare("train", path, rows, steps_per_epoch=rows // 256, widths=stats.widths, feed=read_feed)
    started = time.perf_counter()
    seen = 0
    for x, _ in iter_epoch(share, epoch=1):
        assert x.dtype == np.float32
        seen += len(x)
    read = time.perf_counter() - started
    assert seen == (rows // 256) * 256
    size = os.path.getsize(path)
    os.unlink(path)
    return {"spill_s": spilled, "epoch_s": read, "mib": size / 2**20}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    data = batches(options.rows)
    folder = tempfile.mkdtemp(prefix="bench-spill-")
    kinds = {"float32 (cast at the spill)": "float32", "float64 (cast at every read)": None}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in kinds}
    try:
        for stored in kinds.values():  # warm-up, not counted
            one_round(data, options.rows, stored, folder)
        for round_ in range(options.rounds):
            order = list(kinds.items()) if round_ % 2 == 0 else list(kinds.items())[::-1]
            for name, stored in order:
                results[name].append(one_round(data, options.rows, stored, folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{options.rows:,} rows of {WIDTH} float64 + a label, {options.rounds} alternating rounds, medians:")
    medians = {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in results.items()}
    for name, m in medians.items():
        print(
            f"  {name:<30} spill {m['spill_s']:.3f} s ({options.rows / m['spill_s']:,.0f} rows/s), "
            f"file {m['mib']:.0f} MiB, one later epoch {m['epoch_s']:.3f} s ({options.rows / m['epoch_s']:,.0f} rows/s)"
        )
    new, old = medians["float32 (cast at the spill)"], medians["float64 (cast at every read)"]
    print(f"spill_ratio float32/float64 (time): {new['spill_s'] / old['spill_s']:.2f}")
    print(f"epoch_ratio float32/float64 (time): {new['epoch_s'] / old['epoch_s']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
