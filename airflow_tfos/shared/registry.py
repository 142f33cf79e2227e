"""A model registry on plain storage: published model versions and the one in service.

Pure Python (no Airflow, no TensorFlow), on the same storages as run directories (local paths,
``file://``, ``hdfs://``, ``webhdfs://``). Layout::

    <registry>/current.json               the version in service: its path, metrics, source run
    <registry>/current.lock               held while a publisher decides and replaces current.json
    <registry>/versions/<version>/<spec hash>[-<fingerprint>]/model/  a copy of the run's export (a SavedModel)
    <registry>/versions/<version>/<spec hash>[-<fingerprint>]/_SUCCESS  the copy's record (written last)
    <registry>/decisions/<time>-<version>.json  every publish decision, published or not

A copy is keyed by version, spec hash and the fingerprint of the input and code the model learned from (when
its export records one: a retraining on rewritten input is a copy of its own), written under a temporary
name, renamed into place and never changed or deleted afterwards: re-publishing a version with another spec
or input adds a copy beside the first, so the model in service is never deleted or replaced under a reader.
``current.json`` is replaced atomically, and only by a publisher holding ``current.lock`` (taken by an
exclusive rename, which HDFS and local disks both refuse when the target exists) that reads ``current.json``
and decides again under it: two publishers (a nightly run and a backfill) cannot both go by the same old
``current.json``. Versions are named so that they sort in time (``20261121T000000``): a rerun of an old date
never takes the place of a newer version in service.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from airflow_tfos.shared.errors import RegistryError as RegistryError
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
SUCCESS = "_SUCCESS"


@dataclass(frozen=True)
class Decision:
    """Whether a candidate model goes into service, and why."""

    publish: bool
    reason: str
    candidate: float | None
    baseline: float | None


def decide(
    metrics: dict[str, Any],
    current: dict[str, Any] | None,
    *,
    metric: str,
    higher_is_better: bool = True,
    tolerance: float = 0.0,
    version: str,
) -> Decision:
    """Decide whether a candidate with ``metrics`` replaces the ``current`` record.

    The candidate is compared with ``baseline_<metric>`` from its own metrics when present: the model
    in service scored on the same evaluation data as the candidate, which is the fair comparison
    (the training example records it before warm-starting from that model). Otherwise with the
    ``score`` recorded when the current version was published. "Not worse" means within
    ``tolerance`` of the baseline. A version older than the one in service never replaces it.
    """
    if metric not in metrics:
        raise RegistryError(
            f"the candidate's metrics have no {metric!r} (they have: {', '.join(sorted(metrics)) or 'none'}): "
            "return it from train_fn's export_model(metrics=...) or set metric= to one of them"
        )
    candidate = float(metrics[metric])
    if current is None:
        return Decision(True, "no model is in service yet", candidate, None)
    if str(version) < str(current.get("version", "")):
        return Decision(
            False, f"version {version} is older than version {current['version']} in service", candidate, None
        )
    if metrics.get(f"baseline_{metric}") is not None:
        baseline, source = float(metrics[f"baseline_{metric}"]), "the model in service on the same evaluation data"
    elif current.get("score") is not None:
        baseline, source = float(current["score"]), f"version {current.get('version')} when it was published"
    else:
        return Decision(True, "the model in service has no recorded score", candidate, None)
    ok = candidate >= baseline - tolerance if higher_is_better else candidate <= baseline + tolerance
    verdict = "not worse than" if ok else "worse than"
    return Decision(ok, f"{metric} {candidate:.4f} is {verdict} {baseline:.4f} ({source})", candidate, baseline)


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
        published, and right for a rerun of an old date.
        """
        published = [d for d in self.decisions() if d.get("published") and str(d["version"]) < str(version)]
        published.sort(key=lambda d: (str(d["version"]), d.get("time") or 0))
        for decision in reversed(published):
            record = self.version(decision["version"], decision.get("spec_hash"), decision.get("fingerprint"))
            if record:
                return record["model_path"]
        return None

    def version(
        self, version: str, spec_hash: str | None = None, fingerprint: str | None = None
    ) -> dict[str, Any] | None:
        """The record of a copy of ``version`` (of ``spec_hash`` and ``fingerprint``; else the last one copied),
        or None when there is no complete copy."""
        if spec_hash is not None:
            found = self._read(self.path(VERSIONS, version, _spec_key(spec_hash, fingerprint), SUCCESS))
            legacy = None if found or fingerprint else self._read(self.path(VERSIONS, version, SUCCESS))
            return found or (legacy if legacy and legacy.get("spec_hash") == spec_hash else None)
        names = [n for n in self.storage.listdir(self.path(VERSIONS, version)) if n not in (MODEL, SUCCESS)]
        records = [r for r in (self._read(self.path(VERSIONS, version, n, SUCCESS)) for n in names if n[0] != ".") if r]
        legacy = self._read(
            self.path(VERSIONS, version, SUCCESS)
        )  # versions/<version>/_SUCCESS, before copies per spec
        records += [legacy] if legacy else []
        return max(records, key=lambda r: r.get("copied_at") or 0) if records else None

    def add_version(self, version: str, export_path: str, source: Storage, record: dict[str, Any]) -> dict[str, Any]:
        """Copy the export at ``export_path`` (on ``source``) in as ``version`` of its spec; idempotent.

        A copy is never replaced: the same version with another spec hash is a copy of its own.
        """
        _check_version(version)
        key = _spec_key(record.get("spec_hash"), record.get("fingerprint"))
        existing = self.version(version, record.get("spec_hash"), record.get("fingerprint"))
        if existing:
            log.info("version %s is already in the registry (spec %s)", version, existing.get("spec_hash"))
            return existing
        final = self.path(VERSIONS, version, key)
        staging = self.path(VERSIONS, version, f".{key}.tmp-{uuid.uuid4().hex[:8]}")
        scratch = tempfile.mkdtemp(prefix="airflow-tfos-publish-")
        started = time.monotonic()
        try:
            source.get_dir(export_path, scratch)
            self.storage.put_dir(scratch, join(staging, MODEL))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        full = {**record, "version": version, "model_path": join(final, MODEL), "copied_at": time.time()}
        self._write(join(staging, SUCCESS), full)
        try:
            self.storage.rename(staging, final)
        except FileExistsError:  # another publisher copied the same version and spec first: keep theirs
            self.storage.delete(staging)
            return self.version(version, record.get("spec_hash"), record.get("fingerprint")) or full
        log.info("copied %s into %s in %.1f s", export_path, final, time.monotonic() - started)
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
        self, version: str, added: dict[str, Any], judge: Callable[[dict[str, Any] | None], Decision]
    ) -> tuple[Decision, dict[str, Any] | None]:
        """Decide on the copy ``added`` against the model in service, and put it in service if ``judge`` says so.

        Under :meth:`lock`: ``current.json`` is read, ``judge(current)`` decides, the decision is recorded and
        ``current.json`` replaced when it publishes. Return the decision and the record in service after it.
        """
        with self.lock():
            current = self.current()
            decision = judge(current)
            self.record_decision(
                version,
                decision,
                model_path=added["model_path"],
                spec_hash=added.get("spec_hash"),
                fingerprint=added.get("fingerprint"),
            )
            if decision.publish:
                self.set_current(added)
                return decision, added
            return decision, current

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


def _spec_key(spec_hash: str | None, fingerprint: str | None = None) -> str:
    """The directory of a copy within its version: its spec hash (``unknown-spec`` when it has none), and the
    fingerprint of its input and code when the export records one."""
    key = str(spec_hash or "unknown-spec") + (f"-{fingerprint}" if fingerprint else "")
    if key.startswith(".") or any(c in key for c in "/\\ \t\n"):
        raise RegistryError(f"spec hash {key!r} cannot name a directory: it should be the export's hex spec hash")
    return key


def _check_version(version: str) -> None:
    if not version or version.startswith(".") or any(c in version for c in "/\\ \t\n"):
        raise RegistryError(
            f"model version {version!r} cannot name a directory: use letters, digits, '-', '_', '.' or 'T' "
            "(e.g. the logical date as {{ ts_nodash }})"
        )
