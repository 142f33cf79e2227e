"""The WebHDFS delegation token a :class:`~airflow_tfos.hooks.tfos.TFoSHook` hands the driver it submits to YARN,
where Hadoop's files do not say Kerberos but the run directory's WebHDFS does (docs/kerberos.md: on a secure YARN
the driver uses the application's own token from YARN instead)."""

from __future__ import annotations

from airflow_tfos.hooks.hadoop_conf import hadoop_conf


class DriverTokenMixin:
    """Obtain, hand off and cancel the driver's token; the hook holds ``webhdfs_conn_id`` and ``log``."""

    _driver_token = None  # a TokenKeeper

    def _obtain_driver_token(self, run_dir: str, name: str) -> str | None:
        """A new WebHDFS delegation token for the driver when ``run_dir`` is on a Kerberized WebHDFS, obtained
        with this hook's Kerberos login (the webhdfs connection's) and renewed from now on; else None."""
        from airflow.sdk.log import mask_secret

        from airflow_tfos.hooks.run_dir import RunDirHook
        from airflow_tfos.hooks.webhdfs_connection import DEFAULT_CONN_ID, webhdfs_config_from_connection
        from airflow_tfos.shared.errors import WebHDFSConfigError
        from airflow_tfos.shared.storage.tokens import TokenKeeper

        if "://" not in run_dir or run_dir.startswith("file://"):
            return None
        try:
            config = webhdfs_config_from_connection(self.webhdfs_conn_id or DEFAULT_CONN_ID)
        except WebHDFSConfigError:  # no HDFS settings here: the cluster's own reach the driver
            return None
        if getattr(config, "auth", None) != "kerberos":
            return None
        hadoop = hadoop_conf()
        if hadoop is not None and hadoop.auth() == "kerberos":
            self.log.info(
                "the run directory is on Kerberized HDFS and Hadoop's files (%s) say kerberos: spark-submit obtains "
                "the application's HDFS delegation tokens, which YARN renews and cancels; the driver reaches WebHDFS "
                "with them",
                hadoop.source("hadoop.security.authentication"),
            )
            return None
        storage = RunDirHook(run_dir, webhdfs_conn_id=self.webhdfs_conn_id).storage
        if not TokenKeeper.uses_kerberos(storage):
            return None
        self.end_driver_token()
        self._driver_token = TokenKeeper(storage, f"driver of {name}").start()
        mask_secret(self._driver_token.token)
        return self._driver_token.token

    @property
    def holds_driver_token(self) -> bool:
        """Whether this hook renews a delegation token it handed the driver."""
        return self._driver_token is not None

    def hand_off_driver_token(self) -> str | None:
        """Stop renewing the driver's token without cancelling it; return it sealed with Airflow's Fernet key
        (:func:`seal_token`) for the trigger a task defers to, which renews and cancels it from then on. None
        when the driver was given none, or when no Fernet key is configured (the token would reach the database
        in clear: the hook keeps it, and the task waits in the worker)."""
        if self._driver_token is None or self._driver_token.token is None:
            return None
        sealed = seal_token(self._driver_token.token)
        if sealed is None:
            return None
        keeper, self._driver_token = self._driver_token, None
        keeper.hand_off()
        return sealed

    def end_driver_token(self) -> None:
        """Cancel the driver's delegation token, if this hook handed it one (idempotent)."""
        keeper, self._driver_token = self._driver_token, None
        if keeper is not None:
            keeper.stop()


def seal_token(token: str) -> str | None:
    """``token`` encrypted with Airflow's Fernet key (``[core] fernet_key``), for a trigger's arguments, which
    Airflow stores in its database as they are; None when no key is configured (or Airflow's core is absent)."""
    try:
        from airflow.models.crypto import get_fernet
    except ImportError:
        return None
    fernet = get_fernet()
    if not getattr(fernet, "is_encrypted", False):
        return None
    return fernet.encrypt(token.encode()).decode()


def unseal_token(sealed: str) -> str:
    """The token :func:`seal_token` encrypted."""
    from airflow.models.crypto import get_fernet

    return get_fernet().decrypt(sealed.encode()).decode()
