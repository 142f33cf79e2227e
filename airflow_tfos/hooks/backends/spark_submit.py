"""The spark-submit of a training application, for every backend: the Spark provider's hook, read strictly.

A backend turns a :class:`~airflow_tfos.hooks.backends.base.Submission` into a spark-submit with
:func:`spark_submit_for` (adding its deploy mode and what it ships) and keeps the secrets off the command
line with :func:`private_properties`.
"""

from __future__ import annotations

import base64
import os
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_tfos.hooks.backends.base import Submission, private_dir
from airflow_tfos.hooks.errors import TFoSSubmitError
from airflow_tfos.hooks.spark_conf import _SUBMITTED, parse_application_id, properties_text


class TrainingSubmit(SparkSubmitHook):
    """SparkSubmitHook that reads the YARN application id strictly and can add ``--load-spark-defaults``.

    The connection's ``keytab`` extra (base64, the Spark provider's convention) is written into ``secrets_dir``
    (private, :func:`private_dir`), readable by this user only, under a name of its own; :attr:`own_keytab` names
    that file, for the backend to delete once spark-submit no longer needs it. (The provider itself writes it
    into the machine's temporary directory with the default umask, where other users could read it.)
    An extra ``keytab`` that is the path of an existing file is used as it is, as the ``webhdfs`` connection's.
    """

    def __init__(self, *, load_spark_defaults: bool = False, secrets_dir: str | Path | None = None, **kwargs: Any):
        self._secrets_dir = secrets_dir  # read while the provider resolves the connection, in super().__init__
        self.own_keytab: str | None = None
        super().__init__(**kwargs)
        self.load_spark_defaults = load_spark_defaults
        self.application_id: str | None = None

    def _create_keytab_path_from_base64_keytab(self, base64_keytab: str, principal: str | None) -> str:
        if os.path.isabs(base64_keytab) and os.path.isfile(base64_keytab):
            return base64_keytab
        try:
            keytab = base64.b64decode(base64_keytab, validate=True)
        except ValueError as exc:
            raise TFoSSubmitError(
                f"the keytab extra of connection {self._conn_id!r} is neither base64 (the Spark provider's "
                f"convention: base64 -w0 your.keytab) nor the path of a file: {exc}"
            ) from None
        folder = private_dir(self._secrets_dir or _default_secrets_dir())
        path = folder / f"{uuid.uuid4().hex}.keytab"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(keytab)
        self.own_keytab = str(path)
        return self.own_keytab

    def submit(self, application: str = "", **kwargs: Any):
        """spark-submit; with a proxy user, as the connection's principal logged in from its keytab into a private
        ticket cache (:func:`ticket_cache_login`): Spark takes ``--proxy-user`` with a ticket, not with
        ``--principal``/``--keytab``, so the keytab stays on this machine."""
        principal, keytab = self._connection["principal"], self._connection["keytab"]
        if not (self._proxy_user and (principal or keytab)):
            return super().submit(application, **kwargs)
        if not (principal and keytab):
            raise TFoSSubmitError(
                f"connection {self._conn_id!r} names a {'principal' if principal else 'keytab'} but no "
                f"{'keytab' if principal else 'principal'}: the proxy user {self._proxy_user!r} is impersonated by "
                "the principal logged in from its keytab; give both extras, or neither (the worker's ticket cache)"
            )
        cache = ticket_cache_login(principal, keytab, private_dir(self._secrets_dir or _default_secrets_dir()))
        self._connection["principal"] = self._connection["keytab"] = None  # no --principal/--keytab
        try:
            env = dict(kwargs.pop("env", None) or os.environ)
            env["KRB5CCNAME"] = f"FILE:{cache}"
            return super().submit(application, env=env, **kwargs)
        finally:
            cache.unlink(missing_ok=True)

    def forget_keytab(self) -> None:
        """Delete the keytab file this hook wrote (once spark-submit has ended), if any."""
        if self.own_keytab:
            Path(self.own_keytab).unlink(missing_ok=True)
            self.own_keytab = None

    @property
    def master(self) -> str:
        return self._connection["master"]

    def _build_spark_common_args(self) -> list[str]:
        args = super()._build_spark_common_args()
        if self._properties_file and self.load_spark_defaults:
            args.append("--load-spark-defaults")
        return args

    def _process_spark_submit_log(self, itr) -> None:
        def watch(lines):
            for line in lines:
                found = parse_application_id(line)
                if found and (self.application_id is None or _SUBMITTED.search(line)):
                    self.application_id = found
                yield line

        super()._process_spark_submit_log(watch(itr))

    def command(self, application: str) -> list[str]:
        return self._build_spark_submit_command(application)


