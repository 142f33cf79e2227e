"""Network-fault drills on the multi-host cluster, shared by tests/multihost and ``bench/recovery.py``.

Each drill starts the user's 3-node training (checkpoint every 10 steps, stall watchdog of 30 s), waits
until the chief has trained past step 25, disturbs the chief's host, and measures from the run directory
(the emulator's files, read directly): when a new attempt trained its first step, what it restored, the
final step, and what the disturbed host still runs or wrote afterwards.

Targets: ``host`` (every process of the chief's host killed at once), ``partition`` (the chief's host cut off
for ``partition_secs``, then back), ``freeze-executor`` (the chief's executor JVM stopped with SIGSTOP),
``freeze-tf`` (the chief's TF process stopped), ``slow`` (every packet of the chief's host delayed by ``tc
netem``; where the kernel has no netem, every process of the host given about a quarter of its time).
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
import uuid
from pathlib import Path

import psutil

from tests.multihost.conftest import node_processes, start_training, training_result

EVERY = 10
ARGS = {"epochs": 10, "every": EVERY, "sleep": 0.15}
#: What recovery needs from Spark on hosts that hang instead of dying (see docs/multihost.md).
OPTIONS = {
    "stall_timeout": 30,
    "max_attempts": 3,
    "spark_conf": {
        "spark.network.timeout": "30s",
        "spark.executor.heartbeatInterval": "3s",
        "spark.storage.blockManagerHeartbeatTimeoutMs": "30000",
        "spark.network.timeoutInterval": "5s",
    },
}
#: How long ``partition`` keeps the chief's host cut off, unless the caller says otherwise (``bench/recovery.py``).
PARTITION_SECS = 60
SLOW_MS = 40
STARVED_SHARE = 0.25
TARGETS = ("host", "partition", "freeze-executor", "freeze-tf", "slow")


def _json_files(folder: str) -> list[dict]:
    found = []
    for path in Path(folder).glob("*.json") if os.path.isdir(folder) else []:
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue  # being replaced
    return found


def _events(lab, run_path: str, kind: str) -> list[dict]:
    folder = lab.hdfs.local_path(f"{run_path}/events")
    found = [e for e in _json_files(folder) if e.get("kind") == kind]
    for batch in Path(folder).glob("batch-*.jsonl") if os.path.isdir(folder) else []:
        for line in batch.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("kind") == kind:
                found.append(event)
    return sorted({json.dumps(e, sort_keys=True): e for e in found}.values(), key=lambda e: e.get("time", 0))


def _wait(what: str, within: float, check):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {within:.0f} s")


def chief_host(lab, run_path: str) -> str:
    configs = _events(lab, run_path, "tf_config")
    chief = next(c for c in configs if c["node"] in ("chief:0", "worker:0"))
    job = "chief" if "chief" in chief["tf_config"]["cluster"] else "worker"
    address = chief["tf_config"]["cluster"][job][0].rsplit(":", 1)[0]
    return next(name for name in lab.workers if lab.address(name) == address)


def _executor_of(lab, host: str, child_name: str) -> psutil.Process:
    for process in node_processes(lab, host):
        if child_name in " ".join(process.cmdline()):
            return process
    raise AssertionError(f"no {child_name} process on {host}: {[p.cmdline()[:3] for p in node_processes(lab, host)]}")


def executor_lost(lab, name: str, address: str) -> bool:
    """Whether the driver whose output is ``<log_dir>/<name>.out`` has declared an executor on ``address`` lost."""
    try:
        out = (lab.hosts.log_dir / f"{name}.out").read_text(errors="replace")
    except OSError:
        return False
    return re.search(rf"Lost executor \d+ on {re.escape(address)}\b", out) is not None


def run_drill(
    lab, user_code: Path, data: str, target: str, *, partition_secs: float = PARTITION_SECS, epochs: int | None = None
) -> dict:
    """Run one drill to its end; return what it measured (seconds, steps) and what it saw.

    :param partition_secs: for ``partition``, how long the chief's host stays cut off.
    :param epochs: epochs to train (default ``ARGS``'s 10: 130 steps on the tests' data); the fault comes past step 25.
    """
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    if partition_secs <= 0:
        raise ValueError(f"partition_secs must be positive, got {partition_secs}")
    run_path = f"/drills/{target}-{uuid.uuid4().hex[:6]}"
    name = f"drill-{target}"
    args = ARGS if epochs is None else {**ARGS, "epochs": epochs}
    back = lab.hosts.log_dir / f"{run_path.rsplit('/', 1)[1]}.host-back"
    if target == "partition":
        # The new attempt may run on the spare host and train its last steps before the cut host is back; it then
        # holds its export until the host is back, so that the stale side always returns to a run still going on.
        args = {**args, "hold_export_until": str(back)}
    driver = start_training(lab, user_code, lab.hdfs.uri(run_path), data, args, OPTIONS, name=name)
    nodes = lab.hdfs.local_path(f"{run_path}/nodes")
    mend_timer, slowed, mended = None, None, {}
    try:
        _wait("the chief trained past step 25", 240, lambda: any(
            (r.get("step") or 0) >= 25 for r in _json_files(nodes)) or driver.poll() is not None)  # fmt: skip
        assert driver.poll() is None, (lab.hosts.log_dir / f"{name}.out").read_text()[-3000:]
        host = chief_host(lab, run_path)
        step_at_fault = max(r.get("step") or 0 for r in _json_files(nodes))
        marker = lab.hdfs.requests[-1]  # requests after this one came after the fault
        fault_at = time.time()
        if target == "host":
            lab.hosts.kill_host(host)
        elif target == "partition":
            lab.hosts.cut(host)

            def mend(host=host):
                # what the driver had noticed by the time the host came back
                mended["executor_lost"] = executor_lost(lab, name, lab.address(host))
                mended["time"] = time.time()
                lab.hosts.mend(host)
                back.touch()

            mend_timer = threading.Timer(partition_secs, mend)
            mend_timer.start()
        elif target == "freeze-executor":
            _executor_of(lab, host, "CoarseGrainedExecutorBackend").send_signal(signal.SIGSTOP)
        elif target == "freeze-tf":
            _executor_of(lab, host, "airflow_tfos.runtime.program.child").send_signal(signal.SIGSTOP)
        elif target == "slow":  # packets delayed where the kernel has netem, else the host starved of CPU
            slowed = "delay" if lab.hosts.delay(host, SLOW_MS) else "cpu"
            if slowed == "cpu":
                starving = threading.Event()
                starver = lab.hosts.starve(host, STARVED_SHARE, starving)

        last_old = {"step": step_at_fault}  # a frozen executor's TF process may train on for a while

        def resumed():
            for r in _json_files(nodes):
                if r.get("attempt", 0) == 0 and r.get("step"):
                    last_old["step"] = max(last_old["step"], r["step"])
            later = [r["time"] for r in _json_files(nodes) if r.get("attempt", 0) >= 1 and r.get("phase") == "training"]
            return min(later) if later else None

        resumed_at = None
        if target != "slow":
            resumed_at = _wait("a new attempt trained", 300, lambda: resumed() or driver.poll() is not None)
            resumed_at = resumed() if resumed_at is True else resumed_at
        result = training_result(lab, driver, name=name, timeout=600)
        ended_at = time.time()
    finally:
        if driver.poll() is None:
            driver.kill()
        if mend_timer is not None:
            mend_timer.cancel()  # the run ended first: mend now (below)
            mend_timer.join(10)
            lab.hosts.mend(host)
            back.touch()
        if target == "slow":
            lab.hosts.delay(host, None)
            if slowed == "cpu":
                starving.set()
                starver.join(5)
    # After a partition the returning side must end by itself: wait for it (bounded), then look
    left_on_host = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        left_on_host = node_processes(lab, host)
        if not left_on_host:
            break
        time.sleep(1)
    restores = _events(lab, run_path, "restore")
    failed = [e for e in _events(lab, run_path, "attempt_failed") if e["time"] >= fault_at]
    stalls = _events(lab, run_path, "stall")
    after = fault_at + 1
    requests = list(lab.hdfs.requests)
    since = next((i for i in range(len(requests) - 1, -1, -1) if requests[i] is marker), 0)
    writes_from_host = [
        (r.op, r.path) for r in requests[since + 1 :]
        if r.client == lab.address(host) and r.op in ("CREATE", "RENAME", "DELETE") and run_path in r.path
    ]  # fmt: skip
    return {
        "target": target,
        "slowed": slowed if target == "slow" else None,
        "run_path": run_path,
        "tf_configs": _events(lab, run_path, "tf_config"),
        "exports": _events(lab, run_path, "export"),
        "host": host,
        "fault_at": fault_at,
        "step_at_fault": step_at_fault,
        "stall_secs": (stalls[0]["time"] - fault_at) if stalls else None,
        "resumed_secs": (resumed_at - fault_at) if resumed_at else None,
        "failed_secs": (failed[0]["time"] - fault_at) if failed else None,
        "partition_secs": partition_secs if target == "partition" else None,
        "mended_secs": (mended["time"] - fault_at) if "time" in mended else None,
        "executor_lost_before_mend": mended.get("executor_lost"),
        "restored": restores[-1]["step"] if restores else None,
        "last_step_before": last_old["step"],
        "redone": (last_old["step"] - restores[-1]["step"]) if restores else 0,
        "result": result,
        "run_secs": ended_at - fault_at,
        "left_on_host": [p.pid for p in left_on_host],
        "writes_from_host_after_fault": writes_from_host if target == "partition" else [],
        "checkpoints_after_fault": [
            (e["step"], e.get("attempt")) for e in _events(lab, run_path, "checkpoint") if e["time"] > after
        ],
        "attempts": [e.get("attempt") for e in _events(lab, run_path, "attempt")],
        "timeline": [
            (round(e["time"] - fault_at, 1), e["kind"], e.get("attempt"), e.get("step"), str(e.get("reason", ""))[:160])
            for kind in ("attempt", "attempt_failed", "executors_dropped", "stall", "restore", "checkpoint", "export")
            for e in _events(lab, run_path, kind)
        ],
    }
