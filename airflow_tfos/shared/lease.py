"""One writer per run directory, whichever Airflow worker runs the task: the run's lease.

``<run_dir>/lease.json`` says who started the application now working on the run::

    {"owner": "worker-3:/srv/airflow/tfos-local", "application_id": "local-...", "backend": "local",
     "acquired": 1790000000.0, "heartbeat": 1790000000.0, "duration_secs": 180.0}

The submitting task writes it (atomically, through the run directory's storage) right before it submits
and again with the new application's id. It is renewed by the driver's own heartbeat: while
``status.json`` is written after the lease was acquired, the later of the two heartbeats counts. A lease
lapses ``duration_secs`` after that heartbeat, and at once when the driver recorded that the run ended
(``SUCCEEDED``, ``FAILED``, ``STOPPED``). So ``duration_secs`` must cover the driver's start (spark-submit
until the first status.json) and a few missed heartbeats.

Before a submission, :func:`wait_for_lease` looks at the lease: a lease of this owner, a lapsed one or none
lets the submission go on; a live lease of another owner (another Airflow worker) is adopted when the backend
can see a live application of the run (its tag), else waited out, bounded by a timeout. A second writer is
never started while the lease lives. Pure Python: no Airflow, no TensorFlow.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from airflow_tfos.shared.errors import RunDirError
from airflow_tfos.shared.rundir import RUN_TERMINAL_STATES, RunDir

#: The lease's file in the run directory.
LEASE = "lease.json"
#: How long a lease lives after its last heartbeat (the driver's status.json beats every few seconds).
DEFAULT_LEASE_SECS = 180.0
#: How often a waiting task looks at the lease again.
LEASE_POLL_SECS = 5.0

log = logging.getLogger(__name__)

App = TypeVar("App")


class LeaseHeldError(RunDirError):
    """Another worker's application holds the run directory and could not be reached or outlived in time."""


@dataclass(frozen=True)
class Lease:
    """Who writes to a run directory.

    :param owner: the submitter (:func:`lease_owner`: host and tracker directory).
    :param application_id: the application it started (None while it submits).
    :param backend: the backend's name (``local``, ``yarn``).
    :param acquired: when it was taken.
    :param heartbeat: when it was last renewed by its owner.
    :param duration_secs: how long it lives after its last heartbeat.
    """

    owner: str
    application_id: str | None
    backend: str
    acquired: float
    heartbeat: float
    duration_secs: float = DEFAULT_LEASE_SECS

    def expires(self, status: dict[str, Any] | None = None) -> float | None:
        """When the lease lapses, given the run's status.json; None when the driver recorded the run's end."""
        beat = self.heartbeat
        if status and float(status.get("heartbeat") or 0) >= self.acquired:
            if status.get("state") in RUN_TERMINAL_STATES:
                return None
            beat = max(beat, float(status["heartbeat"]))
        return beat + self.duration_secs


def lease_owner(tracker_dir: str | None = None) -> str:
    """This worker's name as a lease owner: the host, and the local tracker directory when there is one."""
    host = socket.getfqdn()
    return f"{host}:{tracker_dir}" if tracker_dir else host


def read_lease(rundir: RunDir) -> Lease | None:
    """The run directory's lease, or None; RunDirError naming the file when it is not a lease."""
    path = rundir.path(LEASE)
    try:
        data = json.loads(rundir.storage.read_bytes(path))
        return Lease(**{key: data[key] for key in Lease.__dataclass_fields__ if key in data})
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise RunDirError.from_storage(
            exc, f"cannot read the lease {path}", "delete it if no application works on the run"
        ) from exc


def take_lease(
    rundir: RunDir,
    *,
    owner: str,
    backend: str,
    application_id: str | None = None,
    duration_secs: float = DEFAULT_LEASE_SECS,
    now: float | None = None,
) -> Lease:
    """Write (or renew) the lease for ``owner``; keep the acquisition time when it is ``owner``'s already."""
    now = time.time() if now is None else now
    current = read_lease(rundir)
    acquired = current.acquired if current and current.owner == owner and application_id is not None else now
    lease = Lease(owner, application_id, backend, acquired, now, float(duration_secs))
    try:
        rundir.storage.write_bytes(rundir.path(LEASE), json.dumps(asdict(lease), indent=1, sort_keys=True).encode())
    except OSError as exc:
        raise RunDirError.from_storage(exc, f"cannot write the lease {rundir.path(LEASE)}") from exc
    return lease


def live_lease_of_other(rundir: RunDir, owner: str, now: float | None = None) -> tuple[Lease, float] | None:
    """The lease and its expiry when another owner holds a live lease on the run directory, else None."""
    lease = read_lease(rundir)
    if lease is None or lease.owner == owner:
        return None
    expires = lease.expires(rundir.read_status())
    now = time.time() if now is None else now
    if expires is None or expires <= now:
        return None
    return lease, expires


def wait_for_lease(
    rundir: RunDir,
    *,
    owner: str,
    find_live: Callable[[], Sequence[App]],
    timeout_secs: float,
    poll_secs: float = LEASE_POLL_SECS,
    logger: logging.Logger = log,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
) -> App | None:
    """Wait until this owner may submit; return a live application of the run to adopt instead, if one shows.

    :param rundir: the run directory.
    :param owner: this worker (:func:`lease_owner`).
    :param find_live: the backend's live applications carrying the run's tag.
    :param timeout_secs: how long to wait for another owner's lease to lapse.
    :param poll_secs: how often to look again.
    :param logger: where to say who holds the lease and until when.
    :raises LeaseHeldError: the lease still lives after ``timeout_secs`` and its application cannot be seen.
    """
    deadline = clock() + timeout_secs
    said = None
    while True:
        held = live_lease_of_other(rundir, owner, clock())
        if held is None:
            return None
        lease, expires = held
        live = list(find_live())
        if live:
            logger.info("%s is held by %s (application %s): adopting %s", rundir.uri, lease.owner,
                        lease.application_id, live[0])  # fmt: skip
            return live[0]
        until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(expires))
        if clock() >= deadline:
            raise LeaseHeldError(
                f"{rundir.uri} is held by {lease.owner} (application {lease.application_id}, backend {lease.backend}) "
                f"until {until} and this worker cannot see that application: not starting a second writer; retry "
                f"later, or kill it from {lease.owner} and delete {rundir.path(LEASE)}"
            )
        if said != (lease.owner, lease.application_id):  # once per holder: the driver's heartbeat moves `until`
            said = (lease.owner, lease.application_id)
            logger.info(
                "%s is held by %s (application %s, backend %s) until %s, and that application is not visible from "
                "here: waiting for the lease to lapse (at most %.0f s)",
                rundir.uri,
                lease.owner,
                lease.application_id,
                lease.backend,
                until,
                timeout_secs,
            )
        sleep(max(0.01, min(poll_secs, expires - clock(), deadline - clock())))


def lease_timeout(ti: Any, default: float = DEFAULT_LEASE_SECS) -> float:
    """How long a task may wait for another worker's lease: its ``execution_timeout``, else ``default`` seconds."""
    timeout = getattr(getattr(ti, "task", None), "execution_timeout", None)
    return timeout.total_seconds() if timeout is not None else default
