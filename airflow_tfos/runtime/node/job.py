"""The job of a TF cluster's barrier tasks: everything each task needs, built on the driver and shipped with it."""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_tfos.runtime.feed.direct import DirectInput
from airflow_tfos.runtime.feed.rows import RowFeed
from airflow_tfos.runtime.node.cluster import (
    NodeRole,
)
from airflow_tfos.shared.feed import Feed
from airflow_tfos.shared.spec import RunSpec


@dataclass(frozen=True)
class NodeJob:
    """Everything each barrier task needs; built on the driver and shipped with the task.

    :param cluster_id: the TF cluster's id (``TFClusterRun.cluster_id``): names its processes and temporary files,
        and is written into the run directory's records as their ``run_id``.
    :param roles: the layout, indexed by partition id.
    :param deciders: executor ids whose finishing ends the run.
    :param payload: ``(main_fun, args)`` pickled with cloudpickle on the driver.
    :param run_dir: the run's directory, if any.
    :param default_fs: Hadoop's fs.defaultFS.
    :param working_dir: the driver's working directory (TFoS's ``ctx.working_dir``).
    :param env: extra environment variables for the node processes.
    :param set_tf_config: whether nodes get TF_CONFIG (TFoS set it only when there was a chief).
    :param feed: InputMode.SPARK from a DataFrame: the partition holds Arrow batches to spill and feed.
    :param direct: the feed's rows are read by the nodes from Parquet files: each node's slices of them
        (the partition is then empty).
    :param with_validation: the partition also holds validation rows (tagged by a split column).
    :param row_feed: InputMode.SPARK from an RDD (TFoS's DataFeed): the partition holds Python rows.
    :param attempt: which attempt of the run this is (0 first; a new barrier stage each time).
    :param spec: the cluster's settings, checked once where they were made (``TFClusterRun``, or spec.json read
        by the driver): nodes read them as ``job.spec.<name>`` (``keras``, ``gpus_per_node``, ``tensorboard``,
        ``log_dir``: the directory TensorBoard reads, ``warm_start``, ...).
    :param webhdfs_token: the WebHDFS delegation token the driver obtained for the nodes (Kerberized HDFS),
        handed to each node process on its stdin; never printed (``repr`` leaves it out).
    """

    cluster_id: str
    roles: tuple[NodeRole, ...]
    deciders: frozenset[int]
    payload: bytes
    run_dir: str | None = None
    default_fs: str = "file://"
    working_dir: str = "."
    env: dict[str, str] = field(default_factory=dict)
    set_tf_config: bool = True
    feed: Feed | None = None
    direct: DirectInput | None = None
    with_validation: bool = False
    row_feed: RowFeed | None = None
    attempt: int = 0
    spec: RunSpec = field(default_factory=lambda: RunSpec(num_nodes=1))
    webhdfs_token: str | None = field(default=None, repr=False)
