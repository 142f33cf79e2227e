"""A node's TF process, seen from its barrier task: started ahead of its context (it loads the program and imports
TensorFlow meanwhile), handed its context and TF_CONFIG, waited for (a training node) or kept until the training
nodes are done (a parameter server or evaluator); its failure, described for the driver."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from airflow_tfos.runtime.errors import NodeFailure, NodeReleased
from airflow_tfos.runtime.feed.rows import RowFeedManager
from airflow_tfos.runtime.node.cluster import (
    NodeRole,
    keras_env,
)
from airflow_tfos.runtime.node.job import NodeJob
from airflow_tfos.runtime.node.process import ChildProcess, describe_exit
from airflow_tfos.runtime.program import child as child_files
from airflow_tfos.runtime.program.context import NodeContext

log = logging.getLogger(__name__)


def prestart_node_process(
    job: NodeJob, node_dir: Path, env: dict[str, str], name: str, cwd: str | None = None
) -> ChildProcess:
    """Start a node's process before its context is known: it loads the program and imports TensorFlow,
    then waits for :func:`hand_over`. It dies with this process (and so with its Spark task)."""
    (node_dir / child_files.PAYLOAD).write_bytes(job.payload)
    argv = [
        sys.executable,
        "-m",
        "airflow_tfos.runtime.program.child",
        str(node_dir),
        f"--cluster-id={job.cluster_id}",
        child_files.AWAIT_CONTEXT,
    ]
    return ChildProcess(argv, env=env, name=name, cwd=cwd, takes_input=True).start()


def hand_over(
    proc: ChildProcess,
    node_dir: Path,
    ctx: NodeContext | None,
    tf_config: str | None,
    times: dict[str, float],
    role: NodeRole,
    host: str,
    *,
    webhdfs_token: str | None = None,
) -> None:
    """Give a pre-started node process its context and TF_CONFIG (and the run's WebHDFS delegation token, on
    its stdin only); raise its failure if it died waiting."""
    from pyspark import cloudpickle

    tmp = node_dir / (child_files.CONTEXT + ".tmp")
    tmp.write_bytes(cloudpickle.dumps(ctx))
    tmp.replace(node_dir / child_files.CONTEXT)
    message = {"tf_config": tf_config, "times": times}
    if webhdfs_token:
        message["webhdfs_token"] = webhdfs_token
    message = json.dumps(message).encode()
    if not proc.send(message):
        code = proc.wait(30.0)
        if code is None:
            code = proc.stop(1.0)
        raise RuntimeError(node_failure(role, host, node_dir, proc, code).encode())


def start_node_process(
    job: NodeJob, node_dir: Path, ctx: NodeContext, env: dict[str, str], name: str, cwd: str | None = None
) -> ChildProcess:
    """Leave the program and the node's context in ``node_dir`` for a (not yet started) node process."""
    from pyspark import cloudpickle

    (node_dir / child_files.PAYLOAD).write_bytes(job.payload)
    (node_dir / child_files.CONTEXT).write_bytes(cloudpickle.dumps(ctx))
    argv = [sys.executable, "-m", "airflow_tfos.runtime.program.child", str(node_dir), f"--cluster-id={job.cluster_id}"]
    return ChildProcess(argv, env=env, name=name, cwd=cwd)


def node_env(job: NodeJob, tf_config: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(job.env)
    # Absolute: a node may run in a directory of its own (a worker fed under parameter servers).
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in sys.path if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["AIRFLOW_TFOS_CLUSTER_ID"] = job.cluster_id
    env.pop("TF_CONFIG", None)
    if tf_config:
        env["TF_CONFIG"] = tf_config
    env.update(keras_env(job.spec.keras, importlib.util.find_spec("tf_keras") is not None))
    return env


def wait_for_node(proc: ChildProcess, mgr: RowFeedManager | None, role: NodeRole, host: str) -> int:
    """Wait for a training node's process; with a TFoS data feed, fail it if the feed goes unread."""
    while True:
        code = proc.wait(1.0)
        if code is not None:
            return code
        if mgr is not None and (stalled := mgr.stalled()) is not None:
            proc.stop(1.0)
            raise RuntimeError(
                NodeFailure(
                    role.job_name, role.task_index, role.executor_id, host, stalled, proc.stderr_tail()
                ).encode()
            )


def serve_until_released(task, proc: ChildProcess, role: NodeRole, host: str, node_dir: Path) -> None:
    """Keep a ps/evaluator node up until the training nodes are done; fail if it dies first."""
    lock = threading.Lock()
    state = {"released": False, "failure": None}

    def watch() -> None:
        code = proc.wait()
        with lock:
            if code != 0 and not state["released"]:
                state["failure"] = node_failure(role, host, node_dir, proc, code)
                os.kill(os.getpid(), signal.SIGUSR1)

    def interrupt(_signum, _frame) -> None:
        with lock:
            if not state["released"]:
                raise NodeReleased()

    try:
        previous = signal.signal(signal.SIGUSR1, interrupt)
    except ValueError:  # not the main thread: a failure then shows when the stage times out
        previous = None
    threading.Thread(target=watch, daemon=True, name=f"watch-{role.label}").start()
    try:
        task.allGather("waiting")
        with lock:
            state["released"] = True
    except NodeReleased:
        raise RuntimeError(state["failure"].encode()) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGUSR1, previous)
    log.info("training nodes are done; stopping %s", role.label)


#: How long a training node whose TF process failed on a lost peer waits before it fails its Spark task: long
#: enough for the task of a peer whose process died (a parameter server killed) to fail the barrier stage first,
#: so that the attempt's reason is the cause ("ps:0 ... process killed by SIGKILL"), not its echo on another
#: node ("chief:0 ... UnavailableError: failed to connect"). Spark interrupts the wait once the stage fails.
PEER_LOSS_GRACE_SECS = 3.0


def training_node_failed(role: NodeRole, host: str, node_dir: Path, proc: ChildProcess, code: int) -> RuntimeError:
    """The error a training node's task raises for its failed process, after :data:`PEER_LOSS_GRACE_SECS` when
    the process only met a peer's loss."""
    failure = node_failure(role, host, node_dir, proc, code)
    if failure.retryable and child_files.is_peer_loss(failure.reason):
        log.info("%s met a lost peer (%s); failing in %.0f s unless the peer's task fails first", role.label,
                 failure.reason[:200], PEER_LOSS_GRACE_SECS)  # fmt: skip
        time.sleep(PEER_LOSS_GRACE_SECS)
    return RuntimeError(failure.encode())


def node_failure(role: NodeRole, host: str, node_dir: Path, proc: ChildProcess, code: int) -> NodeFailure:
    error_file = node_dir / child_files.ERROR
    if error_file.exists():
        record = json.loads(error_file.read_text())
        reason, trace, retryable = record["reason"], record["traceback"], record.get("retryable", False)
        if record.get("kind") == "input":  # bad data met by the node's own reads: reported as on the Spark path
            return NodeFailure(role.job_name, role.task_index, role.executor_id, host, reason, "", "input")
    else:
        reason = describe_exit(code)
        tail = proc.stderr_tail()
        trace = f"last lines of its stderr:\n{tail}" if tail else ""
        retryable = True  # killed or crashed without a Python error: a fresh cluster may well succeed
    return NodeFailure(role.job_name, role.task_index, role.executor_id, host, reason, trace, retryable=retryable)
