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
    """Turn ``path`` into a full URI, as TensorFlowOnSpark's ``TFNode.hdfs_path`` did.

    - a URI with a known scheme is returned unchanged;
    - an absolute path is put under ``default_fs`` (``/data`` -> ``hdfs://nn:8020/data``);
    - a relative path goes under the user's HDFS home (``hdfs://nn:8020/user/<user>/<path>``) on
      HDFS, or under ``working_dir`` on a local file system.
    """
    if path.startswith(ABSOLUTE_SCHEMES):
        return path
    fs = default_fs.rstrip("/") if default_fs.startswith("file://") else default_fs
    if fs == "file:":
        fs = "file://"
    if path.startswith("/"):
        return fs.rstrip("/") + path if not fs.endswith("://") else fs + path
    if fs.startswith(("hdfs://", "viewfs://")):
        return f"{fs.rstrip('/')}/user/{getpass.getuser()}/{path}"
    if fs.startswith("file://"):
        return f"file://{working_dir.rstrip('/')}/{path}"
    log.warning("unknown fs.defaultFS %s: %s is resolved relative to it", default_fs, path)
    return f"{fs.rstrip('/')}/{path}"
