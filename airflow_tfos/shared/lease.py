"""One writer per run directory, whichever Airflow worker runs the task: the run's lease.

``<run_dir>/lease.json`` says who started the application now working on the run::

    {"owner": "worker-3:4242:9f2c41d07ab3:/srv/airflow/tfos-local", "application_id": "local-...",
     "backend": "local", "acquired": 1790000000.0, "heartbeat": 1790000000.0, "duration_secs": 180.0}

The owner is one task's process (:func:`lease_owner`: host, pid, a random token), so two tasks on one host
never take each other's lease for their own. The submitting task writes it (atomically, through the run
directory's storage) right before it submits and again with the new application's id.

Whether a lease still lives is judged by its reader alone, on the reader's own monotonic clock
(:class:`LeaseWatch`): the times in the lease and in status.json come from other machines' clocks and are
never compared with the reader's. A lease lives while the reader sees it or the driver's status.json change
(the holder rewrites the lease; the driver's heartbeat rewrites status.json every few seconds), and lapses once
neither changed for ``duration_secs`` (at most :data:`MAX_LEASE_SECS`), and at once when the driver recorded
that the run ended (``SUCCEEDED``, ``FAILED``, ``STOPPED``) in a status.json that the storage wrote after
the lease (both files' modification times come from the storage's one clock). So ``duration_secs`` must
cover the driver's start (spark-submit until the first status.json) and a few missed heartbeats; a reader
that first looks at a lease waits that long before it counts it lapsed.

Every field of a lease is checked when it is read: a lease that is not one (not JSON, a field missing or of
the wrong type, a duration that is not a positive number) is a :class:`~airflow_tfos.shared.errors.RunDirError`
naming the file and the field, never taken for lapsed (it may be a live writer's); a duration above
:data:`MAX_LEASE_SECS` counts as that maximum. Lease files written before the owner held a pid and token read
as before.

Before a submission, :func:`wait_for_lease` looks at the lease: a lease of this owner, a lapsed one or none
lets the submission go on; so does a lease naming an application that the backend knows has ended; a live lease
of another owner (another task) is adopted when the backend can see a live application of the run (its tag), else
waited out, bounded by a timeout. A second writer is never
started while the lease lives. Pure Python: no Airflow, no TensorFlow.
"""

from __future__ import annotations

import json
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from airflow_tfos.shared.errors import LeaseHeldError, RunDirError
from airflow_tfos.shared.rundir import RUN_TERMINAL_STATES, STATUS, RunDir

#: The lease's file in the run directory.
LEASE = "lease.json"
#: How long a lease lives after its last heartbeat (the driver's status.json beats every few seconds).
DEFAULT_LEASE_SECS = 180.0
#: The longest a lease lives after its last change, whatever its file asks for.
MAX_LEASE_SECS = 3600.0
#: The longest owner a lease file may name.
_MAX_OWNER_CHARS = 1000
#: How often a waiting task looks at the lease again.
LEASE_POLL_SECS = 5.0

log = logging.getLogger(__name__)

App = TypeVar("App")


