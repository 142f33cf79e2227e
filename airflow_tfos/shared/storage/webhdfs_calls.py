"""The pieces that :class:`~airflow_tfos.shared.storage.webhdfs_client.WebHDFSStorage` makes its calls with.

The ``requests`` session and ``hdfs`` client classes are defined on first use, so that importing the storage
imports neither until a namenode is called; the RENAME call counts its tries, so that a retry after a lost
answer is not taken for a failure; a FileStatus's time is read in seconds; a file opened for writing is a
local temporary file that the storage publishes when it is closed. None of them holds the storage's logic
(paths, retries, failover, the Storage protocol): they are apart from it so that the client module reads as
that logic alone.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable
from typing import Any

from airflow_tfos.shared.storage.webhdfs_config import split_uri
from airflow_tfos.shared.storage.webhdfs_datanodes import with_exclusions

_SESSION_CLASS: type | None = None


def session_class() -> type:
    """A ``requests.Session`` whose own ``verify`` (the configured CA bundle, or False) wins over
    ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE``: plain requests lets those variables replace a session's
    bundle, so a cluster's own CA would be ignored wherever the machine sets them; and which asks the namenode
    to leave the datanodes of its ``exclusions`` out of its redirects."""
    global _SESSION_CLASS
    if _SESSION_CLASS is None:
        import requests

        class ConfiguredVerifySession(requests.Session):
            #: the datanodes the namenode is asked to leave out of its redirects (webhdfs_datanodes.py)
            exclusions = None

            def merge_environment_settings(self, url, proxies, stream, verify, cert):
                settings = super().merge_environment_settings(url, proxies, stream, verify, cert)
                if verify is None and self.verify is not True:
                    settings["verify"] = self.verify
                return settings

            def request(self, method, url, *args, **kwargs):
                if "params" in kwargs:
                    kwargs["params"] = with_exclusions(kwargs["params"], self.exclusions)
                return super().request(method, url, *args, **kwargs)

        _SESSION_CLASS = ConfiguredVerifySession
    return _SESSION_CLASS


_KERBEROS_CLIENT: Any = None


def kerberos_client_class() -> Any:
    """An ``hdfs.Client`` that also speaks WebHDFS's delegation-token operations (made on first use)."""
    global _KERBEROS_CLIENT
    if _KERBEROS_CLIENT is None:
        from hdfs.client import Client, _Request

        class KerberosWebHDFSClient(Client):
            _get_delegation_token = _Request("GET")
            _renew_delegation_token = _Request("PUT")
            _cancel_delegation_token = _Request("PUT")

        _KERBEROS_CLIENT = KerberosWebHDFSClient
    return _KERBEROS_CLIENT


def renamer(src: str, dst: str, options: str):
    """One RENAME call for the retries of ``WebHDFSStorage._call``; True if done (also when a lost answer hid an
    earlier success)."""
    tries = [0]

    def rename(client) -> bool:
        tries[0] += 1
        try:
            answer = client._rename(src, destination=dst, renameoptions=options)
        except Exception as exc:
            if tries[0] > 1 and getattr(exc, "exception", None) == "FileNotFoundException":
                return True  # an earlier try renamed it, and its answer was lost
            raise
        return not answer.content.strip() or bool(answer.json()["boolean"])

    return rename


def modified(status: dict[str, Any]) -> float | None:
    """A FileStatus's ``modificationTime`` (milliseconds) in seconds, or None when it has none."""
    millis = status.get("modificationTime")
    return millis / 1000.0 if isinstance(millis, int | float) else None


class UploadOnClose(io.FileIO):
    """A local temporary file, published to HDFS (atomically) when closed without an error.

    :param publish: the storage's ``_publish``, called with the HDFS path and ``local_file=`` this file.
    :param path: where it is published (a URI or an absolute path).
    """

    def __init__(self, publish: Callable[..., None], path: str):
        fd, self._local = tempfile.mkstemp(prefix="airflow-tfos-hdfs-")
        super().__init__(fd, "wb")
        self._publish, self._path, self._failed = publish, path, False

    def __exit__(self, exc_type, *rest):
        self._failed = exc_type is not None
        return super().__exit__(exc_type, *rest)

    def close(self) -> None:
        if self.closed:
            return
        super().close()
        try:
            if not self._failed:
                _, _, hpath = split_uri(self._path)
                self._publish(hpath, local_file=self._local)
        finally:
            os.remove(self._local)