def _default_secrets_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"airflow-tfos-{os.getuid()}"


def ticket_cache_login(principal: str, keytab: str, folder: Path, *, kinit: str = "kinit") -> Path:
    """Obtain ``principal``'s ticket from ``keytab`` into a new ticket cache in ``folder`` (private), with MIT's
    ``kinit`` (as ``airflow kerberos`` does); return the cache's path, for the caller to delete.

    :raises TFoSSubmitError: naming the principal, the keytab and what kinit said (first).
    """
    import shutil
    import subprocess

    found = shutil.which(kinit)
    if found is None:
        raise TFoSSubmitError(
            f"no {kinit} on this worker's PATH: logging {principal} in from {keytab} for spark-submit --proxy-user "
            "needs MIT Kerberos's kinit (Debian: apt-get install krb5-user)"
        )
    cache = folder / f"{uuid.uuid4().hex}.ccache"
    done = subprocess.run(
        [found, "-k", "-t", keytab, "-c", f"FILE:{cache}", principal],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "KRB5CCNAME": f"FILE:{cache}"},
    )
    if done.returncode != 0:
        cache.unlink(missing_ok=True)
        said = (done.stderr or done.stdout).strip().splitlines()
        raise TFoSSubmitError(
            f"{said[-1] if said else f'kinit exited with {done.returncode}'}: cannot log {principal} in from "
            f"keytab {keytab} for spark-submit --proxy-user; check that the keytab holds that principal's current "
            "key (klist -kt), that the KDC answers, and that this machine's clock is in time"
        )
    return cache


def spark_submit_for(
    submission: Submission,
    *,
    deploy_mode: str,
    properties_file: str | None,
    py_files_first: Sequence[str] = (),
    more_files: Sequence[str] = (),
    secrets_dir: str | Path | None = None,
) -> TrainingSubmit:
    """The spark-submit of ``submission`` in ``deploy_mode``.

    :param submission: the application.
    :param deploy_mode: ``cluster`` or ``client``.
    :param properties_file: the properties file to use (:func:`private_properties`).
    :param py_files_first: ``--py-files`` before the submission's (e.g. the runtime zip).
    :param more_files: ``--files`` after the user's (e.g. the GPU discovery script).
    :param secrets_dir: where the connection's keytab is written for spark-submit (:class:`TrainingSubmit`).
    """
    py_files = [*py_files_first, *submission.py_files]
    files = [f for f in [submission.files, *more_files] if f]
    return TrainingSubmit(
        conn_id=submission.spark_conn_id,
        conf=dict(submission.conf),
        py_files=",".join(py_files) or None,
        archives=submission.archives or None,
        files=",".join(files) or None,
        name=submission.name,
        application_args=list(submission.args),
        spark_binary=submission.spark_binary,
        deploy_mode=deploy_mode,
        properties_file=properties_file,
        load_spark_defaults=submission.load_spark_defaults,
        secrets_dir=secrets_dir,
        proxy_user=submission.proxy_user,
    )


def private_properties(base_file: str | None, secret_conf: Mapping[str, str], folder: str | Path) -> str | None:
    """A properties file readable only by this user in ``folder``: ``base_file`` (the user's, if any) plus
    ``secret_conf``; ``base_file`` itself when there is no secret (None if neither)."""
    if not secret_conf:
        return base_file
    base = Path(base_file).read_text() + "\n" if base_file else ""
    folder = private_dir(folder)
    path = folder / f"{uuid.uuid4().hex}.properties"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(base + properties_text(secret_conf))
    return str(path)
