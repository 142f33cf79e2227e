"""Errors of the Airflow side (hooks, operators, sensors, triggers, plugins), in one place.

Every one is a :class:`~airflow_tfos.shared.errors.TFoSError` (the package's base; the shared package's errors
are in :mod:`airflow_tfos.shared.errors`, the Spark side's in :mod:`airflow_tfos.runtime.errors`) and keeps
its built-in base: a ``ValueError`` is a setting or argument to change, a ``RuntimeError`` a failure of
spark-submit or of a backend, a :class:`YarnError` a failed conversation with YARN. Each error has this one
import path (the operators' own, which are Airflow's ``AirflowFailException`` too, are in
:mod:`airflow_tfos.operators.errors`).
"""

from __future__ import annotations

from collections.abc import Sequence

from airflow_tfos.shared.errors import TFoSError, WebHDFSConfigError

__all__ = [
    "ApplicationAlreadyRunningError",
    "ApplicationNotFoundError",
    "LocalBackendError",
    "ReportAddressError",
    "RunConfigError",
    "TFoSConfigError",
    "TFoSSubmitError",
    "UserCodeError",
    "YarnApplicationNotFound",
    "YarnAuthError",
    "YarnError",
    "YarnProtocolError",
    "YarnUnavailableError",
]


# Arguments and settings to change.


class RunConfigError(TFoSError, ValueError):
    """A parameter of a run cannot be used; the message says what to change."""


class UserCodeError(TFoSError, ValueError):
    """The user's code cannot be named or shipped; the message says what to change."""


class TFoSConfigError(TFoSError, ValueError):
    """Spark settings that cannot run a TF cluster (or do not fit the cluster); the message says what to change."""


class ReportAddressError(TFoSError, ValueError):
    """A report address that the app refuses to serve; the message says why."""


# Submitting and tracking applications.


class TFoSSubmitError(TFoSError, RuntimeError):
    """spark-submit failed or did not say which application it started."""


class LocalBackendError(TFoSError, RuntimeError):
    """The local backend (or a tag's lock, which YARN submissions take too) cannot do what was asked; the
    message says what to change."""


class ApplicationAlreadyRunningError(TFoSError, RuntimeError):
    """A live application already carries the tag: reattach to it instead of submitting another."""

    def __init__(self, tag: str, app_ids: Sequence[str]):
        self.tag, self.app_ids = tag, list(app_ids)
        super().__init__(
            f"application(s) {', '.join(self.app_ids)} with tag {tag!r} are still running: reattach to "
            "them, or kill them first"
        )


class ApplicationNotFoundError(TFoSError, LookupError):
    """No application with this id is known (to the tracker directory, or to the cluster)."""


# YARN's ResourceManager.


class YarnError(TFoSError):
    """Something went wrong talking to YARN."""


class YarnApplicationNotFound(YarnError):
    """The ResourceManager does not know this application id.

    :param app_id: the application id.
    :param address: the RM that answered.
    """

    def __init__(self, app_id: str, address: str) -> None:
        super().__init__(
            f"ResourceManager {address} knows no application {app_id}: check the id, or whether the RM has "
            "forgotten it (yarn.resourcemanager.max-completed-applications) or was restarted without recovery"
        )
        self.app_id = app_id
        self.address = address


class YarnAuthError(YarnError):
    """The ResourceManager refused the credentials (401/403), or none could be obtained."""


class YarnUnavailableError(YarnError):
    """No ResourceManager of the connection could be reached, or every one kept failing."""


class YarnProtocolError(YarnError):
    """The answer was not the ResourceManager's JSON (a proxy, a wrong address, a broken body)."""


class UntrustedLocalDirError(LocalBackendError):
    """A directory of the tracker (or above it) is owned or writable by another user, so what the hook reuses
    from it could be someone else's; the message names the directory and what to change."""


class HadoopConfError(WebHDFSConfigError, YarnError):
    """A Hadoop configuration file cannot be used; the message names the file and the property. It is both a
    WebHDFS settings error and a YARN error, as the files serve both."""
