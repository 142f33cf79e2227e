"""How a failed WebHDFS call is judged and told: transient (another attempt, or another namenode, may
succeed) or not, and the error a user reads, naming what to fix.

Every error made here quotes what failed through :func:`~airflow_tfos.shared.storage.kerberos.redact_credentials`:
``requests`` and ``urllib3`` put the request's URL in their exceptions' text, and a URL of a Kerberized
cluster carries ``delegation=<token>`` (or ``token=`` for the token operations). The caller raises these
errors without chaining the exception they were made from, so a traceback cannot quote it either."""

from __future__ import annotations

import errno

from airflow_tfos.shared.errors import WebHDFSError, WebHDFSServerError, WebHDFSUnavailableError
from airflow_tfos.shared.storage.kerberos import redact_credentials, redacted_error
from airflow_tfos.shared.storage.webhdfs_config import WebHDFSConfig

#: Remote exceptions that a retry, or the other namenode of an HA pair, may get past.
TRANSIENT_REMOTE = {"StandbyException", "RetriableException", "SafeModeException"}
#: Remote exceptions that mean the user may not do it.
DENIED_REMOTE = {"AccessControlException", "SecurityException", "AuthorizationException"}


def raise_for_server_error(response, *args, **kwargs):
    """A ``requests`` response hook: a 5xx answer raises :class:`WebHDFSServerError` (transient)."""
    if response.status_code >= 500:
        response.close()
        raise WebHDFSServerError(response.status_code, response.url.split("?", 1)[0])
    return response


def transient_reason(exc: BaseException) -> str | None:
    """Why ``exc`` is worth another attempt (``"timed out"``, ``"StandbyException"``...), or None when it is not."""
    import requests
    import urllib3
    from hdfs import HdfsError

    if isinstance(exc, WebHDFSServerError):
        return f"HTTP {exc.status}"
    if isinstance(exc, requests.exceptions.Timeout | urllib3.exceptions.TimeoutError):
        return "timed out"
    if isinstance(exc, requests.exceptions.SSLError):
        return None
    if isinstance(exc, urllib3.exceptions.HTTPError | requests.exceptions.ChunkedEncodingError):
        return "connection dropped"
    if isinstance(exc, requests.exceptions.ConnectionError | ConnectionError):
        text = str(exc)
        if "refused" in text.lower():
            return "connection refused"
        return "connection dropped" if "abort" in text.lower() or "reset" in text.lower() else "connection failed"
    if isinstance(exc, HdfsError) and getattr(exc, "exception", None) in TRANSIENT_REMOTE:
        return exc.exception
    if isinstance(exc, ValueError | KeyError):
        return f"an answer that is not WebHDFS JSON ({type(exc).__name__})"
    return None


def without_stack(message: str) -> str:
    """A RemoteException's message without the Java stack frames a datanode appends (``\\n\\tat ...``)."""
    return message.split("\n\tat ", 1)[0].strip()


