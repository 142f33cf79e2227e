"""A WebHDFS delegation token for the processes of one run that hold no Kerberos ticket: obtained, renewed and
cancelled by whoever has a Kerberos login (the driver, or the hook that submitted it).

On a Kerberized cluster the executors hold no Kerberos ticket (YARN gives their containers delegation
tokens, not tickets), so the TF nodes could not authenticate to WebHDFS with SPNEGO. Before the TF cluster
starts, the driver, which has a Kerberos login (its ticket cache, or a keytab), obtains an HDFS delegation
token for the run directory's namenodes and hands it to each node process on its stdin with its TF_CONFIG
(never in the run directory, the spec, events, logs, the environment or a command line). The nodes send it
as ``delegation=`` on every WebHDFS call. While the run lives, the driver renews the token when half of its
remaining lifetime has passed; at the end it cancels it.

A driver that was handed a token by the hook that submitted it (YARN cluster mode, where the driver has no
Python Kerberos login: :data:`~airflow_tfos.shared.storage.kerberos.SUBMITTED_TOKEN_ENV`) uses that token
instead: the hook (or the trigger it deferred to) renews and cancels it, so the driver's keeper only lends it.
The same class keeps the token on the Airflow side: :meth:`TokenKeeper.hand_off` stops renewing without
cancelling (the deferred trigger takes over, :meth:`TokenKeeper.adopt`).
"""

from __future__ import annotations

import logging
import threading
import time

from airflow_tfos.shared.storage.kerberos import delegation_token, keep_out_of_logs

log = logging.getLogger(__name__)

#: Renew no more often than this (seconds), however short the namenode's renew interval is.
MIN_RENEW_WAIT = 0.2


class TokenKeeper:
    """Obtain, renew and cancel the delegation token of one run.

    :param storage: the run directory's :class:`~airflow_tfos.shared.storage.webhdfs_client.WebHDFSStorage`
        (Kerberos-authenticated).
    :param what: names the run in logs.
    """

    @staticmethod
    def uses_kerberos(storage) -> bool:
        """Whether ``storage`` is WebHDFS with Kerberos (its processes without a ticket need a token)."""
        config = getattr(storage, "config", None)
        return config is not None and getattr(config, "auth", None) == "kerberos"

    def __init__(self, storage, what: str):
        self.storage = storage
        self.what = what
        self.token: str | None = None
        self.expires = 0.0
        self.renewals = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: the token is this process's own (handed over by whoever started it), which renews and cancels it
        self.borrowed = False

    @classmethod
    def for_run_dir(cls, run_dir: str | None, what: str) -> TokenKeeper | None:
        """A started keeper when ``run_dir`` is on WebHDFS with Kerberos; None otherwise (nothing to hand over)."""
        if not run_dir or "://" not in run_dir or run_dir.startswith("file://"):
            return None
        from airflow_tfos.shared.storage import storage_for

        storage = storage_for(run_dir)
        return cls(storage, what).start() if cls.uses_kerberos(storage) else None

    @classmethod
    def for_hdfs(cls, uri: str | None, what: str) -> TokenKeeper | None:
        """A started keeper for ``uri`` (see :meth:`for_run_dir`) or, when ``uri`` is not on HDFS, for the
        namenodes of ``AIRFLOW_TFOS_WEBHDFS`` when those use Kerberos (what a program's own ``hdfs://``
        paths reach); None when neither uses Kerberos."""
        keeper = cls.for_run_dir(uri, what)
        if keeper is not None:
            return keeper
        from airflow_tfos.shared.storage.webhdfs_config import WebHDFSConfig

        config = WebHDFSConfig.from_env()
        if config is None or config.auth != "kerberos" or not config.namenodes:
            return None
        return cls.for_run_dir("hdfs:///", what)

    def start(self) -> TokenKeeper:
        own = delegation_token()
        if own:  # handed to this process (by the submitting hook): its giver renews and cancels it
            self.token, self.borrowed = own, True
            log.info("%s: the TF nodes get the WebHDFS delegation token this driver was given", self.what)
            return self
        return self._keep(self.storage.get_delegation_token(), "obtained a WebHDFS delegation token")

    def adopt(self, token: str) -> TokenKeeper:
        """Keep renewing ``token``, which another keeper handed off (:meth:`hand_off`); cancel it in :meth:`stop`."""
        return self._keep(token, "renewing the WebHDFS delegation token of the run")

    def _keep(self, token: str, doing: str) -> TokenKeeper:
        keep_out_of_logs(token)
        self.token = token
        self.expires = self.storage.renew_delegation_token(token)
        log.info(
            "%s: %s (expires in %.0f s; renewed while the run lives)", self.what, doing, self.expires - time.time()
        )
        self._renew_in_background()
        return self

    def hand_off(self) -> str | None:
        """Stop renewing, without cancelling; return the token for the keeper that takes over (:meth:`adopt`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        token, self.token = self.token, None
        return token

    def _renew_in_background(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name="delegation-token-renewer", daemon=True)
        self._thread.start()

    def _renew_loop(self) -> None:
        while not self._stop.wait(max(MIN_RENEW_WAIT, (self.expires - time.time()) / 2)):
            try:
                self.expires = self.storage.renew_delegation_token(self.token)
                self.renewals += 1
                log.debug("%s: delegation token renewed, expires in %.1f s", self.what, self.expires - time.time())
            except Exception as exc:  # the nodes meet the expired token and fail with what it says
                log.error(
                    "%s: cannot renew the WebHDFS delegation token of the TF nodes (%s); they lose access to HDFS "
                    "when it expires in %.0f s",
                    self.what,
                    exc,
                    self.expires - time.time(),
                )
                if time.time() > self.expires:
                    return

    def stop(self) -> None:
        """Stop renewing and cancel the token (idempotent; a failed cancel is logged, the token then expires)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self.token is None:
            return
        token, self.token = self.token, None
        if self.borrowed:
            return
        try:
            self.storage.cancel_delegation_token(token)
            log.info("%s: WebHDFS delegation token cancelled (%d renewal(s))", self.what, self.renewals)
        except Exception as exc:
            log.warning("%s: cannot cancel the WebHDFS delegation token (%s); it expires on its own", self.what, exc)
