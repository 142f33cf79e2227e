"""The context handed to a node's ``main_fun(args, ctx)``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from airflow_tfos.runtime.cluster import CHIEF, MASTER, WORKER


@dataclass
class NodeContext:
    """Where a TF node stands in its cluster and where its files go.

    Field names follow TensorFlowOnSpark's context, so programs written for it keep working.

    :param executor_id: the node's number, 0..N-1 (TFoS: ``executor_id``/``worker_num``).
    :param job_name: ``ps``, ``chief``, ``master``, ``evaluator`` or ``worker``.
    :param task_index: the node's index within its job.
    :param cluster_spec: job name to the ``host:port`` of its nodes.
    :param num_workers: number of nodes that run the training loop (chief/master and workers).
    :param num_nodes: number of nodes of every kind.
    :param host: the address this node's TF server is reachable on.
    :param port: the port reserved for this node's TF server.
    :param run_dir: the run's directory (URI or local path), or None when the run has none.
    :param working_dir: the executor's working directory when the node started.
    :param default_fs: Hadoop's ``fs.defaultFS`` of the Spark application.
    :param attempt: the Spark task's attempt number (0 on the first try).
    :param gpus: GPU addresses Spark assigned to this node (also in CUDA_VISIBLE_DEVICES).
    :param tensorboard_url: where TensorBoard serves this run, when this node started it.
    """

    executor_id: int
    job_name: str
    task_index: int
    cluster_spec: dict[str, list[str]]
    num_workers: int
    num_nodes: int
    host: str
    port: int
    run_dir: str | None = None
    working_dir: str = field(default_factory=os.getcwd)
    default_fs: str = "file://"
    attempt: int = 0
    gpus: list[str] = field(default_factory=list)
    tensorboard_url: str | None = None
    log_dir: str | None = None

    @property
    def worker_num(self) -> int:
        """TFoS's name for :attr:`executor_id`."""
        return self.executor_id

    @property
    def defaultFS(self) -> str:
        """TFoS's name for :attr:`default_fs`."""
        return self.default_fs

    @property
    def is_chief(self) -> bool:
        """Whether this node coordinates training: the chief/master, or worker 0 when there is none."""
        if self.job_name in (CHIEF, MASTER):
            return True
        has_chief = any(job in self.cluster_spec for job in (CHIEF, MASTER))
        return self.job_name == WORKER and self.task_index == 0 and not has_chief

    @property
    def training_rank(self) -> int | None:
        """This node's rank among the training nodes (chief/master first, then the workers), for
        sharding data; None on parameter servers and evaluators."""
        if self.job_name in (CHIEF, MASTER):
            return 0
        if self.job_name != WORKER:
            return None
        has_chief = any(job in self.cluster_spec for job in (CHIEF, MASTER))
        return self.task_index + (1 if has_chief else 0)

    @property
    def tf_config(self) -> dict[str, Any]:
        """The TF_CONFIG this node runs with, as a dict."""
        return json.loads(os.environ.get("TF_CONFIG", "{}"))

    @property
    def tmp_socket(self) -> None:
        """TFoS reserved the TF port with a socket kept open until ``release_port``; the port is
        already free when ``main_fun`` starts here, so there is no socket to hand out."""
        return None

    def release_port(self) -> None:
        """Kept for TFoS programs: the port is released before ``main_fun`` starts."""

    def absolute_path(self, path: str) -> str:
        """Turn ``path`` into a full URI as TFoS's ``TFNode.hdfs_path`` did (see there)."""
        from airflow_tfos.runtime.paths import absolute_path

        return absolute_path(path, default_fs=self.default_fs, working_dir=self.working_dir)