@dataclass(frozen=True)
class Lease:
    """Who writes to a run directory.

    :param owner: the submitter (:func:`lease_owner`: host, pid, token, and the local tracker directory).
    :param application_id: the application it started (None while it submits).
    :param backend: the backend's name (``local``, ``yarn``).
    :param acquired: when it was taken, by its owner's clock (for people: no reader compares it with its own).
    :param heartbeat: when it was last renewed, by its owner's clock (for people, as ``acquired``).
    :param duration_secs: how long it lives after its last change (above :data:`MAX_LEASE_SECS`: that long).
    """

    owner: str
    application_id: str | None
    backend: str
    acquired: float
    heartbeat: float
    duration_secs: float = DEFAULT_LEASE_SECS

    @property
    def lifetime(self) -> float:
        """How long the lease lives after its last change: its duration, bounded by :data:`MAX_LEASE_SECS`."""
        return min(self.duration_secs, MAX_LEASE_SECS)

    @classmethod
    def from_json(cls, data: Any) -> Lease:
        """The lease that ``data`` (lease.json, parsed) holds; ValueError naming the field that is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a lease is a JSON object, not {type(data).__name__}")
        for key in ("owner", "backend", "acquired", "heartbeat"):
            if key not in data:
                raise ValueError(f"the field {key!r} is missing")
        fields = {
            "owner": _text(data, "owner", _MAX_OWNER_CHARS),
            "application_id": None if data.get("application_id") is None else _text(data, "application_id", 200),
            "backend": _text(data, "backend", 50),
            "acquired": _number(data, "acquired"),
            "heartbeat": _number(data, "heartbeat"),
            "duration_secs": _number(data, "duration_secs") if "duration_secs" in data else DEFAULT_LEASE_SECS,
        }
        if fields["duration_secs"] <= 0:
            raise ValueError(f"duration_secs must be above 0 s, not {fields['duration_secs']!r}")
        return cls(**fields)


def _text(data: dict[str, Any], key: str, max_chars: int) -> str:
    value = data[key]
    if not isinstance(value, str) or not 0 < len(value) <= max_chars or not value.isprintable():
        raise ValueError(f"the field {key!r} must be 1-{max_chars} printable characters, not {str(value)[:80]!r}")
    return value


def _number(data: dict[str, Any], key: str) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"the field {key!r} must be a finite number, not {str(value)[:80]!r}")
    return float(value)


_process_token: tuple[int, str] = (0, "")


def lease_owner(tracker_dir: str | None = None) -> str:
    """This task's process as a lease owner: host, pid and a random token drawn once per process (again in a
    forked child), and the local tracker directory when there is one."""
    global _process_token
    if _process_token[0] != os.getpid():
        _process_token = (os.getpid(), secrets.token_hex(6))
    owner = f"{socket.getfqdn()}:{_process_token[0]}:{_process_token[1]}"
    return f"{owner}:{tracker_dir}" if tracker_dir else owner


def read_lease(rundir: RunDir) -> Lease | None:
    """The run directory's lease, or None; RunDirError naming the file (and the field) when it is not a lease."""
    path = rundir.path(LEASE)
    try:
        lease = Lease.from_json(json.loads(rundir.storage.read_bytes(path)))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        raise RunDirError.from_storage(
            exc, f"cannot read the lease {path}", "delete it if no application works on the run"
        ) from exc
    return lease


def take_lease(
    rundir: RunDir,
    *,
    owner: str,
    backend: str,
    application_id: str | None = None,
    duration_secs: float = DEFAULT_LEASE_SECS,
    now: float | None = None,
) -> Lease:
    """Write (or renew) the lease for ``owner``; keep the acquisition time when it is ``owner``'s already.

    :raises ValueError: ``duration_secs`` is not above 0 and at most :data:`MAX_LEASE_SECS`.
    """
    if not 0 < duration_secs <= MAX_LEASE_SECS:
        raise ValueError(f"a lease lasts more than 0 and at most {MAX_LEASE_SECS:.0f} s, not {duration_secs!r}")
    now = time.time() if now is None else now
    current = read_lease(rundir)
    acquired = current.acquired if current and current.owner == owner and application_id is not None else now
    lease = Lease(owner, application_id, backend, acquired, now, float(duration_secs))
    try:
        rundir.storage.write_bytes(rundir.path(LEASE), json.dumps(asdict(lease), indent=1, sort_keys=True).encode())
    except OSError as exc:
        raise RunDirError.from_storage(exc, f"cannot write the lease {rundir.path(LEASE)}") from exc
    return lease


class LeaseWatch:
    """What one reader has seen of a run directory's lease, timed on the reader's own monotonic clock.

    A lease lives while what is seen of it changes (the lease itself, the driver's heartbeat and state in
    status.json), and lapses once nothing changed for its :attr:`Lease.lifetime`; at once when status.json
    records the run's end and the storage wrote it after the lease. Keep one watch across the looks of one wait.
    """

    def __init__(self) -> None:
        self._seen: tuple[Any, ...] | None = None
        self._since = 0.0

    def remaining(self, lease: Lease, status: Any, *, status_after_lease: bool, now: float) -> float:
        """Seconds until ``lease`` lapses as this reader sees it (0: lapsed).

        :param lease: the lease as read now.
        :param status: status.json as read now (None when there is none).
        :param status_after_lease: whether the storage wrote status.json after the lease.
        :param now: the reader's monotonic clock.
        """
        status = status if isinstance(status, dict) else {}
        if status_after_lease and status.get("state") in RUN_TERMINAL_STATES:
            return 0.0
        seen = (lease, repr(status.get("heartbeat")), repr(status.get("state")))
        if seen != self._seen:
            self._seen, self._since = seen, now
        return max(0.0, self._since + lease.lifetime - now)


