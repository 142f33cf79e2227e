"""Errors of the operators that are not the hooks' (:mod:`airflow_tfos.hooks.errors`): each is a
:class:`~airflow_tfos.shared.errors.TFoSError` too."""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowFailException

from airflow_tfos.hooks.errors import RunConfigError


class RenderedArgumentError(RunConfigError, AirflowFailException):
    """A rendered argument cannot be used: the task fails without retries, as a retry renders the same value."""
