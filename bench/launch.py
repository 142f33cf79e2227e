"""Launch time: from the start of a run until every node is inside main_fun with its strategy built.

Runs the same TFoS-style program (tests/runtime/tfos_programs/keras_tf_mode.py, two nodes, chief +
worker, MultiWorkerMirroredStrategy, no training steps) on one local Spark cluster, alternating
between ``tensorflowonspark==2.2.5``'s ``TFCluster.run`` and airflow-tfos's compatibility API (the
same program with only its import changed), and prints each run, the medians and their ratio.

    python bench/launch.py [--repeats 5]

Python worker reuse is off for both: TFoS runs TF inside the reused Python worker and its second
cluster in one SparkContext fails ("Collective ops are already configured").
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, local_cluster_conf

PROGRAM = REPO / "tests" / "runtime" / "tfos_programs" / "keras_tf_mode.py"


def load_program(name: str, migrate: bool):
    text = PROGRAM.read_text()
    if migrate:
        text = text.replace("from tensorflowonspark import", "from airflow_tfos.runtime.compat import")
    path = Path(tempfile.mkdtemp(prefix="bench-launch-")) / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return module


def time_launch(sc, program, nodes: int) -> float:
    mark_dir = Path(tempfile.mkdtemp(prefix="bench-marks-"))
    args = program.parse_args(["--cluster_size", str(nodes), "--steps", "0", "--mark_dir", str(mark_dir)])
    started = time.time()
    program.launch(sc, args)
    marks = [float(p.read_text()) for p in mark_dir.glob("ready-*")]
    shutil.rmtree(mark_dir, ignore_errors=True)
    if len(marks) != nodes:
        raise RuntimeError(f"expected {nodes} ready marks, got {len(marks)}")
    return max(marks) - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=2)
    options = parser.parse_args()

    conf = local_cluster_conf("bench-launch", options.nodes, 1024, "768m").set("spark.python.worker.reuse", "false")
    from pyspark import SparkContext

    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    sc.parallelize(range(options.nodes), options.nodes).count()  # executors up before timing
    ours_program = load_program("bench_launch_ours", migrate=True)
    tfos_program = load_program("bench_launch_tfos", migrate=False)
    ours, tfos = [], []
    try:
        for i in range(options.repeats):
            tfos.append(time_launch(sc, tfos_program, options.nodes))
            ours.append(time_launch(sc, ours_program, options.nodes))
            print(f"run {i + 1}: tensorflowonspark {tfos[-1]:.2f} s, airflow-tfos {ours[-1]:.2f} s", flush=True)
    finally:
        sc.stop()
    ours_median, tfos_median = statistics.median(ours), statistics.median(tfos)
    print(f"launch_seconds_median tensorflowonspark=2.2.5: {tfos_median:.2f}")
    print(f"launch_seconds_median airflow-tfos: {ours_median:.2f}")
    print(f"launch_ratio tensorflowonspark/airflow-tfos: {tfos_median / ours_median:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
