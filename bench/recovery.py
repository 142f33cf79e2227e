"""Recovery: kill a TF worker mid-training and time how long until training steps resume.

    python bench/recovery.py [--target process|executor|tf-freeze]
    python bench/recovery.py --target host|partition|freeze-executor|freeze-tf|slow   (multi-host, as root)

Runs the checkpointed MWMS training of tests/integration/spark/driver_script.py (2 workers, 60 steps, a
checkpoint every 5) as its own Spark driver on a local cluster, kills worker 0's TF process (or its whole
executor JVM) at step 22 or later, and prints the seconds from the kill until the new TF cluster's first
step, the steps trained again, and the final step.

``--target tf-freeze`` freezes worker 0's TF process with SIGSTOP instead, in the ``stall`` scenario (stall
watchdog of 4 s; one checkpoint save of 6 s before the freeze), and also prints when the watchdog fired.
Target: training resumes within 60 s of the freeze, at most one checkpoint interval redone.

The multi-host targets build the network-namespace cluster of ``airflow_tfos.testing.multihost`` (driver
host, namenode, datanode and ResourceManager hosts, four Spark worker hosts), train 3 nodes fed from Spark
with the run directory on the emulated HDFS (checkpoint every 10 steps, ``stall_timeout=30``,
``spark.network.timeout=30s``), and disturb the chief's host past step 25: ``host`` kills every process
there, ``partition`` cuts its link for 60 s, ``freeze-executor`` / ``freeze-tf`` stop its executor JVM / TF
process with SIGSTOP, ``slow`` delays its packets by 40 ms (``tc netem``; where the kernel has no netem, it
gives every process of the host a quarter of its time instead). Prints the seconds from the
fault to the watchdog and to the new TF cluster's first step, the steps trained again, the final step,
and what the disturbed host still ran or wrote afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO

sys.path.insert(0, str(REPO))
from airflow_tfos.shared.rundir import RunDir
from tests.integration.spark.test_driver_process import start_driver
from tests.integration.spark.test_recovery import wait_for_progress

MULTIHOST = ("host", "partition", "freeze-executor", "freeze-tf", "slow")


def multihost(target: str) -> int:
    from airflow_tfos.testing.multihost import MultiHostLab
    from tests.conftest import write_linear_parquet
    from tests.multihost.drills import EVERY, SLOW_MS, STARVED_SHARE, run_drill
    from tests.multihost.user_code import write_user_code

    work = Path(tempfile.mkdtemp(prefix="bench-multihost-"))
    data = write_linear_parquet(work / "data", seed=5)
    with MultiHostLab(log_dir=str(work)) as lab:
        print(lab.describe(), flush=True)
        seen = run_drill(lab, write_user_code(work / "user-code"), data, target)
    name = f"recovery[{target}]"
    result = seen["result"]
    print(f"{name} disturbed host: {seen['host']} (the chief's), at step {seen['step_at_fault']}")
    if seen["stall_secs"] is not None:
        print(f"{name} seconds from the fault to the stall watchdog: {seen['stall_secs']:.1f}")
    if seen["resumed_secs"] is not None:
        print(f"{name} seconds from the fault to the first step of the new TF cluster: {seen['resumed_secs']:.1f}")
        print(
            f"{name} steps trained again: {seen['redone']} "
            f"(the old TF cluster reached step {seen['last_step_before']}, "
            f"restored step {seen['restored']}, checkpoint every {EVERY})"
        )
    if seen["slowed"]:
        how = f"packets delayed {SLOW_MS} ms"
        if seen["slowed"] == "cpu":
            how = f"a CPU share of {STARVED_SHARE} for every process of the host (no tc netem in this kernel)"
        print(f"{name} slowed by: {how}")
    print(f"{name} seconds from the fault to the end of training: {seen['run_secs']:.1f}")
    if seen["resumed_secs"] is None and target != "slow":
        print(
            f"{name} no new TF cluster trained: the old one reached step {seen['last_step_before']} "
            f"before its attempt ended (the final step was restored, not trained again)"
        )
    loss = "none (no step trained in the last attempt)" if result["loss"] is None else f"{result['loss']:.4f}"
    print(f"{name} final step: {result['step']}, attempt {result['attempt']}, loss {loss}")
    print(f"{name} attempts started: {seen['attempts']}")
    print(f"{name} checkpoints published after the fault (step, attempt): {seen['checkpoints_after_fault']}")
    for line in sorted(seen["timeline"]):
        print(f"{name} event at fault{line[0]:+.1f} s: {line[1]} attempt {line[2]} step {line[3]} {line[4]}".rstrip())
    print(f"{name} node processes left on {seen['host']} afterwards: {seen['left_on_host'] or 'none'}")
    if target == "partition":
        back = seen["mended_secs"]
        print(
            f"{name} host cut off for {seen['partition_secs']:.0f} s, "
            + (f"back at fault{back:+.1f} s" if back is not None else "back only after the run ended")
            + f"; its executor declared lost before: {'yes' if seen['executor_lost_before_mend'] else 'no'}"
        )
        published = [w for w in seen["writes_from_host_after_fault"] if "/checkpoints/" in w[1] or "/export" in w[1]]
        print(f"{name} checkpoint or export writes from {seen['host']} after the cut: {published or 'none'}")
    print(f"{name} logs: {work}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=["process", "executor", "tf-freeze", *MULTIHOST], default="process")
    options = parser.parse_args()
    if options.target in MULTIHOST:
        return multihost(options.target)
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    run_dir = Path(tempfile.mkdtemp(prefix="bench-recovery-"))
    driver = start_driver("stall" if options.target == "tf-freeze" else "recover", run_dir)
    try:
        record = wait_for_progress(run_dir, "worker-0", min_step=22)
        killed_at = time.time()
        if options.target == "process":
            os.kill(record["pid"], signal.SIGKILL)
        elif options.target == "tf-freeze":
            os.kill(record["pid"], signal.SIGSTOP)
        else:
            from tests.integration.spark.test_recovery import executor_jvm_of

            executor_jvm_of(record["pid"]).kill()
        step_at_kill = json.loads((run_dir / "progress-worker-0.json").read_text())["step"]
        resumed_at = None
        while driver.poll() is None and resumed_at is None:
            for path in run_dir.glob("progress-*.json"):
                try:
                    progress = json.loads(path.read_text())
                except ValueError:
                    continue
                if progress["attempt"] >= 1:
                    resumed_at = progress["time"]
            time.sleep(0.05)
        out, err = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
        if options.target == "tf-freeze":
            try:
                os.kill(record["pid"], signal.SIGKILL)  # when the run did not end it
            except ProcessLookupError:
                pass
    if driver.returncode != 0:
        print(err[-3000:])
        return 1
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    rundir = RunDir(str(run_dir))
    restored = rundir.events("restore")[0]["step"]
    for stall in rundir.events("stall"):
        named = ", ".join(f"{n['node']} at step {n['step']}" for n in stall["nodes"])
        secs = stall["time"] - killed_at
        print(f"recovery[{options.target}] seconds from freeze to the stall watchdog: {secs:.1f} ({named})")
    print(
        f"recovery[{options.target}] seconds from kill to the first step of the new TF cluster: "
        f"{resumed_at - killed_at:.1f}"
    )
    print(
        f"recovery[{options.target}] steps trained again: {step_at_kill - restored} "
        f"(killed at step {step_at_kill}, restored step {restored}, checkpoint every 5 steps)"
    )
    print(f"recovery[{options.target}] final step: {result['step']} of 60 planned, attempt {result['attempt']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
