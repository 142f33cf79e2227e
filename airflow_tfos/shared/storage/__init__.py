"""The one seam through which both halves read and write files: local paths, ``file://``, and HDFS.

- :mod:`.base`: the :class:`Storage` interface and :class:`LocalStorage`.
- :mod:`.webhdfs_config`: WebHDFS settings and URI parsing (no I/O); its errors are in
  :mod:`airflow_tfos.shared.errors`.
- :mod:`.webhdfs_errors`: whether a failed WebHDFS call is worth another attempt, and the error it becomes.
- :mod:`.webhdfs_client`: :class:`~.webhdfs_client.WebHDFSStorage`, the interface over WebHDFS.
- :mod:`.webhdfs_calls`: what its calls are made with (the session and client classes, the RENAME call, the
  file that uploads on close).
- :mod:`.ranged`: :class:`~.ranged.RangedFile`, a read-only seekable file over a storage's ranged reads
  (``read_range``), for Parquet readers that need only some row groups and columns of a remote file.
- :mod:`.schemes`: which storage serves a URI (:func:`storage_for`); other schemes plug in with
  :func:`register_storage`. The WebHDFS client is imported only when an HDFS URI is first used.

Every scheme is usable wherever a path is taken: the run directory (:mod:`airflow_tfos.shared.rundir`),
InputMode.TENSORFLOW file shards and the readers in :mod:`airflow_tfos.runtime.feed.files`. Imports point
one way: ``schemes -> base``, ``webhdfs_errors -> webhdfs_config``, ``webhdfs_calls -> webhdfs_config``,
``webhdfs_client -> base, webhdfs_calls, webhdfs_config, webhdfs_errors``, ``ranged -> base``; of the rest
of the package, they import only :mod:`airflow_tfos.shared.errors` (which imports nothing).
"""

from airflow_tfos.shared.storage.base import PRIVATE_DIR_MODE, FileInfo, LocalStorage, Storage, is_plain_name
from airflow_tfos.shared.storage.schemes import join, register_storage, storage_for

__all__ = [
    "PRIVATE_DIR_MODE",
    "FileInfo",
    "LocalStorage",
    "Storage",
    "is_plain_name",
    "join",
    "register_storage",
    "storage_for",
]
