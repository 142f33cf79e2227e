"""Pure cluster layout: roles, cluster spec and TF_CONFIG.

Nothing here touches Spark or TensorFlow, so all of it is tested without either.

Roles are laid out the way TensorFlowOnSpark laid them out, by Spark partition id: parameter servers
first, then the chief (or master), then the evaluator, then the workers. Programs that look at
``ctx.job_name``/``ctx.task_index`` and the TF_CONFIG that TensorFlow's strategies read therefore see
the same cluster they saw under TFoS.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from airflow_tfos.runtime.errors import ClusterConfigError

PS = "ps"
CHIEF = "chief"
MASTER = "master"
EVALUATOR = "evaluator"
WORKER = "worker"

#: Jobs whose nodes run the training loop and exit by themselves.
TRAINING_JOBS = frozenset({CHIEF, MASTER, WORKER})
#: Jobs whose nodes serve the training nodes and are stopped once those are done.
SERVICE_JOBS = frozenset({PS, EVALUATOR})


@dataclass(frozen=True)
class NodeRole:
    """One node's place in the cluster.

    :param executor_id: the node's number, 0..N-1 (also its Spark partition id).
    :param job_name: ``ps``, ``chief``, ``master``, ``evaluator`` or ``worker``.
    :param task_index: the node's index within its job.
    """

    executor_id: int
    job_name: str
    task_index: int

    @property
    def is_service(self) -> bool:
        return self.job_name in SERVICE_JOBS

    @property
    def label(self) -> str:
        return f"{self.job_name}:{self.task_index}"


def plan_roles(
    num_nodes: int,
    *,
    num_ps: int = 0,
    master_node: str | None = CHIEF,
    eval_node: bool = False,
) -> list[NodeRole]:
    """Lay out ``num_nodes`` nodes as ps, chief/master, evaluator, workers (in that order).

    :param num_nodes: total number of TF nodes, parameter servers and evaluator included.
    :param num_ps: number of parameter servers.
    :param master_node: job name of the coordinating node (``"chief"`` or ``"master"``), or None
        for a cluster of plain workers where worker 0 acts as chief.
    :param eval_node: whether one node is an evaluator.
    """
    if not isinstance(num_nodes, int) or num_nodes < 1:
        raise ClusterConfigError(f"num_nodes must be a positive integer, got {num_nodes!r}")
    if not isinstance(num_ps, int) or num_ps < 0:
        raise ClusterConfigError(f"num_ps must be a non-negative integer, got {num_ps!r}")
    if master_node not in (None, CHIEF, MASTER):
        raise ClusterConfigError(f"master_node must be 'chief', 'master' or None, got {master_node!r}")
    jobs: list[str] = [PS] * num_ps
    if master_node:
        jobs.append(master_node)
    if eval_node:
        jobs.append(EVALUATOR)
    num_workers = num_nodes - len(jobs)
    if num_workers < 0 or (num_workers == 0 and not master_node):
        needed = len(jobs) + (0 if master_node else 1)
        raise ClusterConfigError(
            f"num_nodes={num_nodes} is too small for num_ps={num_ps}, master_node={master_node!r} and "
            f"eval_node={eval_node}: at least {needed} nodes are needed (raise num_nodes/num_executors, "
            "or lower num_ps)"
        )
    jobs.extend([WORKER] * num_workers)
    counters: dict[str, int] = {}
    roles = []
    for executor_id, job in enumerate(jobs):
        roles.append(NodeRole(executor_id, job, counters.get(job, 0)))
        counters[job] = counters.get(job, 0) + 1
    return roles


def build_cluster_spec(roles: Sequence[NodeRole], endpoints: Sequence[str]) -> dict[str, list[str]]:
    """Map each job to its nodes' ``host:port``, ordered by task index.

    :param roles: the layout from :func:`plan_roles`.
    :param endpoints: ``host:port`` of each node, indexed by executor id.
    """
    if len(roles) != len(endpoints):
        raise ValueError(f"{len(roles)} roles but {len(endpoints)} endpoints")
    spec: dict[str, list[str]] = {}
    for role in sorted(roles, key=lambda r: (r.job_name, r.task_index)):
        spec.setdefault(role.job_name, []).append(endpoints[role.executor_id])
    return spec


def build_tf_config(cluster_spec: dict[str, list[str]], role: NodeRole) -> str:
    """Return the TF_CONFIG JSON that TensorFlow's distribution strategies read for ``role``.

    The cluster lists every job, the evaluator and parameter servers included, as TensorFlowOnSpark
    wrote it; TensorFlow's collectives only ever span the chief/master and the workers.
    """
    return json.dumps(
        {
            "cluster": {job: list(hosts) for job, hosts in cluster_spec.items()},
            "task": {"type": role.job_name, "index": role.task_index},
            "environment": "cloud",
        },
        sort_keys=True,
    )


def num_training_nodes(roles: Sequence[NodeRole]) -> int:
    """Count the nodes that run the training loop (chief/master and workers)."""
    return sum(1 for r in roles if r.job_name in TRAINING_JOBS)


def result_node(roles: Sequence[NodeRole]) -> NodeRole:
    """Return the node whose return value goes back to the driver: the chief/master, else worker 0."""
    for job in (CHIEF, MASTER, WORKER):
        for role in roles:
            if role.job_name == job and role.task_index == 0:
                return role
    raise ClusterConfigError("the cluster has no chief, master or worker node")


def decider_ids(roles: Sequence[NodeRole]) -> frozenset[int]:
    """Return the executor ids whose finishing ends the run.

    Without parameter servers every chief/master and worker runs the training loop
    (MultiWorkerMirroredStrategy or one worker alone), so the run ends when all of them have
    finished. With parameter servers and a chief, the chief alone runs the program
    (ParameterServerStrategy's coordinator) while workers and ps only serve it. Every other node is
    stopped once the deciders are done.
    """
    if ps_coordinated(roles):
        return frozenset(r.executor_id for r in roles if r.job_name in (CHIEF, MASTER))
    return frozenset(r.executor_id for r in roles if r.job_name in TRAINING_JOBS)


def ps_coordinated(roles: Sequence[NodeRole]) -> bool:
    """Whether the cluster has parameter servers and a chief/master: ParameterServerStrategy's layout,
    where the chief coordinates and only the workers run training steps (and so read data)."""
    has_ps = any(r.job_name == PS for r in roles)
    return has_ps and any(r.job_name in (CHIEF, MASTER) for r in roles)


def gpu_env(assigned: Sequence[str], gpus_per_node: int, label: str) -> dict[str, str]:
    """Return the CUDA_VISIBLE_DEVICES setting for a node given the GPUs Spark assigned to its task.

    :param assigned: GPU addresses from the task's resources (empty when Spark assigned none).
    :param gpus_per_node: GPUs the run asked for per node (0: use whatever Spark assigned).
    :param label: the node, for the error message.
    """
    if gpus_per_node > 0 and len(assigned) < gpus_per_node:
        raise ClusterConfigError(
            f"node {label} asked for {gpus_per_node} GPU(s) but Spark assigned {len(assigned)} "
            f"({list(assigned)}): set spark.executor.resource.gpu.amount and spark.task.resource.gpu.amount "
            f"to at least {gpus_per_node} (and a GPU discovery script), or use gpus_per_node=0"
        )
    chosen = list(assigned)[:gpus_per_node] if gpus_per_node > 0 else list(assigned)
    return {"CUDA_VISIBLE_DEVICES": ",".join(chosen)} if chosen else {}


def keras_env(mode: str, tf_keras_installed: bool) -> dict[str, str]:
    """Pick the Keras that ``tf.keras`` means inside the node.

    ``tf_keras`` (Keras 2) is what MultiWorkerMirroredStrategy's ``model.fit`` works with on TF 2.21;
    ``keras3`` keeps Keras 3. ``auto`` takes Keras 2 when the tf-keras package is installed.
    """
    if mode == "tf_keras" and not tf_keras_installed:
        raise ClusterConfigError(
            "keras='tf_keras' needs the tf-keras package on the executors (pip install tf-keras, the "
            "same version as TensorFlow), or use keras='keras3'"
        )
    legacy = mode == "tf_keras" or (mode == "auto" and tf_keras_installed)
    return {"TF_USE_LEGACY_KERAS": "1" if legacy else "0"}
