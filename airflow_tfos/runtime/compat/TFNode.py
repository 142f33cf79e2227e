"""TensorFlowOnSpark's ``TFNode`` module: helpers used inside ``map_fun``.

TF1-only helpers (``start_cluster_server``, ``export_saved_model``) and the queue functions that TFoS
2.x had already replaced raise with the same advice TFoS 2.2.5 gave.
"""

from __future__ import annotations

import logging

from airflow_tfos.runtime.feed.rows import DataFeed
from airflow_tfos.runtime.program.paths import absolute_path

log = logging.getLogger(__name__)

__all__ = [
    "DataFeed",
    "batch_results",
    "export_saved_model",
    "hdfs_path",
    "next_batch",
    "release_port",
    "start_cluster_server",
    "terminate",
]


def hdfs_path(ctx, path: str) -> str:
    """Turn ``path`` into a full URI under ``ctx.defaultFS``, as TFoS 2.2.5 did (the rules:
    :func:`airflow_tfos.runtime.program.paths.absolute_path`, which ``ctx.absolute_path`` follows too)."""
    return absolute_path(path, default_fs=ctx.defaultFS, working_dir=ctx.working_dir)


def release_port(ctx) -> None:
    """Release the node's reserved port (already released before ``map_fun`` starts)."""
    ctx.release_port()


def start_cluster_server(ctx, num_gpus=1, rdma=False):
    raise Exception("DEPRECATED: Use higher-level APIs like `tf.keras` or `tf.estimator`")


def export_saved_model(sess, export_dir, tag_set, signatures):
    raise Exception("DEPRECATED: Use TF provided APIs instead.")


def next_batch(mgr, batch_size, qname="input"):
    raise Exception("DEPRECATED: Use TFNode.DataFeed class instead")


def batch_results(mgr, results, qname="output"):
    raise Exception("DEPRECATED: Use TFNode.DataFeed class instead")


def terminate(mgr, qname="input"):
    raise Exception("DEPRECATED: Use TFNode.DataFeed class instead")
