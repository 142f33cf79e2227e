"""Launch time: from the start of a run until every node is inside main_fun with its strategy built.

Runs the same TFoS-style program (tests/integration/spark/tfos_programs/keras_tf_mode.py, two nodes, chief +
worker, MultiWorkerMirroredStrategy, no training steps) on one local Spark cluster, alternating
between ``tensorflowonspark==2.2.5``'s ``TFCluster.run`` and airflow-tfos's compatibility API (the
same program with only its import changed), and prints each run, the medians and their ratio.

For airflow-tfos it also prints where the slowest node's launch went (from the times the nodes record,
:mod:`airflow_tfos.runtime.program.launch_times`): scheduling (the call until its barrier task began), process start,
TF import, what was left of the barrier's port exchange once TF was imported (the exchange runs beside the
process start and the import; its whole length is shown apart), the handover of the cluster spec, and
building the strategy. The phases follow each other, so they sum to the launch time.

    python bench/launch.py [--repeats 5]

Python worker reuse is off for both: TFoS runs TF inside the reused Python worker and its second
cluster in one SparkContext fails ("Collective ops are already configured").
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, local_cluster_conf

from airflow_tfos.runtime.program import launch_times

PROGRAM = REPO / "tests" / "integration" / "spark" / "tfos_programs" / "keras_tf_mode.py"


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


def time_launch(sc, program, nodes: int) -> tuple[float, dict | None]:
    """Launch once; return the seconds until every node had its strategy, and the slowest node's phases
    (None when its nodes recorded no launch times: TFoS)."""
    mark_dir = Path(tempfile.mkdtemp(prefix="bench-marks-"))
    times_dir = mark_dir / "launch-times"
    times_dir.mkdir()
    os.environ[launch_times.LAUNCH_TIMES_ENV] = str(times_dir)
    args = program.parse_args(["--cluster_size", str(nodes), "--steps", "0", "--mark_dir", str(mark_dir)])
    started = time.time()
    try:
        program.launch(sc, args)
    finally:
        os.environ.pop(launch_times.LAUNCH_TIMES_ENV, None)
    ready = {p.name.removeprefix("ready-"): float(p.read_text()) for p in mark_dir.glob("ready-*")}
    records = launch_times.read_records(str(times_dir))
    shutil.rmtree(mark_dir, ignore_errors=True)
    if len(ready) != nodes:
        raise RuntimeError(f"expected {nodes} ready marks, got {len(ready)}")
    total = max(ready.values()) - started
    if not records:
        return total, None
    slowest = max(records, key=lambda r: ready[f"{r['job_name']}-{r['task_index']}"])
    phases = launch_times.breakdown(started, slowest, ready[f"{slowest['job_name']}-{slowest['task_index']}"])
    phases["(barrier, whole)"] = launch_times.barrier_seconds(slowest)
    return total, phases


def format_phases(phases: dict) -> str:
    return ", ".join(f"{name} {seconds:.2f}" for name, seconds in phases.items())


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
    ours, tfos, breakdowns = [], [], []
    try:
        for i in range(options.repeats):
            tfos.append(time_launch(sc, tfos_program, options.nodes)[0])
            total, phases = time_launch(sc, ours_program, options.nodes)
            ours.append(total)
            breakdowns.append(phases)
            print(f"run {i + 1}: tensorflowonspark {tfos[-1]:.2f} s, airflow-tfos {ours[-1]:.2f} s", flush=True)
            print(f"  airflow-tfos, slowest node (s): {format_phases(phases)}", flush=True)
    finally:
        sc.stop()
    ours_median, tfos_median = statistics.median(ours), statistics.median(tfos)
    medians = {name: statistics.median(b[name] for b in breakdowns) for name in breakdowns[0]}
    print(f"launch_seconds_median tensorflowonspark=2.2.5: {tfos_median:.2f}")
    print(f"launch_seconds_median airflow-tfos: {ours_median:.2f}")
    print(f"launch_ratio tensorflowonspark/airflow-tfos: {tfos_median / ours_median:.2f}")
    print(f"launch_ratio airflow-tfos/tensorflowonspark: {ours_median / tfos_median:.2f}")
    print(f"launch_breakdown_median airflow-tfos (s): {format_phases(medians)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
