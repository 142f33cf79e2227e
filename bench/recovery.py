"""Recovery: kill a TF worker mid-training and time how long until training steps resume.

    python bench/recovery.py [--target process|executor|tf-freeze]

Runs the checkpointed MWMS training of tests/runtime (2 workers, 60 steps, a checkpoint every 5) as
its own Spark driver on a local cluster, kills worker 0's TF process (or its whole executor JVM) at
step 22 or later, and prints the seconds from the kill until the new TF cluster's first step, the
steps trained again, and the final step.

``--target tf-freeze`` freezes worker 0's TF process with SIGSTOP instead, in the ``stall`` scenario (stall
watchdog of 4 s; one checkpoint save of 6 s before the freeze), and also prints when the watchdog fired.
Target: training resumes within 60 s of the freeze, at most one checkpoint interval redone.
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
from tests.runtime.test_driver_process import start_driver
from tests.runtime.test_recovery import wait_for_progress


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=["process", "executor", "tf-freeze"], default="process")
    options = parser.parse_args()
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
            from tests.runtime.test_recovery import executor_jvm_of

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