def translate(exc: Exception, what: str, path: str, url: str, config: WebHDFSConfig) -> Exception:
    """The error to raise for a failure that is not transient: the built-in ``OSError`` a local file system
    would raise where there is one (not found, exists, permission), else :class:`WebHDFSError`; each names the
    fix, and none quotes a credential (raise it ``from None``: the exception it was made from may)."""
    import requests
    from hdfs import HdfsError

    url = redact_credentials(url)
    if isinstance(exc, requests.exceptions.SSLError):
        return WebHDFSError(
            f"WebHDFS {what} {path}: TLS with {url} failed ({redact_credentials(str(exc))}); set "
            "WebHDFSConfig.verify (the connection's 'verify' extra) to the CA bundle that signed the namenode's "
            "certificate"
        )
    if isinstance(exc, requests.exceptions.RequestException):  # an OSError too, whose text holds the URL
        return WebHDFSError(f"WebHDFS {what} {path} at {url} failed: {redacted_error(exc)}")
    if isinstance(exc, OSError):  # a local file's error (a download's target): no request in it
        return exc
    if not isinstance(exc, HdfsError):
        return WebHDFSError(f"WebHDFS {what} {path} at {url} failed: {redacted_error(exc)}")
    remote, message = getattr(exc, "exception", None), redact_credentials(without_stack(str(exc)))
    user = config.effective_user() or "(the Kerberos principal)"
    if remote == "FileNotFoundException":
        return FileNotFoundError(errno.ENOENT, f"no such file or directory on HDFS ({message})", path)
    if remote == "FileAlreadyExistsException":
        return FileExistsError(errno.EEXIST, f"already exists on HDFS ({message})", path)
    if remote == "InvalidToken" or "$InvalidToken: " in message:
        # A NameNode answers a bad token on an operation as a SecurityException whose text names the InvalidToken
        # ("Token has expired", "can't be found in cache"); on a token operation as InvalidToken itself
        return PermissionError(
            errno.EACCES,
            f"HDFS refused the delegation token of this process at namenode {url} ({message}): the token expired or "
            "was cancelled; the driver that obtained it renews it while the run lives (it needs a Kerberos login "
            "that can renew it, the token's renewer) and the token cannot outlive dfs.namenode.delegation.token."
            "max-lifetime",
            path,
        )
    if "HTTP ERROR 401" in message or "Authentication required" in message:
        return PermissionError(
            errno.EACCES,
            f"namenode {url} refused the Kerberos authentication of {what} (HTTP 401): {message[:200]}; check "
            "that the namenode's HTTP/<host> principal matches the host name in the address",
            path,
        )
    if message.startswith("Permission denied: ") and config.auth == "kerberos":
        # authenticated, and refused by HDFS's permissions: the NameNode's own words first
        return PermissionError(
            errno.EACCES,
            f"{message} (HDFS refused {what} at namenode {url}; it maps the Kerberos principal to that user with "
            "hadoop.security.auth_to_local): grant that user access (hdfs dfs -chmod/-chown/-setfacl) or "
            "authenticate as a principal that has it",
            path,
        )
    if "is not allowed to impersonate" in message:
        return PermissionError(
            errno.EACCES,
            f"{message} (HDFS refused {what} as user {user} at namenode {url}): the cluster's "
            "hadoop.proxyuser.<user>.hosts and .groups must let the authenticated user act for that one, or drop "
            "the impersonation (WebHDFSConfig.user / the connection's proxy user)",
            path,
        )
    if remote in DENIED_REMOTE or "Authentication failure" in message:
        fix = (
            "get a Kerberos ticket (kinit) or fix the principal"
            if config.auth == "kerberos" or remote is None
            else "grant the user access (hdfs dfs -chmod/-chown/-setfacl) or run as another user "
            "(WebHDFSConfig.user / the webhdfs connection's login)"
        )
        return PermissionError(
            errno.EACCES, f"HDFS refused {what} to user {user} at namenode {url}: {message}; {fix}", path
        )
    return WebHDFSError(f"WebHDFS {what} {path} at {url} failed: {remote or 'error'}: {message}")


def unavailable(
    what: str, path: str, failures: list[tuple[str, str]], config: WebHDFSConfig
) -> WebHDFSUnavailableError:
    """The error when every attempt at every namenode failed transiently: what was tried, and what to check."""
    seen: dict[str, str] = {}
    for url, reason in failures:
        seen[url] = reason
    tried = redact_credentials("; ".join(f"{url}: {reason}" for url, reason in seen.items()))
    if all(r.startswith("connection") or r == "timed out" for r in seen.values()):
        where = (
            config.origin
            or "AIRFLOW_TFOS_WEBHDFS 'namenodes', the webhdfs:// URI, or the webhdfs connection's host and port"
        )
        fix = (
            f"check the namenodes' WebHDFS addresses ({where}; WebHDFS listens on dfs.namenode.http-address, 9870 "
            "by default) and that the namenodes are up"
        )
    elif all(r in TRANSIENT_REMOTE for r in seen.values()):
        fix = "no namenode is active: list every namenode of the HA pair, or wait for the failover to finish"
    else:
        fix = "check that these addresses are WebHDFS endpoints and that the namenodes are healthy"
    return WebHDFSUnavailableError(
        f"WebHDFS {what} {path}: no namenode answered after {len(failures)} attempt(s) "
        f"(retries={config.retries}, deadline={config.deadline:g}s); tried {tried}"
        + (f" (addresses from {config.origin})" if config.origin else "")
        + f". To fix: {fix}"
    )
