"""The run directory: the only state shared by the Airflow side and the Spark side of a training run.

Pure Python (no Airflow, no Spark, no TensorFlow), used by both halves. Everything in it is JSON or
TensorFlow's own files, never pickles, and everything that a watcher may read is published
atomically, so a sensor never sees half of anything::

    <run_dir>/spec.json            what to train, with its hash
    <run_dir>/owner.json           the Dag, task and run that last submitted it (who may read its report)
    <run_dir>/fingerprint.json     the input's listing and the code's hash when the run was submitted
    <run_dir>/status.json          state, application id, attempt, step, heartbeat, error
    <run_dir>/checkpoints/         ckpt-<step>/ directories, and manifest.json naming the latest complete one
    <run_dir>/feeds/<id>.json      a feed request; <id>.done.json once it has been served
    <run_dir>/control/stop.json    a graceful stop request, for one application (or for those started before it)
    <run_dir>/export/              the final SavedModel, with _SUCCESS (spec hash, fingerprint, step, metrics)
    <run_dir>/previous/<time>/     export/, checkpoints/ and fingerprint.json of an earlier input or code
    <run_dir>/events/              one JSON file per event, and batch files of folded ones (shared.event_log)
    <run_dir>/progress.json        the chief's training progress (step, epoch, loss, rate, ETA), kept current
    <run_dir>/nodes/<node>.json    each training node's global step and phase, kept current (the stall watchdog)
    <run_dir>/report/              the training report: report.html and the PNGs it shows
    <run_dir>/lease.json           who started the application writing here (airflow_tfos.shared.lease)
    <run_dir>/attempt.json         the TF cluster attempt that may publish (run id, attempt): the write fence
    <run_dir>/tensorboard.json     where TensorBoard serves the run, only while a node serves it

A checkpoint or export is written under a temporary name inside the run directory, then renamed into
place; only then does the manifest (or ``_SUCCESS``) name it. An export that replaces another is swapped
in by renames (:func:`~airflow_tfos.shared.staging.replace_dir`): the old one is moved aside, never deleted
before the new one is in place, and staging directories left by a crash are removed by the next publication.
The rules of ``checkpoints/manifest.json`` are in :mod:`airflow_tfos.shared.checkpoint_manifest`, those of
``feeds/`` and ``control/stop.json`` in :mod:`airflow_tfos.shared.driver_requests`.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import uuid
from typing import Any

from airflow_tfos.shared import event_log
from airflow_tfos.shared.checkpoint_manifest import Checkpoint, manifest_records
from airflow_tfos.shared.driver_requests import check_feed_id, pending_feeds, stop_applies
from airflow_tfos.shared.errors import RunDirError, StaleAttemptError
from airflow_tfos.shared.events import APPLICATION
from airflow_tfos.shared.fingerprint import FINGERPRINT
from airflow_tfos.shared.spec import spec_hash
from airflow_tfos.shared.staging import STAGING_PREFIX, discard_stale, replace_dir
from airflow_tfos.shared.storage import Storage, is_plain_name, join, storage_for

log = logging.getLogger(__name__)

SPEC = "spec.json"
#: The task instance that last wrote spec.json: the api-server serves the report to who may read its Dag.
OWNER = "owner.json"
STATUS = "status.json"
CHECKPOINTS = "checkpoints"
MANIFEST = "manifest.json"
FEEDS = "feeds"
STOP = "control/stop.json"
EXPORT = "export"
SUCCESS = "_SUCCESS"
EVENTS = "events"
PROGRESS = "progress.json"
TENSORBOARD = "tensorboard.json"
NODES = "nodes"
REPORT_DIR = "report"
REPORT_HTML = "report/report.html"
PREVIOUS = "previous"
ATTEMPT = "attempt.json"

#: The run's states in status.json (not YARN's: see hooks/backends/state.py), and those of a run that has ended.
RUN_STATES = ("SUBMITTED", "STARTING", "RUNNING", "STOPPING", "SUCCEEDED", "FAILED", "STOPPED")
RUN_TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


def _dumps(value: Any) -> bytes:
    return json.dumps(value, indent=1, sort_keys=True).encode()


class RunDir:
    """One training run's directory.

    :param uri: a local path or a URI of a registered storage (``file://``, later ``hdfs://``...).
    :param storage: the storage to use (default: chosen by the URI's scheme).
    """

    def __init__(self, uri: str, storage: Storage | None = None):
        if not uri:
            raise RunDirError("the run directory is empty: give a path or URI")
        self.uri = uri.rstrip("/")
        self.storage = storage or storage_for(uri)

    def path(self, *parts: str) -> str:
        """The path of ``parts`` inside the run directory; RunDirError if one would lead out of it."""
        for part in parts:
            if not all(is_plain_name(segment) for segment in part.strip("/").split("/")):
                raise RunDirError(
                    f"refusing the path {part!r} in the run directory {self.uri}: every part must be a plain name "
                    "(not empty, '.' or '..', no NUL)"
                )
        return join(self.uri, *parts)

    def _read_json(self, *parts: str) -> Any | None:
        path = self.path(*parts)
        try:
            data = self.storage.read_bytes(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RunDirError.from_storage(exc, f"cannot read {path}") from exc
        try:
            return json.loads(data)
        except ValueError as exc:
            raise RunDirError(f"{path} is not valid JSON ({exc}); it was not written by airflow-tfos") from exc

    def _write_json(self, value: Any, *parts: str) -> None:
        try:
            self.storage.write_bytes(self.path(*parts), _dumps(value))
        except OSError as exc:
            raise RunDirError.from_storage(exc, f"cannot write {self.path(*parts)}") from exc

    # --- spec and status ---------------------------------------------------------------------------

    def make_private(self) -> None:
        """Create the run directory readable and writable by its owner only (0700), where the storage allows."""
        make_private = getattr(self.storage, "make_private_dir", None)
        try:
            if make_private is None:  # a storage plugged in without permissions
                log.info(
                    "%s cannot restrict who reads %s: created with its defaults", type(self.storage).__name__, self.uri
                )
                self.storage.makedirs(self.uri)
            else:
                make_private(self.uri)
        except OSError as exc:
            raise RunDirError.from_storage(
                exc,
                f"cannot create the run directory {self.uri} private to its owner (0700)",
                "give a run directory that this user can create, or owns",
            ) from exc

    def write_spec(self, spec: dict[str, Any]) -> str:
        """Create the run directory private to its owner if needed, write spec.json with its hash; return the hash."""
        digest = spec_hash(spec)
        self.make_private()  # its error names the directory and what to change
        self._write_json({**spec, "spec_hash": digest}, SPEC)
        return digest

    def read_spec(self) -> dict[str, Any] | None:
        return self._read_json(SPEC)

    def write_owner(self, *, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> None:
        """Record the task instance that submits the run (owner.json, written with spec.json; not part of the
        spec or its hash): the api-server serves the run's report only to users who may read that Dag."""
        self._write_json({"dag_id": dag_id, "task_id": task_id, "run_id": run_id, "map_index": map_index}, OWNER)

    def read_owner(self) -> dict[str, Any] | None:
        """owner.json (None when the run directory has none: written before it existed, or by hand)."""
        owner = self._read_json(OWNER)
        if owner is not None and not (isinstance(owner, dict) and isinstance(owner.get("dag_id"), str)):
            raise RunDirError(f"{self.path(OWNER)} names no Dag; it was not written by airflow-tfos")
        return owner

    def write_fingerprint(self, fingerprint: dict[str, Any]) -> None:
        """Replace fingerprint.json (written with the spec, before the application is submitted)."""
        self._write_json(fingerprint, FINGERPRINT)

    def read_fingerprint(self) -> dict[str, Any] | None:
        return self._read_json(FINGERPRINT)

    def set_aside(self, label: str) -> str | None:
        """Move ``export/``, ``checkpoints/`` and fingerprint.json into ``previous/<label>/`` (a new name if
        taken), so that a run of another input or code starts from scratch and the old model stays; return
        where they went, or None when there was nothing to move."""
        present = [name for name in (EXPORT, CHECKPOINTS, FINGERPRINT) if self.storage.exists(self.path(name))]
        if not present:
            return None
        target = self.path(PREVIOUS, label)
        for n in itertools.count(2):
            if not self.storage.exists(target):
                break
            target = self.path(PREVIOUS, f"{label}-{n}")
        self.storage.makedirs(target)
        for name in present:
            self.storage.rename(self.path(name), join(target, name))
        return target

    def write_status(self, state: str, **fields: Any) -> dict[str, Any]:
        """Replace status.json: ``state`` plus the given fields, and the time as heartbeat."""
        if state not in RUN_STATES:
            raise ValueError(f"unknown run state {state!r}; one of {', '.join(RUN_STATES)}")
        status = {**(self.read_status() or {}), **fields, "state": state, "heartbeat": time.time()}
        self._write_json(status, STATUS)
        return status

    def read_status(self) -> dict[str, Any] | None:
        return self._read_json(STATUS)

    def application_spec_hash(self, app_id: str) -> str | None:
        """The spec hash the application ``app_id`` works on: the one its driver recorded under that id
        (status.json, the ``application`` event: YARN ids), else spec.json's (rewritten only right before a
        submission, so it is what a live application read at its start)."""
        status = self.read_status() or {}
        if status.get("application_id") == app_id and status.get("spec_hash"):
            return status["spec_hash"]
        for event in reversed(self.events(APPLICATION)):
            if event.get("application_id") == app_id and event.get("spec_hash"):
                return event["spec_hash"]
        return (self.read_spec() or {}).get("spec_hash")

    # --- checkpoints ---------------------------------------------------------------------------------

    def checkpoint_staging(self, step: int) -> str:
        """A fresh temporary directory to write the checkpoint of ``step`` into before publishing it."""
        path = self.path(CHECKPOINTS, f".staging-ckpt-{int(step)}-{uuid.uuid4().hex[:8]}")
        self.storage.makedirs(path)
        return path

    # --- the write fence ----------------------------------------------------------------------------

    def write_attempt(self, run_id: str, attempt: int) -> None:
        """Record that TF cluster ``attempt`` of ``run_id`` is the one that may publish from now on (the
        driver, before it starts the attempt's stage)."""
        self._write_json({"run_id": run_id, "attempt": attempt, "time": time.time()}, ATTEMPT)

    def check_attempt(self, run_id: str | None, attempt: int) -> None:
        """Raise :class:`StaleAttemptError` unless ``attempt`` of ``run_id`` is the current one.

        The chief calls it right before it publishes a checkpoint or an export: a TF cluster cut off by a
        partition, whose driver has meanwhile started a new attempt (or a new application took the run
        over), must not overwrite what the current one publishes. Passes when nothing is recorded.
        """
        current = self._read_json(ATTEMPT)
        if not run_id or not current:
            return
        if current.get("run_id") != run_id or current.get("attempt") != attempt:
            raise StaleAttemptError(
                f"attempt {attempt} of TF cluster {run_id} is stale: {self.path(ATTEMPT)} names attempt "
                f"{current.get('attempt')} of {current.get('run_id')}, so this node's checkpoint or export is not "
                "published (a newer TF cluster took the run over, e.g. while this node was cut off by a partition)"
            )

    def publish_checkpoint(
        self, staging: str, step: int, *, epoch: int | None = None, in_epoch: int | None = None, keep: int = 3
    ) -> Checkpoint:
        """Rename a fully written checkpoint into place, then name it in the manifest; keep the last ``keep``.

        ``epoch`` is the number of epochs done, ``in_epoch`` the batches of the next one trained already."""
        name = f"ckpt-{int(step)}"
        final = self.path(CHECKPOINTS, name)
        manifest = self._read_json(CHECKPOINTS, MANIFEST) or {"history": []}
        kept = manifest_records(manifest, self.path(CHECKPOINTS, MANIFEST), strict=True)
        if self.storage.exists(final):
            self.storage.delete(staging)  # the same step was published already (a retried save)
        else:
            self.storage.rename(staging, final)
        record = {"name": name, "step": int(step), "epoch": epoch, "time": time.time()}
        if in_epoch is not None:
            record["in_epoch"] = int(in_epoch)
        history = [h for h in kept if h["name"] != name] + [record]
        history.sort(key=lambda h: h["step"])
        manifest = {"latest": record, "history": history[-keep:] if keep > 0 else history}
        self._write_json(manifest, CHECKPOINTS, MANIFEST)
        for old in history[:-keep] if keep > 0 else []:
            self.storage.delete(self.path(CHECKPOINTS, old["name"]))
        return Checkpoint(final, int(step), epoch, record["time"], record.get("in_epoch"))

    def latest_checkpoint(self) -> Checkpoint | None:
        """The newest complete checkpoint the manifest names (a half-written one is never named)."""
        manifest = self._read_json(CHECKPOINTS, MANIFEST)
        for record in reversed(manifest_records(manifest or {}, self.path(CHECKPOINTS, MANIFEST), strict=False)):
            path = self.path(CHECKPOINTS, record["name"])
            if self.storage.exists(path):
                return Checkpoint(path, record["step"], record.get("epoch"), record.get("time"), record.get("in_epoch"))
        return None

    def checkpoint_history(self) -> list[dict[str, Any]]:
        """The manifest's records (``name``, ``step``, ``epoch``, ``time``) of the kept checkpoints, oldest first."""
        manifest = self._read_json(CHECKPOINTS, MANIFEST)
        return manifest_records(manifest or {}, self.path(CHECKPOINTS, MANIFEST), strict=False)

    def discard_staging(self) -> int:
        """Remove checkpoints left half-written by a crash; return how many there were."""
        names = [n for n in self.storage.listdir(self.path(CHECKPOINTS)) if n.startswith(".staging-")]
        for name in names:
            self.storage.delete(self.path(CHECKPOINTS, name))
        return len(names)

    # --- feeds ---------------------------------------------------------------------------------------

    def request_feed(self, feed_id: str, request: dict[str, Any]) -> bool:
        """Ask for a feed; False (and nothing written) if a request with this id exists already."""
        check_feed_id(feed_id)
        if self.storage.exists(self.path(FEEDS, f"{feed_id}.json")):
            return False
        self._write_json({**request, "feed_id": feed_id, "requested": time.time()}, FEEDS, f"{feed_id}.json")
        return True

    def pending_feeds(self) -> list[dict[str, Any]]:
        """Requests not yet served, oldest first, each with its ``feed_id`` (the file's name).

        A request file that is not a JSON object with a time of request comes back as
        ``{"feed_id": ..., "requested": 0, "invalid": <why>}``, so that it can be answered with that error.
        A file whose name is not a feed id, or whose content names another feed, is skipped.
        """
        return pending_feeds(self.storage, self.path(FEEDS))

    def withdraw_feed(self, feed_id: str) -> None:
        """Remove a feed's request and done record (to request it anew after it failed)."""
        for name in (f"{feed_id}.json", f"{feed_id}.done.json"):  # the request first: never pending twice
            path = self.path(FEEDS, name)
            try:
                if self.storage.exists(path):
                    self.storage.delete(path)
            except OSError as exc:
                raise RunDirError.from_storage(exc, f"cannot remove {path}") from exc

    def mark_feed_done(self, feed_id: str, **result: Any) -> None:
        check_feed_id(feed_id)
        self._write_json({**result, "feed_id": feed_id, "done": time.time()}, FEEDS, f"{feed_id}.done.json")

    def feed_result(self, feed_id: str) -> dict[str, Any] | None:
        check_feed_id(feed_id)
        return self._read_json(FEEDS, f"{feed_id}.done.json")

    # --- stop ----------------------------------------------------------------------------------------

    def request_stop(self, reason: str = "", *, application_id: str | None = None) -> None:
        """Ask ``application_id`` (default: any application already started) to stop gracefully."""
        self._write_json({"reason": reason, "requested": time.time(), "application_id": application_id}, STOP)

    def stop_requested(
        self, *, application_ids: set[str] | frozenset[str] | None = None, started: float | None = None
    ) -> dict[str, Any] | None:
        """The stop request, or None; with ``application_ids`` and ``started``, only one meant for that
        application (see :func:`~airflow_tfos.shared.driver_requests.stop_applies`)."""
        request = self._read_json(STOP)
        if request is None or application_ids is None or started is None:
            return request
        return request if stop_applies(request, application_ids, started) else None

    def clear_stop(self) -> None:
        """Remove the stop request (before a new application is submitted: it was meant for an older one)."""
        self.storage.delete(self.path(STOP))

    # --- export --------------------------------------------------------------------------------------

    def export_staging(self) -> str:
        """A fresh temporary directory to write the SavedModel into before publishing it."""
        path = self.path(f"{STAGING_PREFIX}{EXPORT}-{uuid.uuid4().hex[:8]}")
        self.storage.makedirs(path)
        return path

    def publish_export(self, staging: str, *, spec_hash: str, step: int, metrics: dict[str, Any]) -> str:
        """Write ``_SUCCESS`` into a complete export, then swap it in as ``export/``
        (:func:`~airflow_tfos.shared.staging.replace_dir`); remove the staging and aside directories that earlier,
        interrupted publications left."""
        success = {"spec_hash": spec_hash, "step": int(step), "metrics": metrics, "time": time.time()}
        fingerprint = (self.read_fingerprint() or {}).get("hash")
        if fingerprint:  # the input and code this model learned from (written at submission)
            success["fingerprint"] = fingerprint
        self.storage.write_bytes(join(staging, SUCCESS), _dumps(success))
        final = self.path(EXPORT)
        replace_dir(self.storage, staging, final)
        discard_stale(self.storage, self.uri, EXPORT)
        return final

    def export_success(self) -> dict[str, Any] | None:
        """The ``_SUCCESS`` record of a complete export, or None."""
        return self._read_json(EXPORT, SUCCESS)

    # --- progress ------------------------------------------------------------------------------------

    def write_progress(self, record: dict[str, Any]) -> None:
        """Replace progress.json (written by the chief while it trains, atomically)."""
        self._write_json(record, PROGRESS)

    def read_progress(self) -> dict[str, Any] | None:
        return self._read_json(PROGRESS)

    def write_tensorboard(self, url: str, **fields: Any) -> None:
        """Replace tensorboard.json: the address of the TensorBoard a node started for this run (and when)."""
        self._write_json({**fields, "url": url, "time": time.time()}, TENSORBOARD)

    def read_tensorboard(self) -> dict[str, Any] | None:
        """Where TensorBoard serves this run (``url``), or None when no node serves it now."""
        return self._read_json(TENSORBOARD)

    def clear_tensorboard(self) -> None:
        """Remove tensorboard.json (its TensorBoard stopped, or a new application starts)."""
        path = self.path(TENSORBOARD)
        try:
            self.storage.delete(path)
        except OSError as exc:
            raise RunDirError.from_storage(exc, f"cannot remove {path}") from exc

    def write_node_progress(self, node: str, record: dict[str, Any]) -> None:
        """Replace ``nodes/<node>.json``: one training node's global step and phase (``chief-0``...)."""
        self._write_json(record, NODES, f"{node.replace(':', '-')}.json")

    def mark_node_ended(self, node: str, *, run_id: str | None, attempt: int) -> dict[str, Any]:
        """Record in ``nodes/<node>.json`` that the node's process ended its program (``ended``: the time), keeping
        the step it last reported in this attempt; the driver's end watch reads it."""
        name = f"{node.replace(':', '-')}.json"
        before = self._read_json(NODES, name) or {}
        if before.get("run_id") != run_id or before.get("attempt", 0) != attempt:
            before = {}  # an earlier attempt's record: its step is not this one's
        now = time.time()
        record = {**before, "worker": node, "run_id": run_id, "attempt": attempt, "step": before.get("step")}
        record.update(phase="finished", ended=now, time=now)
        self._write_json(record, NODES, name)
        return record

    def node_progress(self) -> list[dict[str, Any]]:
        """Every node's latest ``nodes/<node>.json`` record (none before the nodes report)."""
        try:
            names = sorted(n for n in self.storage.listdir(self.path(NODES)) if n.endswith(".json"))
        except FileNotFoundError:
            return []
        return [r for r in (self._read_json(NODES, n) for n in names) if r]

    # --- events --------------------------------------------------------------------------------------

    def add_event(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Record what happened (attempt, worker lost, restore, checkpoint...), one file per event."""
        event = {**fields, "kind": kind, "time": time.time()}
        try:
            event_log.write_one(self.storage, self.path(EVENTS), event)
        except OSError as exc:
            raise RunDirError.from_storage(exc, f"cannot write an event into {self.path(EVENTS)}") from exc
        return event

    def add_events(self, events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Record several events (``(kind, fields)`` pairs) at once, as one batch file."""
        now = time.time()
        recorded = [{**fields, "kind": kind, "time": fields.get("time", now)} for kind, fields in events]
        try:
            event_log.write_batch(self.storage, self.path(EVENTS), recorded)
        except OSError as exc:
            raise RunDirError.from_storage(exc, f"cannot write events into {self.path(EVENTS)}") from exc
        return recorded

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Events in the order they were recorded; of one ``kind`` only if given (see
        :mod:`~airflow_tfos.shared.event_log`: event files and the batch files they were folded into)."""
        return event_log.read(self.storage, self.path(EVENTS), kind)

    def compact_events(self, min_files: int = 1) -> int:
        """Fold the event files into one batch file if there are ``min_files`` or more; return how many."""
        try:
            return event_log.compact(self.storage, self.path(EVENTS), min_files)
        except OSError as exc:
            raise RunDirError.from_storage(exc, f"cannot fold the events of {self.uri}") from exc
