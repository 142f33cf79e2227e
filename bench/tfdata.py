"""The feed's tf.data pipeline with tf.data's autotuning off (as the feed builds it) and on, side by side, in one
process: a node's share of Parquet files read directly (``ctx.dataset()`` on the direct path), for one and for two
workers' layout, then a small Keras model trained on it.

The files are written once with pyarrow: rows of 784 float32 values taking 255 distinct values (as image pixels
do, and as the rows of ``bench/feed.py``) and a label, row groups of 25,000 rows. The process is held to one core
(``--cores 1``, the default: a one-core executor) or not (``--cores 0``). Rounds alternate between the two
settings; medians are printed.

Printed for each setting: the pass over the share (seconds, and the process's CPU seconds over it), the time
between the last batch and the end of the pass (the pipeline shutting down; nothing is computed then), and the
training steps per second of a 784-128-10 model fitted on the share in batches of 64 (half as many rounds,
at least 2, of 2 epochs each).

    python bench/tfdata.py [--rows 50000] [--rounds 7] [--cores 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_tfos.runtime import Feed
from airflow_tfos.runtime.feed.dataset import FeedShare, make_dataset
from airflow_tfos.runtime.feed.direct import DirectInput, probe_direct
from airflow_tfos.runtime.feed.parquet_reads import Slice

WIDTH = 784
GROUP_ROWS = 25_000


def write_files(folder: str, rows: int) -> list[Slice]:
    """Parquet files of ``rows`` rows, one row group of ``GROUP_ROWS`` each; their slices, whole."""
    slices = []
    for number, start in enumerate(range(0, rows, GROUP_ROWS)):
        ids = np.arange(start, min(start + GROUP_ROWS, rows))
        pixels = (((ids[:, None] * 31 + np.arange(1, WIDTH + 1)) % 255) / 255.0).astype(np.float32)
        offsets = pa.array(np.arange(0, pixels.size + 1, WIDTH, dtype=np.int32))
        table = pa.table(
            {"x": pa.ListArray.from_arrays(offsets, pa.array(pixels.reshape(-1))), "y": pa.array(ids % 10)}
        )
        path = os.path.join(folder, f"part-{number:05d}.parquet")
        pq.write_table(table, path, compression="snappy")
        slices.append(Slice(f"file:{path}", 0, 0, len(ids)))
    return slices


def share_of(slices: list[Slice], feed: Feed, workers: int) -> FeedShare:
    """A node's share of ``slices`` as the direct path hands it over: rows, widths and schema from the barrier
    task's probe of its first row (:func:`~airflow_tfos.runtime.feed.direct.probe_direct`)."""
    direct = DirectInput(splits={"train": (tuple(slices),)}, files=len(slices), reason="bench")
    probed = probe_direct(direct, 0, feed)["train"]
    return FeedShare(
        "train",
        "",
        probed["rows"],
        probed["rows"] // feed.batch_size,
        probed["widths"],
        feed,
        workers=workers,
        streamed=True,
        slices=tuple(slices),
        schema=probed["schema"],
    )


def one_pass(dataset) -> tuple[float, float, float]:
    """(seconds, CPU seconds, seconds after the last batch) of one pass over ``dataset``."""
    started, cpu = time.perf_counter(), time.process_time()
    last = started
    for _ in dataset:
        last = time.perf_counter()
    ended = time.perf_counter()
    return ended - started, time.process_time() - cpu, ended - last


def model():
    import tensorflow as tf

    tf.keras.utils.set_random_seed(1)
    net = tf.keras.Sequential(
        [tf.keras.Input(shape=(WIDTH,)), tf.keras.layers.Dense(128, activation="relu"), tf.keras.layers.Dense(10)]
    )
    net.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return net


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cores", type=int, default=1, help="cores the process is held to (0: all)")
    options = parser.parse_args()
    if options.cores:
        os.sched_setaffinity(0, set(sorted(os.sched_getaffinity(0))[: options.cores]))
    import tensorflow as tf

    folder = tempfile.mkdtemp(prefix="bench-tfdata-")
    try:
        slices = write_files(folder, options.rows)
        feed = Feed(features="x", label="y", batch_size=1024, shuffle=False, cast_floats=None, read="direct")
        tuned = tf.data.Options()
        tuned.autotune.enabled = True
        settings = {"autotuning off (the feed)": None, "autotuning on": tuned}

        def dataset(share, setting):
            built = make_dataset(share)
            return built if setting is None else built.with_options(setting)

        cores = options.cores or "all"
        print(f"{options.rows} rows of {WIDTH} floats + label, cores: {cores}, {options.rounds} rounds")
        for workers in (1, 2):
            share = share_of(slices, feed, workers)
            datasets = {name: dataset(share, setting) for name, setting in settings.items()}
            passes: dict[str, list[tuple[float, float, float]]] = {name: [] for name in settings}
            for name in settings:  # warm-up, not counted
                one_pass(datasets[name])
            for number in range(options.rounds):
                for name in settings if number % 2 == 0 else reversed(list(settings)):
                    passes[name].append(one_pass(datasets[name]))
            for name, runs in passes.items():
                seconds, cpu, after = zip(*runs, strict=True)
                print(
                    f"pass[{workers} worker(s)] {name}: {statistics.median(seconds):.3f} s "
                    f"(CPU {statistics.median(cpu):.3f} s), after the last batch {statistics.median(after):.3f} s "
                    f"median, {statistics.mean(after):.3f} s mean, {max(after):.3f} s at most"
                )
            off, on = (statistics.median(r[0] for r in passes[name]) for name in settings)
            print(f"pass_ratio[{workers} worker(s)] autotuning on/off: {on / off:.2f}")
        share = share_of(slices, replace(feed, batch_size=64, shuffle=True), 1)
        fits = {name: (dataset(share, setting), model()) for name, setting in settings.items()}
        for data, net in fits.values():  # warm-up: traces the step function
            net.fit(data, epochs=1, verbose=0)
        rates: dict[str, list[float]] = {name: [] for name in settings}
        for number in range(max(options.rounds // 2, 2)):
            for name in settings if number % 2 == 0 else reversed(list(settings)):
                data, net = fits[name]
                started = time.perf_counter()
                net.fit(data, epochs=2, verbose=0)
                rates[name].append(2 * share.steps_per_epoch / (time.perf_counter() - started))
        for name, values in rates.items():
            print(f"train_steps_per_s[{name}]: {statistics.median(values):.1f}")
        off, on = (statistics.median(rates[name]) for name in settings)
        print(f"train_steps_ratio autotuning off/on: {off / on:.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
