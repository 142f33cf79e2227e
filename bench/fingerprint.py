"""Fingerprint time: the listing of a 1,000-file input over WebHDFS, as a rerun computes it before it decides.

Starts the WebHDFS emulator (airflow_tfos/testing/webhdfs.py) on 127.0.0.1, writes ``--files`` small files
into one directory (``--partitions`` > 1 spreads them over ``day=N/`` folders, one LISTSTATUS each), and
times :func:`airflow_tfos.shared.fingerprint.files_fingerprint` through ``WebHDFSStorage``: one uncounted
warm-up, then ``--repeats`` runs; prints each and the median.

    python bench/fingerprint.py [--files 1000] [--partitions 1] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_tfos.shared.fingerprint import files_fingerprint
from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
from airflow_tfos.testing.webhdfs import WebHDFSEmulator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    with WebHDFSEmulator() as emulator:
        root = Path(emulator.local_path("/data"))
        for i in range(options.files):
            folder = root / f"day={i % options.partitions}" if options.partitions > 1 else root
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"part-{i:05d}.parquet").write_bytes(b"p" * (100 + i % 13))
        storage = WebHDFSStorage(emulator.config())
        uri = emulator.uri("/data")
        found = files_fingerprint(uri, storage)  # warm-up: connections, the emulator's first answers
        assert found["count"] == options.files, found["count"]
        times = []
        for run in range(options.repeats):
            started = time.perf_counter()
            files_fingerprint(uri, storage)
            times.append(time.perf_counter() - started)
            print(f"run {run + 1}: {times[-1]:.3f} s")
        print(
            f"fingerprint of {options.files} files in {options.partitions} folder(s) on the WebHDFS emulator: "
            f"median {statistics.median(times):.3f} s over {options.repeats} runs (hash {found['hash']})"
        )


if __name__ == "__main__":
    main()
