"""A model registry on plain storage: published model versions and the one in service.

Pure Python (no Airflow, no TensorFlow), on the same storages as run directories (local paths,
``file://``, ``hdfs://``, ``webhdfs://``). Layout::

    <registry>/current.json               the copy in service: its path, content digest, the metrics judged
    <registry>/current.lock               held while a publisher decides and replaces current.json
    <registry>/versions/<version>/<copy>/model/  a copy of the run's export (a SavedModel)
    <registry>/versions/<version>/<copy>/_SUCCESS  the copy's record (written last)
    <registry>/decisions/<time>-<version>.json  every publish decision, published or not, naming its copy

A copy is named by its spec hash and the fingerprint of the input and code the model learned from (when its
export records one: a retraining on rewritten input is a copy of its own), ``<spec hash>[-<fingerprint>]``,
and records the content digest of its files. Another export under the same name (a backfill and the nightly
run that give the same version string) is a copy of its own, ``<spec hash>[-<fingerprint>]-<digest>``: a
copy is reused only for the export it was copied from (the same digest and metrics). Copies are written under
a temporary name, renamed into place and never changed or deleted afterwards, so the model in service is never
deleted or replaced under a reader.

``current.json`` names the copy that was judged: its content digest and, under ``judged``, the metric, score
and baseline the gate compared. It is replaced atomically, and only by a publisher holding ``current.lock``
(taken by an exclusive rename, which HDFS and local disks both refuse when the target exists) that reads
``current.json``, checks it (:meth:`ModelRegistry.check_in_service`) and decides again under it: two publishers
(a nightly run and a backfill) cannot both go by the same old ``current.json``, and a ``current.json`` whose
copy is not the one judged (as earlier publishers could leave it) is named, not judged against. Versions are
named so that they sort in time (``20261121T000000``): a rerun of an old date never takes the place of a newer
version in service.

The gate a publish goes by (:func:`~airflow_tfos.shared.registry_gate.decide`) is in
:mod:`airflow_tfos.shared.registry_gate`; what names a copy and what it must hold, in
:mod:`airflow_tfos.shared.registry_copies`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from airflow_tfos.shared.errors import RegistryError
from airflow_tfos.shared.registry_copies import (
    SUCCESS,
    check_export_record,
    check_version,
    content_digest,
    holds,
    names_spec,
    shown,
    spec_key,
)
from airflow_tfos.shared.registry_gate import Decision, copy_score, judged_by
from airflow_tfos.shared.storage import Storage, join, storage_for

log = logging.getLogger(__name__)

CURRENT = "current.json"
LOCK = "current.lock"
#: How long a publisher waits for ``current.lock``, and after how long a lock is taken as left by a dead one.
LOCK_TIMEOUT_SECS = 120.0
LOCK_STALE_SECS = 600.0
VERSIONS = "versions"
DECISIONS = "decisions"
MODEL = "model"
#: How many hex digits of the content digest name a second copy under the same spec hash and fingerprint.
DIGEST_IN_NAME = 16


class ModelRegistry:
    """Publish exported models into a registry directory and read the version in service.

    :param uri: the registry's directory (path or URI).
    :param storage: its storage (default: from the URI's scheme).
    """

    def __init__(self, uri: str, storage: Storage | None = None):
        self.uri = uri.rstrip("/")
        self.storage = storage or storage_for(uri)

    def path(self, *parts: str) -> str:
        return join(self.uri, *parts)

    def _read(self, path: str) -> dict[str, Any] | None:
        try:
            return json.loads(self.storage.read_bytes(path))
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise RegistryError(f"{path} is not valid JSON ({exc}): fix or remove it") from exc

    def _write(self, path: str, record: dict[str, Any]) -> None:
        self.storage.write_bytes(path, json.dumps(record, indent=2, sort_keys=True).encode())

    def current(self) -> dict[str, Any] | None:
        """The record of the version in service (``version``, ``model_path``, ``metrics``...), or None."""
        return self._read(self.path(CURRENT))

    def current_model_path(self) -> str | None:
        """Where the model in service is, or None before the first publish."""
        record = self.current()
        return record["model_path"] if record else None

    def in_service_before(self, version: str) -> str | None:
        """The model that was put in service last among versions older than ``version``, or None.

        What a run for ``version`` starts from: stable when the run is repeated after its own model was
        published, and right for a rerun of an old date. A copy that is not the one its decision judged
        (:meth:`check_in_service`) is passed over.
        """
        published = [d for d in self.decisions() if d.get("published") and str(d["version"]) < str(version)]
        published.sort(key=lambda d: (str(d["version"]), d.get("time") or 0))
        for decision in reversed(published):
            record = self._copy_of(decision)
            if record and not self._doubts(record, judged_by(decision)):
                return record["model_path"]
        return None

    def version(
        self,
        version: str,
        spec_hash: str | None = None,
        fingerprint: str | None = None,
        content_digest: str | None = None,
    ) -> dict[str, Any] | None:
        """The record of a copy of ``version``, or None when there is no complete copy.

        With ``content_digest``: the copy of that content (of ``spec_hash`` and ``fingerprint`` when given);
        else with ``spec_hash``: the first copy of that spec and fingerprint; else the last one copied.
        """
        if spec_hash is not None and content_digest is None:
            found = self._read(self.path(VERSIONS, version, spec_key(spec_hash, fingerprint), SUCCESS))
            legacy = None if found or fingerprint else self._read(self.path(VERSIONS, version, SUCCESS))
            return found or (legacy if legacy and legacy.get("spec_hash") == spec_hash else None)
        names = [n for n in self.storage.listdir(self.path(VERSIONS, version)) if n not in (MODEL, SUCCESS)]
        records = [r for r in (self._read(self.path(VERSIONS, version, n, SUCCESS)) for n in names if n[0] != ".") if r]
        # versions/<version>/_SUCCESS: a registry written before copies per spec
        legacy = self._read(self.path(VERSIONS, version, SUCCESS))
        records += [legacy] if legacy else []
        if content_digest is not None:
            records = [
                r
                for r in records
                if r.get("content_digest") == content_digest
                and (spec_hash is None or names_spec(r, spec_hash, fingerprint))
            ]
        return max(records, key=lambda r: r.get("copied_at") or 0) if records else None

    def add_version(self, version: str, export_path: str, source: Storage, record: dict[str, Any]) -> dict[str, Any]:
        """Copy the export at ``export_path`` (on ``source``) in as ``version`` of its spec; idempotent.

        The copy's record is ``record`` with the ``content_digest`` of the files copied
        (:func:`~airflow_tfos.shared.registry_copies.content_digest`).
        A copy already in the registry is returned only if it holds this export (the same digest and metrics);
        another export of the same version, spec and fingerprint becomes a copy of its own. A copy is never
        replaced. When the export's own ``_SUCCESS`` has other metrics than ``record`` (it was replaced since
        they were read), nothing is copied.
        """
        check_version(version)
        key = spec_key(record.get("spec_hash"), record.get("fingerprint"))
        scratch = tempfile.mkdtemp(prefix="airflow-tfos-publish-")
        started = time.monotonic()
        try:
            source.get_dir(export_path, scratch)
            check_export_record(scratch, export_path, record)
            digest = content_digest(scratch)
            names = (key, f"{key}-{digest[:DIGEST_IN_NAME]}")
            for name in names:
                existing = self._read(self.path(VERSIONS, version, name, SUCCESS))
                if existing is None:
                    placed = self._place(version, name, scratch, {**record, "content_digest": digest})
                    if placed is not None:
                        took = time.monotonic() - started
                        log.info("copied %s into %s in %.1f s", shown(export_path), placed["model_path"], took)
                        return placed
                    existing = self._read(self.path(VERSIONS, version, name, SUCCESS))  # another publisher's
                if existing and holds(existing, digest, record):
                    log.info("version %s already holds this export at %s", version, existing["model_path"])
                    return existing
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        raise RegistryError(
            f"version {version} already holds copies of other exports of spec {key} at "
            f"{' and '.join(shown(self.path(VERSIONS, version, n)) for n in names)}: publish this export under "
            "another version"
        )

    def _place(self, version: str, name: str, scratch: str, record: dict[str, Any]) -> dict[str, Any] | None:
        """Copy ``scratch`` in as ``versions/<version>/<name>``; None when that name was taken meanwhile."""
        final = self.path(VERSIONS, version, name)
        staging = self.path(VERSIONS, version, f".{name}.tmp-{uuid.uuid4().hex[:8]}")
        full = {**record, "version": version, "model_path": join(final, MODEL), "copied_at": time.time()}
        self.storage.put_dir(scratch, join(staging, MODEL))
        self._write(join(staging, SUCCESS), full)
        try:
            self.storage.rename(staging, final)
        except FileExistsError:  # another publisher took the name first
            self.storage.delete(staging)
            return None
        return full

    def set_current(self, record: dict[str, Any]) -> None:
        """Put a published version in service (``current.json``, replaced atomically); hold :meth:`lock`."""
        self._write(self.path(CURRENT), {**record, "in_service_since": time.time()})

    @contextlib.contextmanager
    def lock(self, timeout: float = LOCK_TIMEOUT_SECS) -> Iterator[None]:
        """Hold ``current.lock``: taken by renaming a file of our own onto it, which fails while it exists.

        A lock older than :data:`LOCK_STALE_SECS` was left by a publisher that died and is taken over.
        """
        lock, token = self.path(LOCK), uuid.uuid4().hex
        deadline = time.monotonic() + timeout
        while True:
            mine = self.path(f".{LOCK}-{token}")
            self._write(mine, {"token": token, "time": time.time()})
            try:
                self.storage.rename(mine, lock)
                break
            except FileExistsError:
                self.storage.delete(mine)
            taken = (self._read(lock) or {}).get("time")
            if isinstance(taken, int | float) and time.time() - taken > LOCK_STALE_SECS:
                log.warning("taking over %s, left %.0f s ago by a publisher that did not end", lock, LOCK_STALE_SECS)
                self.storage.delete(lock)
                continue
            if time.monotonic() > deadline:
                raise RegistryError(
                    f"{lock} was held by another publisher for more than {timeout:.0f} s: wait for it, or remove the "
                    "file if no publisher runs"
                )
            time.sleep(0.05)
        try:
            yield
        finally:
            if (self._read(lock) or {}).get("token") == token:
                self.storage.delete(lock)

    def publish(
        self,
        version: str,
        added: dict[str, Any],
        judge: Callable[[dict[str, Any] | None], Decision],
        *,
        metric: str | None = None,
    ) -> tuple[Decision, dict[str, Any] | None]:
        """Decide on the copy ``added`` against the model in service, and put it in service if ``judge`` says so.

        Under :meth:`lock`: ``current.json`` is read and checked (:meth:`check_in_service`), ``judge(current)``
        decides, the decision is recorded and ``current.json`` replaced when it publishes, with the copy's
        content digest and what was judged. ``added`` must be the record :meth:`add_version` returned, and
        the score judged (of ``metric``, by default ``added["metric"]``) its copy's own.
        Return the decision and the record in service after it.
        """
        metric = metric or added.get("metric")
        with self.lock():
            current = self.check_in_service()
            decision = judge(current)
            judged = {"metric": metric, "candidate": decision.candidate, "baseline": decision.baseline}
            doubts = self._doubts(added, judged)
            if doubts:
                raise RegistryError(
                    f"the copy {shown(added.get('model_path', '?'))} is not the export judged: {'; '.join(doubts)}: "
                    "publish the export again"
                )
            self.record_decision(
                version,
                decision,
                model_path=added["model_path"],
                spec_hash=added.get("spec_hash"),
                fingerprint=added.get("fingerprint"),
                content_digest=added.get("content_digest"),
                metric=metric,
            )
            if decision.publish:
                in_service = {
                    **added,
                    "metric": metric,
                    "score": decision.candidate,
                    "judged": {**judged, "reason": decision.reason, "time": time.time()},
                }
                self.set_current(in_service)
                return decision, in_service
            return decision, current

    def check_in_service(
        self, *, higher_is_better: bool | None = None, tolerance: float = 0.0, verify_content: bool = False
    ) -> dict[str, Any] | None:
        """The record of the model in service, after checking that its copy is the export that was judged.

        The copy ``current.json`` points at must be complete, have the content digest recorded there, and
        score what was judged: the ``judged`` score of ``current.json``, or for a ``current.json`` written
        before it was kept, the candidate of the last decision that published this copy. With
        ``higher_is_better``, its score must also pass the gate against the baseline it was judged against
        (within ``tolerance``); with ``verify_content``, its files are read again and digested.
        Raise :class:`RegistryError` naming the copy, and saying how to put a judged copy back, when it is not.
        """
        current = self.current()
        if current is None:
            return None
        judged = current.get("judged")
        if judged is None:  # written before current.json kept what was judged: the decision that published it
            decisions = [d for d in self.decisions() if d.get("published") and self._names_copy(d, current)]
            if not decisions:
                log.warning("no decision records how %s was judged: it cannot be checked", shown(current["model_path"]))
                return current
            judged = judged_by(decisions[-1])
        doubts = self._doubts(current, judged, higher_is_better, tolerance, verify_content)
        if doubts:
            raise RegistryError(
                f"the model in service is not the one judged: current.json puts {shown(current['model_path'])} "
                f"(version {current.get('version')}) in service, but {'; '.join(doubts)}. Put the last copy "
                f"that was judged back in service with ModelRegistry({shown(self.uri)!r}).roll_back() "
                "(airflow_tfos.shared.registry; in Airflow, ModelRegistryHook(<registry>).registry.roll_back()), "
                "then publish again"
            )
        return current

    def roll_back(self) -> dict[str, Any] | None:
        """Put back in service the last copy published before the one in service that is the export judged.

        Under :meth:`lock`, with a decision recorded; what :meth:`check_in_service` asks for when the model in
        service is not the one judged. Return the record now in service (None when no such copy exists, and
        nothing changed).
        """
        with self.lock():
            current = self.current() or {}
            published = [d for d in self.decisions() if d.get("published")]
            for decision in reversed(published):
                copy = self._copy_of(decision)
                if not copy or copy["model_path"] == current.get("model_path"):
                    continue
                judged = judged_by(decision)
                if self._doubts(copy, judged, verify_content=True):
                    continue
                record = {**copy, "judged": {**judged, "reason": decision.get("reason"), "time": decision.get("time")}}
                if judged.get("metric"):
                    record["metric"] = judged["metric"]
                if judged.get("candidate") is not None:
                    record["score"] = judged["candidate"]
                reason = f"rolled back from {shown(current.get('model_path', 'none'))} to {shown(copy['model_path'])}"
                self.record_decision(
                    copy["version"],
                    Decision(True, reason, judged.get("candidate"), judged.get("baseline")),
                    model_path=copy["model_path"],
                    spec_hash=copy.get("spec_hash"),
                    fingerprint=copy.get("fingerprint"),
                    content_digest=copy.get("content_digest"),
                    metric=judged.get("metric"),
                )
                self.set_current(record)
                log.warning("%s", reason)
                return record
            log.warning("no copy published before %s can be put back in service", current.get("model_path"))
            return None

    def _copy_of(self, record: dict[str, Any]) -> dict[str, Any] | None:
        """The record of the copy that a decision or ``current.json`` names (by its path, else by its key)."""
        path = record.get("model_path")
        if path:
            parent = path.rstrip("/").rsplit("/", 1)[0]
            return self._read(join(parent, SUCCESS)) if path.rstrip("/").endswith(f"/{MODEL}") else None
        return self.version(str(record["version"]), record.get("spec_hash"), record.get("fingerprint"))

    def _names_copy(self, decision: dict[str, Any], record: dict[str, Any]) -> bool:
        if decision.get("model_path"):
            return decision["model_path"] == record.get("model_path")
        return [decision.get(k) for k in ("version", "spec_hash", "fingerprint")] == [
            record.get(k) for k in ("version", "spec_hash", "fingerprint")
        ]

    def _doubts(
        self,
        record: dict[str, Any],
        judged: dict[str, Any],
        higher_is_better: bool | None = None,
        tolerance: float = 0.0,
        verify_content: bool = False,
    ) -> list[str]:
        """Why the copy ``record`` points at is not the export ``judged`` says was judged (empty when it is)."""
        copy = self._copy_of(record)
        if copy is None:
            return ["it is not a complete copy in this registry (no _SUCCESS beside it)"]
        doubts = []
        digest = record.get("content_digest")
        if digest and copy.get("content_digest") != digest:
            doubts.append(f"its copy's content digest is {copy.get('content_digest')}, not the {digest} judged")
        metric, candidate, baseline = judged.get("metric"), judged.get("candidate"), judged.get("baseline")
        score = copy_score(copy, metric)
        name = metric or "score"
        if score is not None and candidate is not None and not math.isclose(score, float(candidate), rel_tol=1e-9):
            doubts.append(f"that copy's {name} is {score:.4f} where the publish decision judged {float(candidate):.4f}")
        if score is not None and baseline is not None and higher_is_better is not None:
            passes = score >= baseline - tolerance if higher_is_better else score <= baseline + tolerance
            if not passes:
                doubts.append(
                    f"that copy's {name} {score:.4f} is worse than the {float(baseline):.4f} it was judged against"
                )
        if verify_content and copy.get("content_digest"):
            scratch = tempfile.mkdtemp(prefix="airflow-tfos-check-")
            try:
                self.storage.get_dir(copy["model_path"], scratch)
                actual = content_digest(scratch)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            if actual != copy["content_digest"]:
                doubts.append(f"its files' content digest is {actual}, not the {copy['content_digest']} copied in")
        return doubts

    def record_decision(self, version: str, decision: Decision, **fields: Any) -> None:
        name = f"{time.time_ns():020d}-{version}.json"
        self._write(
            self.path(DECISIONS, name),
            {
                "version": version,
                "published": decision.publish,
                "reason": decision.reason,
                "candidate": decision.candidate,
                "baseline": decision.baseline,
                "time": time.time(),
                **fields,
            },
        )

    def decisions(self) -> list[dict[str, Any]]:
        """Every decision recorded, oldest first."""
        names = [n for n in self.storage.listdir(self.path(DECISIONS)) if n.endswith(".json")]
        return [r for r in (self._read(self.path(DECISIONS, n)) for n in sorted(names)) if r]
