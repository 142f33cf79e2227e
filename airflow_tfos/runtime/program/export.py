"""Exports and warm starts: SavedModels published to the run directory, and models started from one.

:func:`export_model` writes the model as a SavedModel under a temporary name in the run directory,
adds ``_SUCCESS`` (spec hash, step, metrics) and renames it into place, after checking that this node's
attempt is still the run's (:func:`fence`). With a remote run directory TensorFlow writes into a local
temporary directory first (:func:`local_dir_for`). A warm start (:func:`find_warm_start`,
:func:`load_weights_from`) loads the weights of an exported model into a new one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from airflow_tfos.runtime.errors import WarmStartError
from airflow_tfos.runtime.program.progress import node_phase
from airflow_tfos.shared.errors import StaleAttemptError
from airflow_tfos.shared.rundir import EXPORT, SUCCESS, RunDir
from airflow_tfos.shared.storage import Storage, join, storage_for

log = logging.getLogger(__name__)

#: The file that marks a directory as a SavedModel.
SAVED_MODEL_FILE = "saved_model.pb"


def export_model(ctx, model, *, metrics: dict[str, Any] | None = None, step: int | None = None) -> str | None:
    """Export ``model`` as a SavedModel to the run directory's ``export/``, with ``_SUCCESS``.

    Every worker must call it (saving may be collective); the chief's copy is published, atomically:
    written under a temporary name, ``_SUCCESS`` (spec hash, step, metrics) added, then renamed into
    place. Returns the export's path on the chief, None elsewhere.
    """
    rundir = RunDir(ctx.run_dir) if ctx.run_dir else None
    if rundir is None:
        raise ValueError("export_model writes to the run directory: pass run_dir= to run()")
    if step is None:
        step = int(model.optimizer.iterations.numpy()) if getattr(model, "optimizer", None) is not None else 0
    with node_phase("exporting"):
        return _export(ctx, rundir, model, metrics, step)


def _export(ctx, rundir: RunDir, model, metrics: dict[str, Any] | None, step: int) -> str | None:
    if not ctx.is_chief:
        scratch = tempfile.mkdtemp(prefix="airflow-tfos-export-")
        try:
            _save_model(model, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return None
    staging = rundir.export_staging()
    with local_dir_for(rundir.storage, staging) as local:
        _save_model(model, local)
    fence(ctx, rundir, staging)
    path = rundir.publish_export(
        staging, spec_hash=os.environ.get("AIRFLOW_TFOS_SPEC_HASH", ""), step=step, metrics=dict(metrics or {})
    )
    rundir.add_event("export", step=step, path=path, metrics=dict(metrics or {}), attempt=getattr(ctx, "attempt", 0))
    return path


def fence(ctx, rundir: RunDir, staging: str) -> None:
    """Refuse to publish ``staging`` when this node's attempt is no longer the run's
    (``RunDir.check_attempt``); the staged copy is removed, so a stale attempt leaves nothing behind."""
    try:
        rundir.check_attempt(os.environ.get("AIRFLOW_TFOS_CLUSTER_ID"), getattr(ctx, "attempt", 0))
    except StaleAttemptError:
        with contextlib.suppress(OSError):
            rundir.storage.delete(staging)
        raise


@contextlib.contextmanager
def local_dir_for(storage: Storage, path: str) -> Iterator[str]:
    """A local directory for TensorFlow to write what belongs at ``path``.

    The path itself when the storage is local; otherwise a temporary directory, uploaded to ``path``
    (``Storage.put_dir``) when the block ends without an error, and removed in any case.
    """
    local = storage.local_path(path)
    if local is not None:
        yield local
        return
    scratch = tempfile.mkdtemp(prefix="airflow-tfos-upload-")
    try:
        yield scratch
        started = time.monotonic()
        storage.put_dir(scratch, path)
        log.info("uploaded %s in %.2f s", path, time.monotonic() - started)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _save_model(model, path: str) -> None:
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1" or not hasattr(model, "export"):
        model.save(path, save_format="tf")
    else:
        model.export(path)


def find_warm_start(uri: str) -> tuple[str, dict[str, Any] | None] | None:
    """Find the exported model that ``warm_start`` names: ``(model path, its _SUCCESS record or None)``.

    ``uri`` is a SavedModel directory, or a run directory whose ``export/`` holds one (looked for first).
    None when neither has a ``saved_model.pb``.
    """
    try:
        storage = storage_for(uri)
    except ValueError as exc:
        raise WarmStartError(f"warm_start {uri!r}: {exc}") from None
    base = uri.rstrip("/")
    for candidate in (join(base, EXPORT), base):
        if storage.exists(join(candidate, SAVED_MODEL_FILE)):
            try:
                success = json.loads(storage.read_bytes(join(candidate, SUCCESS)))
            except (FileNotFoundError, ValueError):
                success = None
            return candidate, success
    return None


def load_weights_from(model, path: str) -> None:
    """Set ``model``'s weights to those of the SavedModel at ``path`` (local or remote).

    Raises :class:`WarmStartError`, naming both models' weight shapes by layer, when they differ.
    """
    import tensorflow as tf

    storage = storage_for(path)
    local = storage.local_path(path)
    scratch = None
    if local is None:
        scratch = tempfile.mkdtemp(prefix="airflow-tfos-warm-start-")
        storage.get_dir(path, scratch)
        local = scratch
    try:
        try:
            source = tf.keras.models.load_model(local, compile=False)
        except (OSError, ValueError, TypeError) as exc:
            raise WarmStartError(
                f"cannot load the warm_start model at {path} as a Keras model ({str(exc).splitlines()[0]}): "
                "warm_start needs a model written by export_model (Keras 2 SavedModel), or warm_start=None"
            ) from exc
        weights = source.get_weights()
        wanted = [tuple(w.shape) for w in model.weights]
        if [tuple(w.shape) for w in weights] != wanted:
            raise WarmStartError(
                f"the warm_start model at {path} does not fit this model: its weights are "
                f"{describe_weights(source)}; this model's are {describe_weights(model)}. Build the same "
                "architecture, or train from scratch (warm_start=None)"
            )
        model.set_weights(weights)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def describe_weights(model) -> str:
    """The weight shapes of a Keras model, layer by layer: ``dense: (4, 1) (1,); dense_1: ...``."""
    parts = []
    for layer in getattr(model, "layers", []):
        shapes = " ".join(str(tuple(w.shape)) for w in layer.weights)
        if shapes:
            parts.append(f"{layer.name}: {shapes}")
    return "; ".join(parts) or "(no weights)"
