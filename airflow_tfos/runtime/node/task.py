"""The Spark side of one TF node: the body of one barrier task.

Each task first starts the node's own Python process (:mod:`airflow_tfos.runtime.program.child`), which loads
the program and imports TensorFlow meanwhile; the task then reads its data, reserves a port on its
executor's address, swaps ``host:port`` with the other tasks through ``BarrierTaskContext.allGather``,
builds TF_CONFIG and hands it with the node's context to the waiting process. The process dies with the
task, whenever the task ends. Training nodes are waited for; parameter servers and evaluators
are kept until the training nodes are done (a second ``allGather``), then stopped. A node that fails
raises with its role, index and traceback, which fails the barrier stage and so every other task,
whose processes die with them.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from pathlib import Path

from airflow_tfos.runtime.errors import NodeFailure
from airflow_tfos.runtime.feed.native import WORKER_INDEX_FILE
from airflow_tfos.runtime.feed.rows import RowFeed
from airflow_tfos.runtime.feed.service import DataService
from airflow_tfos.runtime.node.cluster import (
    CHIEF,
    MASTER,
    WORKER,
    NodeRole,
    build_cluster_spec,
    build_tf_config,
    gpu_env,
    num_training_nodes,
    ps_coordinated,
    result_node,
)
from airflow_tfos.runtime.node.job import NodeJob
from airflow_tfos.runtime.node.launch import (
    hand_over,
    node_env,
    node_failure,
    prestart_node_process,
    serve_until_released,
    training_node_failed,
    wait_for_node,
)
from airflow_tfos.runtime.node.ports import PortReservation
from airflow_tfos.runtime.node.process import ChildProcess
from airflow_tfos.runtime.node.tensorboard import forget_tensorboard, record_tensorboard, start_tensorboard
from airflow_tfos.runtime.program import child as child_files
from airflow_tfos.runtime.program.context import NodeContext
from airflow_tfos.shared.errors import FeedConfigError

log = logging.getLogger(__name__)

CLUSTER_INFO = "cluster.json"


def run_node(job: NodeJob, partition: Iterable) -> Iterator[tuple[int, bytes, str]]:
    """Run one TF node as a barrier task.

    Yields ``(executor_id, pickled result, notes)`` from the result node; notes are lines for the
    driver's log (how the data was balanced).
    """
    from pyspark import BarrierTaskContext

    task = BarrierTaskContext.get()
    executor_id = task.partitionId()
    infos = task.getTaskInfos()
    if len(infos) != len(job.roles):
        raise RuntimeError(
            f"Spark runs {len(infos)} barrier tasks for {len(job.roles)} TF nodes: the stage's "
            "partitioning was changed (adaptive execution?); set spark.sql.adaptive.enabled=false"
        )
    role = job.roles[executor_id]
    host = infos[executor_id].address.rsplit(":", 1)[0]
    node_dir = Path(tempfile.mkdtemp(prefix=f"airflow-tfos-{job.cluster_id}-{executor_id}-"))
    try:
        yield from _run_node(job, task, role, host, node_dir, partition)
    finally:
        shutil.rmtree(node_dir, ignore_errors=True)


def _input_failure(role: NodeRole, host: str, exc: Exception) -> RuntimeError:
    return RuntimeError(
        NodeFailure(role.job_name, role.task_index, role.executor_id, host, str(exc), "", "input").encode()
    )


def _run_node(job: NodeJob, task, role: NodeRole, host: str, node_dir: Path, partition: Iterable):
    times = {"task_start": time.time()}
    # Everything the node's process needs before its TF_CONFIG is known now: start it first, so that it
    # imports TensorFlow and the program while this task reads its data and swaps ports with the others.
    env = node_env(job, None)
    env.update(gpu_env(assigned_gpus(task), job.spec.gpus_per_node, role.label))
    # A worker under parameter servers runs in its node directory, where the relative names in the graphs
    # the chief traces find this worker's own files: its share of the fed rows, and its task index.
    ps_worker = ps_coordinated(job.roles) and role.job_name == WORKER
    # The node's ports, held by this task: TensorBoard's while it runs, the TF port until the handover
    # (runtime/node/ports.py tells why).
    board = job.spec.tensorboard and result_node(job.roles) == role
    # Under parameter servers the chief's process also runs the tf.data dispatcher (runtime/feed/service.py).
    dispatches = ps_coordinated(job.roles) and role.job_name in (CHIEF, MASTER)
    with (
        PortReservation() as tf_port,
        PortReservation(share=True) if board else nullcontext() as tb_port,
        PortReservation() if dispatches else nullcontext() as dispatcher_port,
    ):
        proc = prestart_node_process(
            job, node_dir, env, f"TF node {role.label}", cwd=str(node_dir) if ps_worker else None
        )
        ports = {"tf": tf_port, "tensorboard": tb_port, "dispatcher": dispatcher_port}
        try:
            yield from _launch_node(job, task, role, host, node_dir, partition, proc, env, times, ports)
        finally:
            proc.stop(job.spec.kill_grace_secs)


def _launch_node(
    job: NodeJob,
    task,
    role: NodeRole,
    host: str,
    node_dir: Path,
    partition: Iterable,
    proc: ChildProcess,
    env: dict[str, str],
    times: dict[str, float],
    ports: dict[str, PortReservation | None],
):
    """The task's part after its node's process was started: data, port exchange, handover, wait. ``ports``:
    the node's reservations (``tf``; ``tensorboard`` and ``dispatcher`` where it runs them)."""
    from airflow_tfos.runtime.feed import spark_side
    from airflow_tfos.runtime.feed.direct import probe_direct, spill_direct

    info: dict = {"executor_id": role.executor_id}
    try:
        if job.direct is not None and ps_coordinated(job.roles):  # TF's ops read record files spilled first
            info["spill"] = spill_direct(job.direct, role.executor_id, str(node_dir), job.feed)
        elif job.direct is not None:  # the node's TF process reads its slices itself, every epoch
            info["spill"] = probe_direct(job.direct, role.executor_id, job.feed)
        elif job.feed is not None:
            info["spill"] = spark_side.spill_partition(partition, str(node_dir), job.feed, job.with_validation)
        elif job.row_feed is not None:
            info["rows"] = job.row_feed.spill(partition, str(node_dir))
    except FeedConfigError as exc:
        raise _input_failure(role, host, exc) from None
    is_result = result_node(job.roles) == role
    tf_port, tb_port, dispatcher_port = ports["tf"], ports["tensorboard"], ports["dispatcher"]
    port = tf_port.port
    info["endpoint"] = f"{host}:{port}"
    if dispatcher_port is not None:
        info["dispatcher"] = f"{host}:{dispatcher_port.port}"
    times["barrier_start"] = time.time()
    infos = sorted(map(json.loads, task.allGather(json.dumps(info))), key=lambda i: i["executor_id"])
    times["barrier_end"] = time.time()
    cluster_spec = build_cluster_spec(job.roles, [i["endpoint"] for i in infos])
    log.info("TF node %s on %s:%d, cluster %s", role.label, host, port, cluster_spec)
    shares, notes, mgr = {}, [], None
    try:
        if job.feed is not None:
            shares, notes = spark_side.plan_shares(infos, job.roles, role, job.feed, job.direct)
            shares = spark_side.write_native_shares(shares, str(node_dir))
        elif job.row_feed is not None:
            mgr = job.row_feed.manager(infos, job.roles, role, str(node_dir))
            notes = job.row_feed.describe(infos, job.roles)
    except FeedConfigError as exc:
        raise _input_failure(role, host, exc) from None
    if notes and is_result:
        sys.stderr.write("".join(f"airflow-tfos: {line}\n" for line in notes))

    tf_config = build_tf_config(cluster_spec, role) if job.set_tf_config else None
    tb_url = f"http://{host}:{tb_port.port}" if tb_port else None
    ctx = NodeContext(
        executor_id=role.executor_id,
        job_name=role.job_name,
        task_index=role.task_index,
        cluster_spec=cluster_spec,
        num_workers=num_training_nodes(job.roles),
        num_nodes=len(job.roles),
        host=host,
        port=port,
        run_dir=job.run_dir,
        working_dir=job.working_dir,
        default_fs=job.default_fs,
        attempt=job.attempt,
        gpus=env.get("CUDA_VISIBLE_DEVICES", "").split(",") if env.get("CUDA_VISIBLE_DEVICES") else [],
        tensorboard_url=tb_url,
        log_dir=job.spec.log_dir,
        feed_shares=shares,
        mgr=mgr,
        warm_start=job.spec.warm_start,
        data_service=_data_service(job, infos),
    )
    if ps_coordinated(job.roles) and role.job_name == WORKER:
        (node_dir / WORKER_INDEX_FILE).write_text(str(role.task_index))
    tb_env = {**env, "TF_CONFIG": tf_config} if tf_config else env
    tensorboard = start_tensorboard(job, tb_env, host, tb_port.port) if tb_port else None
    recorded = tensorboard is not None and record_tensorboard(job, tb_url)
    try:
        if is_result:
            _publish_cluster_info(job, cluster_spec, tb_url)
        tf_port.release()  # TensorFlow's gRPC server will not share it: bound once the program builds its server
        if dispatcher_port is not None:
            dispatcher_port.release()  # nor will the dispatcher's: bound as the node's process starts
        hand_over(proc, node_dir, ctx, tf_config, times, role, host, webhdfs_token=job.webhdfs_token)
        if role.executor_id in job.deciders:
            code = wait_for_node(proc, mgr, role, host)
            if code != 0:
                raise training_node_failed(role, host, node_dir, proc, code)
            task.allGather("done")
        else:
            serve_until_released(task, proc, role, host, node_dir)
        result_file = node_dir / child_files.RESULT
        if is_result and result_file.exists():
            yield role.executor_id, result_file.read_bytes(), "\n".join(notes)
    finally:
        if tensorboard is not None:
            tensorboard.stop(1.0)
        if recorded:
            forget_tensorboard(job)


