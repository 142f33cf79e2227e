"""Path helpers shared by the native API and the TFoS compatibility layer."""

from __future__ import annotations

import getpass
import logging

log = logging.getLogger(__name__)

#: Schemes whose paths are already absolute URIs and are returned unchanged.
ABSOLUTE_SCHEMES = (
    "adl://",
    "abfs://",
    "abfss://",
    "file://",
    "gs://",
    "hdfs://",
    "oss://",
    "s3://",
    "s3a://",
    "s3n://",
    "swift://",
    "viewfs://",
    "wasb://",
    "webhdfs://",
)


def absolute_path(path: str, *, default_fs: str, working_dir: str) -> str:
    """Turn ``path`` into a full URI under ``default_fs``, as TensorFlowOnSpark 2.2.5's ``TFNode.hdfs_path`` did.

    - a path with a file system scheme is returned unchanged;
    - an absolute path goes under the default file system: ``/data`` -> ``hdfs://nn:8020/data``, or
      ``hdfs:///data`` when it is ``hdfs://``;
    - a relative path goes under the user's home on HDFS and viewfs (``hdfs://nn:8020/user/<user>/foo``,
      ``hdfs:///user/<user>/foo``), under ``working_dir`` on ``file://``, else under the default file
      system itself (with a warning).

    Unlike TFoS, a default file system with a trailing slash (``hdfs://nn:8020/``) gives no double slash,
    and the cloud schemes TFoS did not list (``gs://``, ``abfs://``, ``webhdfs://``...) are kept as they are.
    """
    if path.startswith(ABSOLUTE_SCHEMES):
        return path
    scheme, sep, authority = default_fs.partition("://")
    root = f"{scheme}://{authority.rstrip('/')}" if sep else default_fs.rstrip("/")
    if path.startswith("/"):
        return root + path
    if root.startswith(("hdfs://", "viewfs://")):
        return f"{root}/user/{getpass.getuser()}/{path}"
    if root.startswith("file://"):
        return f"{root}/{working_dir.strip('/')}/{path}"
    log.warning("unknown default file system %s: %s is put directly under it", default_fs, path)
    return f"{root}/{path}"
