"""TensorFlowOnSpark's ``TFParallel`` module: independent single-node TF instances, e.g. parallel inference.

Each instance runs ``map_fn(tf_args, ctx)`` in a fresh node process (as every TF node does here), with
``ctx.executor_id``/``ctx.worker_num`` (0..N-1), ``ctx.num_workers`` (N) and ``ctx.defaultFS`` as TFoS
gave them, and no TF_CONFIG: the instances do not form a cluster.

Differences from TFoS 2.2.5: in barrier mode, a Spark application with fewer task slots than
``num_executors`` is refused at once with :class:`~airflow_tfos.runtime.node.cluster.ClusterConfigError` naming
the settings to change (TFoS left it to Spark's barrier check, which retries for minutes); a failed
instance raises :class:`~airflow_tfos.runtime.errors.NodeFailedError` with its traceback; GPUs are the ones
Spark's resource scheduling assigns to each task (``tf_args.num_gpus`` is not read).
"""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

from airflow_tfos.runtime.driver.launcher import TFClusterRun
from airflow_tfos.runtime.errors import ClusterConfigError, NodeFailedError, decode_node_failure
from airflow_tfos.runtime.node.cluster import NodeRole, gpu_env
from airflow_tfos.runtime.node.job import NodeJob
from airflow_tfos.runtime.node.launch import node_env, node_failure, start_node_process
from airflow_tfos.runtime.node.task import assigned_gpus
from airflow_tfos.runtime.program.context import NodeContext

#: seconds to wait for executors to register before deciding that a barrier run does not fit
SLOT_WAIT_SECS = 60.0


def run(sc, map_fn, tf_args, num_executors, use_barrier=True):
    """Run ``map_fn(tf_args, ctx)`` as ``num_executors`` independent instances on the executors; wait for them.

    :param sc: the SparkContext.
    :param map_fn: the instance's main function.
    :param tf_args: passed to ``map_fn`` as is.
    :param num_executors: how many instances to run.
    :param use_barrier: run every instance at once in one barrier stage (needs ``num_executors`` task
        slots); False: run them as ordinary tasks, as slots become free.
    :returns: None, as TFoS did.
    """
    if not isinstance(num_executors, int) or num_executors < 1:
        raise ClusterConfigError(f"num_executors must be a positive integer, got {num_executors!r}")
    cluster = TFClusterRun(
        sc,
        map_fn,
        tf_args,
        num_nodes=num_executors,
        master_node=None,
        set_tf_config=False,
        slot_wait_secs=SLOT_WAIT_SECS,
        max_attempts=1,
    )
    if use_barrier:
        cluster.start().wait()
        return
    job = cluster.node_job()
    nodes = sc.parallelize(range(num_executors), num_executors)
    try:
        nodes.mapPartitionsWithIndex(lambda index, _: _run_instance(job, index, num_executors)).collect()
    except Exception as exc:
        failure = decode_node_failure(exc)
        if failure is None:
            raise
        raise NodeFailedError(failure, str(exc)) from exc


def _run_instance(job: NodeJob, index: int, num_workers: int) -> Iterator:
    """One instance as an ordinary (non-barrier) task: ``map_fn`` in a node process of its own."""
    from pyspark import TaskContext

    role = NodeRole(index, "worker", index)
    host = socket.gethostname()
    node_dir = Path(tempfile.mkdtemp(prefix=f"airflow-tfos-{job.cluster_id}-parallel-{index}-"))
    env = node_env(job, None)
    env.update(gpu_env(assigned_gpus(TaskContext.get()), job.spec.gpus_per_node, role.label))
    ctx = NodeContext(
        executor_id=index,
        job_name=role.job_name,
        task_index=index,
        cluster_spec={},
        num_workers=num_workers,
        num_nodes=num_workers,
        host=host,
        port=0,
        working_dir=job.working_dir,
        default_fs=job.default_fs,
        gpus=env["CUDA_VISIBLE_DEVICES"].split(",") if env.get("CUDA_VISIBLE_DEVICES") else [],
    )
    proc = start_node_process(job, node_dir, ctx, env, f"TF instance {index}")
    try:
        code = proc.start().wait()
        if code != 0:
            raise RuntimeError(node_failure(role, host, node_dir, proc, code).encode())
        return iter(())
    finally:
        proc.stop(job.spec.kill_grace_secs)
        shutil.rmtree(node_dir, ignore_errors=True)