def _modified(rundir: RunDir, name: str) -> float | None:
    """When the storage last wrote ``name`` of the run directory, by its own clock (None: not known)."""
    try:
        found = rundir.storage.list(rundir.path(name))
    except Exception as exc:  # any storage: not knowing only delays a lapse
        log.debug("cannot tell when %s was written: %s", rundir.path(name), exc)
        return None
    return found[0].modified if len(found) == 1 else None


def live_lease_of_other(
    rundir: RunDir, owner: str, watch: LeaseWatch | None = None, now: float | None = None
) -> tuple[Lease, float] | None:
    """The lease and the seconds it still lives when another owner holds a live lease on the run directory,
    else None.

    :param watch: what this reader saw of the lease before (None: this is the first look).
    :param now: the reader's monotonic clock (default: ``time.monotonic()``).
    """
    lease = read_lease(rundir)
    if lease is None or lease.owner == owner:
        return None
    status = rundir.read_status()
    written = _modified(rundir, STATUS) if status else None
    taken = _modified(rundir, LEASE) if written is not None else None
    after = written is not None and taken is not None and written > taken
    watch = watch or LeaseWatch()
    remaining = watch.remaining(lease, status, status_after_lease=after, now=time.monotonic() if now is None else now)
    return (lease, remaining) if remaining > 0 else None


def wait_for_lease(
    rundir: RunDir,
    *,
    owner: str,
    find_live: Callable[[], Sequence[App]],
    timeout_secs: float,
    ended: Callable[[Lease], bool] | None = None,
    poll_secs: float = LEASE_POLL_SECS,
    logger: logging.Logger = log,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> App | None:
    """Wait until this owner may submit; return a live application of the run to adopt instead, if one shows.

    :param rundir: the run directory.
    :param owner: this task (:func:`lease_owner`).
    :param find_live: the backend's live applications carrying the run's tag.
    :param timeout_secs: how long to wait for another owner's lease to lapse.
    :param ended: whether this reader's backend knows that the application the lease names has ended (its
        writer is gone, so the lease lapses at once: a retry after a driver that died without recording its end
        does not wait the lease out). Only a positive answer counts: an application it cannot see does not.
    :param poll_secs: how often to look again.
    :param logger: where to say who holds the lease and for how long it still lives.
    :param clock: this reader's monotonic clock.
    :raises LeaseHeldError: the lease still lives after ``timeout_secs`` and its application cannot be seen.
    """
    deadline = clock() + timeout_secs
    watch = LeaseWatch()
    said = None
    while True:
        held = live_lease_of_other(rundir, owner, watch, clock())
        if held is None:
            return None
        lease, remaining = held
        if lease.application_id and ended is not None and ended(lease):
            logger.info("%s was held by %s for application %s, which has ended: the lease lapses", rundir.uri,
                        lease.owner, lease.application_id)  # fmt: skip
            return None
        live = list(find_live())
        if live:
            logger.info("%s is held by %s (application %s): adopting %s", rundir.uri, lease.owner,
                        lease.application_id, live[0])  # fmt: skip
            return live[0]
        if clock() >= deadline:
            raise LeaseHeldError(
                f"{rundir.uri} is held by {lease.owner} (application {lease.application_id}, backend {lease.backend}), "
                f"which changed less than {lease.lifetime:.0f} s ago, and this worker cannot see that application: "
                f"not starting a second writer; retry later, or kill it from {lease.owner} and delete "
                f"{rundir.path(LEASE)}"
            )
        if said != (lease.owner, lease.application_id):  # once per holder: the driver's heartbeat moves the lapse
            said = (lease.owner, lease.application_id)
            if lease.duration_secs > MAX_LEASE_SECS:
                logger.warning("the lease %s asks for %.0f s: counted as %.0f s", rundir.path(LEASE),
                               lease.duration_secs, MAX_LEASE_SECS)  # fmt: skip
            logger.info(
                "%s is held by %s (application %s, backend %s), which lapses in %.0f s unless it changes, and that "
                "application is not visible from here: waiting for the lease to lapse (at most %.0f s)",
                rundir.uri,
                lease.owner,
                lease.application_id,
                lease.backend,
                remaining,
                timeout_secs,
            )
        sleep(max(0.01, min(poll_secs, remaining, deadline - clock())))


def lease_timeout(ti: Any, default: float = DEFAULT_LEASE_SECS) -> float:
    """How long a task may wait for another worker's lease: its ``execution_timeout``, else ``default`` seconds."""
    timeout = getattr(getattr(ti, "task", None), "execution_timeout", None)
    return timeout.total_seconds() if timeout is not None else default