def _data_service(job: NodeJob, infos: list[dict]) -> DataService | None:
    """The tf.data service of a parameter-server cluster (the chief's dispatcher), or None."""
    dispatcher = next((i["dispatcher"] for i in infos if "dispatcher" in i), None)
    if dispatcher is None:
        return None
    return DataService(dispatcher, job=f"{job.cluster_id}-{job.attempt}")


def run_inference_partition(job: NodeJob, index: int, rows: Iterable) -> Iterator:
    """TFoS inference: run ``main_fun`` on one partition's rows in a node of its own; yield its results.

    No barrier is needed: each partition is fed to its own node process, which answers with one result
    per row through ``DataFeed.batch_results``; results come back in the order of the input rows.
    """
    from airflow_tfos.runtime.feed.spill import read_row_chunks

    role = NodeRole(index, "worker", index)
    host = socket.gethostname()
    node_dir = Path(tempfile.mkdtemp(prefix=f"airflow-tfos-{job.cluster_id}-infer-{index}-"))
    feed = job.row_feed or RowFeed(train_mode=False)
    proc = None
    try:
        count = feed.spill(rows, str(node_dir))
        if count == 0:
            return
        mgr = feed.manager_for(str(node_dir), rows=count, rows_per_epoch=count, label=role.label)
        ctx = NodeContext(
            executor_id=index,
            job_name="worker",
            task_index=index,
            cluster_spec={},
            num_workers=1,
            num_nodes=1,
            host=host,
            port=0,
            run_dir=job.run_dir,
            working_dir=job.working_dir,
            default_fs=job.default_fs,
            log_dir=job.spec.log_dir,
            mgr=mgr,
        )
        # Started as the training nodes are: the context, and the run's WebHDFS delegation token if any, on stdin.
        proc = prestart_node_process(job, node_dir, node_env(job, None), f"TF inference node {index}")
        hand_over(proc, node_dir, ctx, None, {}, role, host, webhdfs_token=job.webhdfs_token)
        code = wait_for_node(proc, mgr, role, host)
        if code != 0:
            raise RuntimeError(node_failure(role, host, node_dir, proc, code).encode())
        has_results = os.path.exists(mgr.results_path)
        results = [r for chunk in read_row_chunks(mgr.results_path) for r in chunk] if has_results else []
        if len(results) != count:
            reason = (
                f"map_fun returned {len(results)} results for {count} input rows: inference must call "
                "DataFeed.batch_results with one result per row it got from next_batch"
            )
            raise RuntimeError(NodeFailure(role.job_name, index, index, host, reason).encode())
        yield from results
    finally:
        if proc is not None:
            proc.stop(job.spec.kill_grace_secs)
        shutil.rmtree(node_dir, ignore_errors=True)


def assigned_gpus(task) -> list[str]:
    try:
        gpu = task.resources().get("gpu")
    except Exception:
        return []
    return list(gpu.addresses) if gpu is not None else []


def _publish_cluster_info(job: NodeJob, cluster_spec: dict, tensorboard_url: str | None) -> None:
    """Write the cluster's layout to the run directory, when it is on a file system this node sees."""
    if not job.run_dir:
        return
    path = job.run_dir.removeprefix("file://")
    if "://" in path:
        return  # remote run directories are written through the storage layer
    try:
        info = {"run_id": job.cluster_id, "cluster_spec": cluster_spec, "tensorboard_url": tensorboard_url}
        target = Path(path) / CLUSTER_INFO
        tmp = target.with_suffix(".tmp")
        tmp.write_text(json.dumps(info, indent=1))
        tmp.replace(target)
    except OSError as exc:
        log.warning("cannot write %s to %s: %s", CLUSTER_INFO, job.run_dir, exc)
