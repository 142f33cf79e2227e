"""Errors of the shared package, and :class:`TFoSError`, the base of every error airflow-tfos raises.

Each half keeps its errors in one module: this one (the run directory, the spec, the registry and storage),
:mod:`airflow_tfos.runtime.errors` (the Spark side) and :mod:`airflow_tfos.hooks.errors` (the Airflow side).
Every error is a :class:`TFoSError` and keeps the built-in base it always had (``ValueError`` for a setting to
change, ``RuntimeError`` for a failure, ``OSError`` for storage), so ``except ValueError`` still catches a bad
argument and ``except TFoSError`` catches anything this package raised on purpose. Each error has one import
path: its errors module (``tests/project/test_layout.py`` checks that every exception the package defines lives in one).

This module imports nothing, so every module of the package may import it (storage included).
"""

from __future__ import annotations

__all__ = [
    "KerberosAuthError",
    "RegistryError",
    "RunDirError",
    "SpecError",
    "TFoSError",
    "WebHDFSConfigError",
    "WebHDFSError",
    "WebHDFSUnavailableError",
]


class TFoSError(Exception):
    """Base of every error airflow-tfos raises on purpose; the message says what to change or what failed."""


class SpecError(TFoSError, ValueError):
    """spec.json cannot be run; the message names the field."""


class FeedConfigError(SpecError):
    """The data or the feed settings cannot be fed; the message names the column or setting (a spec error: the
    feed's settings are part of the spec, and data that cannot be fed is fixed in the spec or the data)."""


class FeedRefusedError(SpecError):
    """A feed request asks for what the run's spec does not allow (a data function, a reader option, a table
    name that could make the driver load code): it is refused before anything it names is imported or read."""


class RunDirError(TFoSError, RuntimeError):
    """The run directory cannot be read or written as the contract says; the message says why."""

    @classmethod
    def from_storage(cls, exc: BaseException, doing: str, hint: str = "") -> RunDirError:
        """The error of a failed storage call: its cause first (which says what to change), then what could
        not be done, and where (``doing``: "cannot read hdfs://.../status.json"), then ``hint``."""
        # An OSError's strerror without "[Errno N]" and the file name (``doing`` names the path).
        cause = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        return cls(f"{cause} ({doing}{'; ' + hint if hint else ''})")


class StaleAttemptError(RunDirError):
    """A TF cluster that is no longer the run's current attempt tried to publish (its writes are fenced)."""


class RegistryError(TFoSError, ValueError):
    """The registry or a candidate cannot be used as asked; the message says what to change."""


class WebHDFSError(TFoSError, OSError):
    """A WebHDFS request failed for a reason other than a missing path or a refused permission."""


class WebHDFSServerError(WebHDFSError):
    """An HTTP 5xx answer of a NameNode or DataNode (raised from the WebHDFS session's response hook, before the
    ``hdfs`` package sees it, and turned into what the caller gets: a retry, or a :class:`WebHDFSUnavailableError`)."""

    def __init__(self, status: int, url: str):
        super().__init__(f"HTTP {status}")
        self.status, self.url = status, url


class WebHDFSUnavailableError(WebHDFSError):
    """No namenode answered usefully within the retries: the message names every address tried."""


class WebHDFSConfigError(TFoSError, ValueError):
    """The WebHDFS settings cannot be used; the message says which one to change."""


class KerberosAuthError(TFoSError, PermissionError):
    """Kerberos authentication (SPNEGO) could not be done; the message names the principal, service and fix."""

    def __init__(self, message: str):
        super().__init__(13, message)  # EACCES

    def __str__(self) -> str:
        return self.strerror or ""


class LeaseHeldError(RunDirError):
    """Another worker's application holds the run directory and could not be reached or outlived in time."""


class TokenFileError(TFoSError, ValueError):
    """A Hadoop token file (a YARN container's ``HADOOP_TOKEN_FILE_LOCATION``) cannot be read: the message names the
    file and what is wrong."""


#: The exit status of a driver whose run directory's HDFS refused its delegation token (expired or cancelled): it
#: could not record its error in status.json, so the status is all the Airflow side learns (from YARN's diagnostics,
#: ``User application exited with status 3``).
DRIVER_EXIT_TOKEN_REFUSED = 3
#: What such a refusal's message starts with (:func:`airflow_tfos.shared.storage.webhdfs_errors.translate`).
TOKEN_REFUSED = "HDFS refused the delegation token"
