"""TensorFlowOnSpark's ``TFNode`` module: helpers used inside ``map_fun``.

TF1-only helpers (``start_cluster_server``, ``export_saved_model``) and the queue functions that TFoS
2.x had already replaced raise with the same advice TFoS 2.2.5 gave.
"""

from __future__ import annotations

import getpass
import logging

from airflow_tfos.runtime.feed.rows import DataFeed
from airflow_tfos.runtime.paths import ABSOLUTE_SCHEMES

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
    """Turn ``path`` into a full URI under ``ctx.defaultFS``, as TFoS 2.2.5 did.

    - a path with a file system scheme is returned unchanged;
    - an absolute path goes under the default file system: ``/data`` -> ``hdfs://nn:8020/data``, or
      ``hdfs:///data`` when ``defaultFS`` is ``hdfs://``;
    - a relative path goes under the user's home on HDFS and viewfs (``hdfs://nn:8020/user/<user>/foo``,
      ``hdfs:///user/<user>/foo``), under ``ctx.working_dir`` on ``file://``, else under the default file
      system itself (with a warning).

    Unlike TFoS, a ``defaultFS`` with a trailing slash (``hdfs://nn:8020/``) gives no double slash, and the
    cloud schemes TFoS did not list (``gs://``, ``abfs://``, ``webhdfs://``...) are kept as they are.
    """
    if path.startswith(ABSOLUTE_SCHEMES):
        return path
    scheme, sep, authority = ctx.defaultFS.partition("://")
    root = f"{scheme}://{authority.rstrip('/')}" if sep else ctx.defaultFS.rstrip("/")
    if path.startswith("/"):
        return root + path
    if root.startswith(("hdfs://", "viewfs://")):
        return f"{root}/user/{getpass.getuser()}/{path}"
    if root.startswith("file://"):
        return f"{root}/{ctx.working_dir.strip('/')}/{path}"
    log.warning("unknown default file system %s: %s is put directly under it", ctx.defaultFS, path)
    return f"{root}/{path}"


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
