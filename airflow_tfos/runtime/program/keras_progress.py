"""Progress of Keras ``fit``: the callback that reports a node's steps, epochs and metrics to its
:class:`~airflow_tfos.runtime.program.progress.ProgressTracker` (``fit_resumable`` adds it by itself), and how it
reads metrics that tf.distribute summed over the replicas."""

from __future__ import annotations

import logging
import time
from typing import Any

from airflow_tfos.runtime.program.progress import PROGRESS_INTERVAL_SECS, ProgressTracker

log = logging.getLogger(__name__)


def replicas_summed(model) -> int:
    """How many replicas a batch's logs are summed over by ``model.fit``; 1 when they are not summed.

    Keras 2 (tf-keras) reduces a batch's logs with ``distribute_reduction_method``, whose ``"auto"`` means
    ``"sum"`` off TPUs: under MultiWorkerMirroredStrategy (or MirroredStrategy on several devices) every
    replica's running metrics are added up, so a per-batch accuracy reads up to N and a loss N times the
    epoch's. The epoch's logs are the metrics' own values. Keras 3 averages the replicas instead.
    """
    try:
        import tf_keras
    except ImportError:
        return 1
    if not isinstance(model, tf_keras.Model):
        return 1
    method = getattr(model, "distribute_reduction_method", "auto") or "auto"
    strategy = getattr(model, "distribute_strategy", None)
    if strategy is None:
        return 1
    if method == "auto":
        method = "first" if "TPU" in type(strategy).__name__ else "sum"
    if method != "sum":
        return 1
    return max(1, int(getattr(strategy, "num_replicas_in_sync", 1)))


def per_replica_mean(logs: dict[str, Any] | None, replicas: int) -> dict[str, Any] | None:
    """A batch's logs summed over ``replicas`` turned back into their mean over the replicas.

    Every replica runs the same number of steps on batches of the same size (the feed balances them),
    so for Keras's mean metrics (loss, accuracy, mae...) the mean over the replicas is the value over
    all of them.
    """
    if not logs or replicas <= 1:
        return logs
    scaled: dict[str, Any] = {}
    for name, value in logs.items():
        try:
            scaled[name] = float(value) / replicas
        except (TypeError, ValueError):
            scaled[name] = value
    return scaled


def progress_callback(
    ctx,
    *,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    global_batch_size: int | None = None,
    interval: float = PROGRESS_INTERVAL_SECS,
    history_every: int | None = None,
):
    """A Keras callback that reports progress through a :class:`ProgressTracker` (see the module doc).

    ``steps_per_epoch`` and ``epochs`` default to what ``model.fit`` was given. The global step is the
    optimizer's iteration count; a step's time runs from the start of the batch to its end. A batch's
    metrics are recorded as their value over all replicas, also where Keras 2 sums them over the
    replicas (see :func:`replicas_summed`).
    The tracker is the callback's ``tracker`` attribute.
    """
    import tensorflow as tf

    tracker = ProgressTracker(
        ctx,
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
        global_batch_size=global_batch_size,
        interval=interval,
        history_every=history_every,
    )

    class ProgressCallback(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.tracker = tracker
            self._batch_began: float | None = None
            self._replicas = 1
            self._evaluating: Any = None

        def set_model(self, model):
            super().set_model(model)
            # Under parameter servers Keras passes batch hooks RemoteValues (steps run asynchronously)
            # and refuses batch hooks of callbacks that do not say they take them; they are not read.
            strategy = getattr(model, "distribute_strategy", None)
            self._supports_tf_logs = isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)

        def _global_step(self) -> int | None:
            optimizer = getattr(self.model, "optimizer", None)
            iterations = getattr(optimizer, "iterations", None)
            return None if iterations is None else int(iterations.numpy())

        def on_train_begin(self, logs=None):
            self._replicas = replicas_summed(self.model)
            params = self.params or {}
            if tracker.steps_per_epoch is None and params.get("steps"):
                tracker.steps_per_epoch = int(params["steps"])
            if tracker.epochs is None and params.get("epochs"):
                tracker.epochs = int(params["epochs"])
            tracker.begin(self._global_step() or 0)

        def on_train_batch_begin(self, batch, logs=None):
            self._batch_began = time.monotonic()

        def on_train_batch_end(self, batch, logs=None):
            began, self._batch_began = self._batch_began, None
            secs = time.monotonic() - began if began is not None else None
            logs = per_replica_mean(logs, self._replicas) if isinstance(logs, dict) else None
            tracker.step(logs, step=self._global_step(), step_secs=secs)

        def on_test_begin(self, logs=None):
            self._evaluating = tracker.phase("evaluating")
            self._evaluating.__enter__()

        def on_test_end(self, logs=None):
            evaluating, self._evaluating = self._evaluating, None
            if evaluating is not None:
                evaluating.__exit__(None, None, None)

        def on_epoch_end(self, epoch, logs=None):
            tracker.epoch_end(logs, step=self._global_step(), epoch=None if tracker.steps_per_epoch else epoch + 1)

        def on_train_end(self, logs=None):
            tracker.finish(logs, step=self._global_step())

    return ProgressCallback()
