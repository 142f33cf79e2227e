"""The WebHDFS delegation token of a run's TF nodes, kept by the driver: see
:class:`~airflow_tfos.shared.storage.tokens.TokenKeeper` (shared with the Airflow side, which keeps the token
it hands a driver that has no Kerberos login of its own)."""

from __future__ import annotations

from airflow_tfos.shared.storage.tokens import MIN_RENEW_WAIT, TokenKeeper

__all__ = ["MIN_RENEW_WAIT", "TokenKeeper"]
