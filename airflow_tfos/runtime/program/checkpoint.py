"""Checkpoints published to the run directory, and training that resumes from them.

Follows TensorFlow's multi-worker rules: every worker takes part in each save (a collective under
MultiWorkerMirroredStrategy), the chief writes the real checkpoint and the others write to a
throw-away directory. Under ParameterServerStrategy only the chief (the coordinator) runs the program:
it alone saves and restores, reading and writing the variables on the parameter servers, and waits
for the steps it scheduled (``ClusterCoordinator.join``) before each save, so that a checkpoint's
variables are those of its step. The chief writes under a temporary name, renames it into place,
then names it in the manifest (:mod:`airflow_tfos.shared.rundir`), so a crash mid-save leaves the
previous checkpoint in charge. On every start of a TF cluster, :meth:`RunCheckpointer.restore` loads
the latest one: weights, optimizer state, and the global step (hence the epoch and the position
within it).

TensorFlow writes only to local disk here (TF 2.21 has no HDFS file system), so with a remote run
directory (``webhdfs://``, ``hdfs://``) the chief writes each checkpoint and export into a local
temporary directory and uploads it to the staging path (``Storage.put_dir``) before publishing it;
a restore downloads the latest checkpoint into a local temporary directory first.

    ckpt = RunCheckpointer(ctx, model=model, every_steps=50)
    fit_resumable(model, ctx.dataset(), epochs=10, steps_per_epoch=ctx.steps_per_epoch, checkpointer=ckpt)

Warm start: when the run has no checkpoint yet and ``ctx.warm_start`` names an exported model (the
spec's ``warm_start``), :meth:`RunCheckpointer.restore` starts from that model's weights instead of
from scratch. A published checkpoint always wins, so a retry resumes where it stopped. ``warm_start``
is either a SavedModel directory written by :func:`export_model` or a run directory whose ``export/``
holds one (``<path>/export/saved_model.pb`` is looked for first), as a local path, ``file://``,
``hdfs://`` or ``webhdfs://`` URI; remote models are downloaded to a local temporary directory first.
A path without a model there (the first night of a nightly DAG) trains from scratch.

To know before training whether it resumes or starts from a warm start, call ``restore()`` first:
it loads once per checkpointer and sets :attr:`RunCheckpointer.restored_step` and
:attr:`RunCheckpointer.warm_started`; :func:`fit_resumable` calls it again, which then does nothing::

    ckpt = RunCheckpointer(ctx, model=model, every_steps=50)
    start = ckpt.restore()          # 0: from scratch or from ckpt.warm_started; > 0: a resume
    fit_resumable(model, ctx.dataset(), epochs=10, steps_per_epoch=ctx.steps_per_epoch, checkpointer=ckpt)
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import weakref
from typing import Any

from airflow_tfos.runtime.errors import WarmStartError
from airflow_tfos.runtime.feed.dataset import replays_epochs, start_epoch
from airflow_tfos.runtime.program.export import fence, find_warm_start, load_weights_from, local_dir_for
from airflow_tfos.runtime.program.progress import node_phase
from airflow_tfos.shared import events
from airflow_tfos.shared.rundir import RunDir

log = logging.getLogger(__name__)


class RunCheckpointer:
    """Save and restore one training run's state in its run directory.

    :param ctx: the node's context (its ``run_dir`` must be set).
    :param model: the Keras model; its optimizer is saved with it (``model.optimizer``).
    :param every_steps: save every this many global steps (the optimizer's iteration count).
    :param every_secs: save when this many seconds have passed since the last save. Workers' clocks
        differ, so every ``check_every`` steps they agree (one small all-reduce) on whether any of them
        is due, and all save together.
    :param check_every: how often, in steps, the time-based rule is checked.
    :param keep: how many checkpoints to keep.
    :param strategy: the distribution strategy (default: the model's).
    :param trackables: more objects to save with the model (e.g. a custom loop's optimizer).

    After :meth:`restore`, ``restored_step`` is the global step training starts at (0 from scratch or
    from a warm start) and ``warm_started`` the path of the model whose weights it starts from (None
    when it resumes from a checkpoint or starts from scratch).
    """

    def __init__(
        self,
        ctx,
        *,
        model,
        every_steps: int | None = 100,
        every_secs: float | None = None,
        check_every: int = 10,
        keep: int = 3,
        strategy=None,
        **trackables: Any,
    ):
        import tensorflow as tf

        if not ctx.run_dir:
            raise ValueError("checkpoints go to the run directory: pass run_dir= to run() (or TFClusterRun)")
        if every_steps is None and every_secs is None:
            raise ValueError("say when to checkpoint: every_steps=N and/or every_secs=T")
        if every_steps is not None and every_steps < 1:
            raise ValueError(f"every_steps must be at least 1, got {every_steps}")
        if check_every < 1:
            raise ValueError(f"check_every must be at least 1, got {check_every}")
        self.ctx = ctx
        self.model = model
        self.every_steps = every_steps
        self.every_secs = every_secs
        self.check_every = check_every
        self.keep = keep
        self.strategy = strategy or getattr(model, "distribute_strategy", None) or tf.distribute.get_strategy()
        #: Under ParameterServerStrategy: the chief alone saves, after the steps in flight are done.
        self.coordinated = uses_parameter_servers(self.strategy)
        self._saved_at = time.monotonic()
        self.rundir = RunDir(ctx.run_dir)
        self._checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, **trackables)
        self.last_saved = -1
        self.restored_step: int | None = None
        #: (epochs done, batches of the next one done) as the restored checkpoint recorded them, when it did
        self.restored_position: tuple[int, int] | None = None
        self.warm_started: str | None = None

    @property
    def step(self) -> int:
        """The global step: how many optimizer updates the model has had."""
        return int(self.model.optimizer.iterations.numpy())

    def restore(self) -> int:
        """Load the latest published checkpoint, or else the warm-start model; return the step training
        starts at (0 without a checkpoint).

        Every training node must call it (a warm start is agreed on collectively). It loads once per
        checkpointer: later calls return the same step and leave the model alone, so a program may call
        it before :func:`fit_resumable` to learn how training starts.
        """
        if self.restored_step is not None:
            return self.restored_step
        with node_phase("restoring"):
            return self._restore()

    def _restore(self) -> int:
        if self.ctx.is_chief:
            dropped = self.rundir.discard_staging()
            if dropped:
                log.warning("dropped %d checkpoint(s) left half-written by a crash", dropped)
        latest = self.rundir.latest_checkpoint()
        if latest is None:
            if getattr(self.ctx, "warm_start", None):
                self._warm_start(self.ctx.warm_start)
            self.restored_step = 0
            return 0
        local = self.rundir.storage.local_path(latest.path)
        if local is None:  # remote: download it; kept until this checkpointer goes (restores may be deferred)
            local = tempfile.mkdtemp(prefix="airflow-tfos-restore-")
            weakref.finalize(self, shutil.rmtree, local, True)
            self.rundir.storage.get_dir(latest.path, local)
        self._checkpoint.read(os.path.join(local, "ckpt")).assert_existing_objects_matched()
        self.last_saved = latest.step
        if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (latest.epoch, latest.in_epoch)):
            self.restored_position = (latest.epoch, latest.in_epoch)
        if self.ctx.is_chief:
            self.rundir.add_event(
                "restore",
                step=latest.step,
                epoch=latest.epoch,
                in_epoch=latest.in_epoch,
                attempt=self.ctx.attempt,
                checkpoint=latest.path,
            )
        log.info("restored checkpoint of step %d from %s", latest.step, latest.path)
        self.restored_step = latest.step
        return latest.step

    def _warm_start(self, requested: str) -> None:
        import tensorflow as tf

        found = find_warm_start(requested)
        # Under MultiWorkerMirroredStrategy every node sets its own copy of the weights: all must find the model.
        collective = self.ctx.num_workers > 1 and isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy)
        agreed = self._count_workers(found is not None) if collective else self.ctx.num_workers * (found is not None)
        if agreed not in (0, self.ctx.num_workers):
            raise WarmStartError(
                f"warm_start {requested} has a model for {agreed} of {self.ctx.num_workers} training nodes only: "
                "put it where every node reads the same files (HDFS, or a shared file system)"
            )
        if found is None:
            log.warning("no model at %s: training from scratch", requested)
            if self.ctx.is_chief:
                self.rundir.add_event("warm_start_missing", path=requested, attempt=self.ctx.attempt)
            return
        path, success = found
        started = time.monotonic()
        load_weights_from(self.model, path)
        self.warm_started = path
        source_step = (success or {}).get("step")
        log.info("warm start: weights of %s (step %s) loaded in %.2f s", path, source_step, time.monotonic() - started)
        if self.ctx.is_chief:
            self.rundir.add_event(
                "warm_start",
                path=path,
                requested=requested,
                source_step=source_step,
                source_spec_hash=(success or {}).get("spec_hash"),
                source_metrics=(success or {}).get("metrics"),
                attempt=self.ctx.attempt,
            )

    def save(self, epoch: int | None = None, in_epoch: int | None = None) -> None:
        """Save now (every worker must call this at the same step); the chief publishes its copy.

        ``epoch``: epochs done; ``in_epoch``: batches of the next one done (recorded for
        :func:`fit_resumable`, which resumes there). Under parameter servers the chief alone calls it; it
        first waits for the steps scheduled so far.
        """
        if self.coordinated:
            import tensorflow as tf

            tf.distribute.experimental.coordinator.ClusterCoordinator(self.strategy).join()
        step = self.step
        if step == self.last_saved:
            return
        with node_phase("checkpointing"):
            self._save(step, epoch, in_epoch)

    def _save(self, step: int, epoch: int | None, in_epoch: int | None = None) -> None:
        started = time.monotonic()
        if self.ctx.is_chief:
            staging = self.rundir.checkpoint_staging(step)
            with local_dir_for(self.rundir.storage, staging) as local:
                self._checkpoint.write(os.path.join(local, "ckpt"))
            fence(self.ctx, self.rundir, staging)
            published = self.rundir.publish_checkpoint(staging, step, epoch=epoch, in_epoch=in_epoch, keep=self.keep)
            self.rundir.add_event(
                "checkpoint",
                step=step,
                epoch=epoch,
                in_epoch=in_epoch,
                seconds=round(time.monotonic() - started, 3),
                path=published.path,
                attempt=getattr(self.ctx, "attempt", 0),
            )
        else:
            scratch = tempfile.mkdtemp(prefix="airflow-tfos-ckpt-")
            try:
                self._checkpoint.write(os.path.join(scratch, "ckpt"))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        self.last_saved = step
        self._saved_at = time.monotonic()

    def maybe_save(self, epoch: int | None = None, *, step: int | None = None, in_epoch: int | None = None) -> None:
        """Save if a rule says so; every worker calls it after every step and reaches the same answer.

        ``step`` is the global step the rules are applied to (default: the optimizer's). Under parameter
        servers steps run asynchronously and the optimizer's count lags behind: pass the number of steps
        scheduled so far, or call it after ``coordinator.join()``.
        """
        if step is None:
            step = self.step
        due = bool(self.every_steps) and step % self.every_steps == 0
        if not due and self.every_secs is not None and step % self.check_every == 0:
            due = self._any_worker(time.monotonic() - self._saved_at >= self.every_secs)
        if due:
            self.save(epoch, in_epoch)

    def _any_worker(self, flag: bool) -> bool:
        return self._count_workers(flag) > 0

    def _count_workers(self, flag: bool) -> int:
        """How many training nodes pass ``flag`` true (a small all-reduce that every node must join)."""
        import tensorflow as tf

        if self.ctx.num_workers <= 1 or self.coordinated:  # under parameter servers the chief decides alone
            return int(flag)
        value = self.strategy.experimental_distribute_values_from_function(
            lambda _: tf.constant(1 if flag else 0, tf.int32)
        )
        return int(self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None).numpy())

    def keras_callback(self, steps_per_epoch: int):
        """A Keras callback saving every ``every_steps`` steps and at the end of training; each checkpoint
        records the epochs done and the batches of the next one (its ``position``: the epoch and batch
        that ``fit``'s epoch 0, batch 0 stand for, set by :func:`fit_resumable` before each ``fit``)."""
        import tensorflow as tf

        checkpointer = self

        class _Save(tf.keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                # The logs are not read: under parameter servers Keras passes batch hooks RemoteValues,
                # and refuses batch hooks of callbacks that do not say they take them.
                self._supports_tf_logs = True
                self._scheduled = 0
                self._epoch_start = 0
                self.position = (0, 0)
                self._epoch = 0
                self._done = (0, 0)

            def on_train_begin(self, logs=None):
                self._scheduled = checkpointer.step  # nothing in flight yet

            def on_epoch_begin(self, epoch, logs=None):
                self._epoch_start = self._scheduled
                self._epoch = epoch

            def _where(self, batch: int) -> tuple[int, int]:
                """(epochs done, batches of the next done) after ``batch`` of the current fit epoch."""
                first_epoch, first_batch = self.position
                epoch = first_epoch + self._epoch
                done = (first_batch if self._epoch == 0 else 0) + batch + 1
                return (epoch + 1, 0) if done >= steps_per_epoch else (epoch, done)

            def on_train_batch_end(self, batch, logs=None):
                self._done = self._where(batch)
                epoch, in_epoch = self._done
                if checkpointer.coordinated:  # steps run asynchronously: count those scheduled
                    self._scheduled = self._epoch_start + batch + 1
                    checkpointer.maybe_save(epoch=epoch, step=self._scheduled, in_epoch=in_epoch)
                else:
                    checkpointer.maybe_save(epoch=epoch, in_epoch=in_epoch)

            def on_train_end(self, logs=None):
                checkpointer.save(*self._done)

        return _Save()


def fit_resumable(
    model,
    dataset,
    *,
    epochs: int,
    steps_per_epoch: int,
    checkpointer: RunCheckpointer,
    progress: bool = True,
    **fit_kwargs,
):
    """``model.fit`` that restores the latest checkpoint first and carries on from its exact step.

    ``dataset`` must yield one epoch of ``steps_per_epoch`` batches per iteration (``ctx.dataset()`` does;
    a dataset whose length tf.data cannot know, such as ``parquet_dataset``'s, is held to that length: see
    :func:`one_pass_per_epoch`). Which rows a resumed epoch trains:

    - ``ctx.dataset()`` (one node, MultiWorkerMirroredStrategy): a run restored mid-epoch first finishes
      that epoch, read in the order the interrupted attempt read it (its shuffle is seeded by the epoch),
      without the batches the checkpoint had trained on: every row of the epoch once, counting the
      batches before the checkpoint. Batches trained after the last checkpoint are lost with the attempt
      and trained again. Then it runs the remaining epochs.
    - Under parameter servers ``dataset`` is a Keras ``DatasetCreator`` (of ``ctx.dataset_fn``), whose
      batches go to whichever worker asks first: which batches an interrupted epoch trained cannot be told
      apart, so a run restored mid-epoch trains that epoch again in full, every row once more (the rows of
      the ``in_epoch`` batches before the checkpoint are trained twice in that epoch, none is skipped).

    The checkpoints record the epochs done and the batches of the next (:meth:`RunCheckpointer.save`), so a
    redone epoch keeps later resumes in place. Without a checkpoint it starts from the warm-start model when
    the run has one (:meth:`RunCheckpointer.restore`, which it calls; calling it first is harmless).
    With ``progress`` (default) it reports progress to the run directory
    (:func:`airflow_tfos.runtime.program.keras_progress.progress_callback`; pass ``progress=False`` when ``callbacks``
    holds one of your own). Returns the histories of the fits it ran: none when the checkpoint it restored had
    trained every epoch (a fresh TF cluster after the last one had finished, e.g. once an executor stopped
    answering at the end): take the model's metrics from ``model.evaluate`` then, not from the histories.
    """
    dataset = one_pass_per_epoch(dataset, steps_per_epoch)
    start = checkpointer.restore()
    epoch, done_in_epoch = checkpointer.restored_position or divmod(start, steps_per_epoch)
    saver = checkpointer.keras_callback(steps_per_epoch)
    if progress:
        from airflow_tfos.runtime.program.keras_progress import progress_callback

        # First, so that a step's time does not include the other callbacks' work (e.g. saving).
        tracker = progress_callback(checkpointer.ctx, steps_per_epoch=steps_per_epoch, epochs=epochs)
        callbacks = [tracker, *fit_kwargs.pop("callbacks", []), saver]
    else:
        callbacks = [*fit_kwargs.pop("callbacks", []), saver]
    histories = []
    if epoch < epochs and done_in_epoch:
        why_not = _why_not_skip(checkpointer, dataset, start)
        if why_not is None:
            rest = steps_per_epoch - done_in_epoch
            log.info("resuming at step %d: epoch %d, %d of its steps left", start, epoch, rest)
            start_epoch(dataset, epoch)
            saver.position = (epoch, done_in_epoch)
            rest_of_epoch = dataset.skip(done_in_epoch)
            histories.append(
                model.fit(rest_of_epoch, epochs=1, steps_per_epoch=rest, callbacks=callbacks, **fit_kwargs)
            )
            epoch += 1
        else:
            log.warning(
                "resuming at step %d in epoch %d, %d of its batches trained: the epoch is trained again in full "
                "(%s), so the rows of those batches are trained twice in it and none is skipped",
                start,
                epoch,
                done_in_epoch,
                why_not,
            )
            if checkpointer.ctx.is_chief:
                checkpointer.rundir.add_event(
                    events.EPOCH_REDONE,
                    epoch=epoch,
                    in_epoch=done_in_epoch,
                    step=start,
                    reason=why_not,
                    attempt=checkpointer.ctx.attempt,
                )
    if epoch >= epochs:
        log.info("restored step %d: all %d epochs were trained already, nothing left to fit", start, epochs)
    if epoch < epochs:
        start_epoch(dataset, epoch)
        saver.position = (0, 0)  # fit's own epoch numbers count from initial_epoch
        histories.append(
            model.fit(
                dataset,
                initial_epoch=epoch,
                epochs=epochs,
                steps_per_epoch=steps_per_epoch,
                callbacks=callbacks,
                **fit_kwargs,
            )
        )
    return histories


def one_pass_per_epoch(dataset, steps_per_epoch: int):
    """``dataset``, its length made known to Keras when tf.data cannot know it (files read as they come:
    ``parquet_dataset``, ``csv_dataset``, a generator): given ``steps_per_epoch``, Keras starts a new pass each
    epoch only when the dataset's length is that many batches; otherwise it reads on from the first pass, runs
    out of data early in the second epoch and stops training there, with a warning only. A pass of another
    length now fails with tf.data's error naming both numbers."""
    import tensorflow as tf

    if replays_epochs(dataset) or not isinstance(dataset, tf.data.Dataset):
        return dataset
    if int(dataset.cardinality()) != int(tf.data.UNKNOWN_CARDINALITY):
        return dataset
    log.info("the dataset's length is not known to tf.data: each epoch is one pass of %d batches", steps_per_epoch)
    return dataset.apply(tf.data.experimental.assert_cardinality(steps_per_epoch))


def _why_not_skip(checkpointer: RunCheckpointer, dataset, step: int) -> str | None:
    """Why a run restored mid-epoch cannot finish that epoch by skipping the batches trained already, or None
    when every training node can: its dataset is ``ctx.dataset()`` itself and replays its rows in the order
    the attempt that saved the checkpoint did (the same digest of its share's order). The nodes agree (an
    all-reduce under MultiWorkerMirroredStrategy): one that cannot makes them all train the epoch again.

    A dataset of the program's own (not ``ctx.dataset()``) is the program's to replay alike: its first batches
    are skipped, as ``Dataset.skip`` does, and the log says so."""
    ctx = checkpointer.ctx
    if checkpointer.coordinated or not hasattr(dataset, "skip"):
        return "under parameter servers each batch goes to whichever worker asks first: which it trained is not known"
    reason = None
    if not replays_epochs(dataset):
        log.info(
            "the dataset given to fit_resumable is the program's own, not ctx.dataset(): the resumed epoch skips "
            "its first batches, which are the batches trained before only if it yields them in the same order "
            "on every attempt"
        )
    else:
        share = (getattr(ctx, "feed_shares", None) or {}).get("train")
        was = _share_order_of(checkpointer.rundir, step, ctx) if share is not None and share.order else None
        if share is None or not share.order or was is None:
            reason = "the interrupted attempt's order of this node's rows is not known"
        elif was != share.order:
            reason = (
                "this node's rows come in another order than in the interrupted attempt (a DataFrame whose rows "
                "Spark computes anew in another order each time: cache or checkpoint it to resume in place)"
            )
    agreed = checkpointer._count_workers(reason is None)
    if reason is None and agreed < ctx.num_workers:
        reason = f"{ctx.num_workers - agreed} other training node(s) cannot replay the interrupted order"
    return reason


def _share_order_of(rundir: RunDir, step: int, ctx) -> str | None:
    """The order digest of this node's training share in the attempt that saved the checkpoint of ``step``."""
    try:
        saved = [e for e in rundir.events("checkpoint") if e.get("step") == step]
        if not saved:
            return None
        attempt = saved[-1].get("attempt")
        me = f"{ctx.job_name}:{ctx.task_index}"
        for event in reversed(rundir.events("feed")):
            if event.get("worker") == me and event.get("attempt") == attempt:
                return (event.get("orders") or {}).get("train")
    except Exception as exc:  # a run directory that cannot be read: the epoch is redone, nothing skipped
        log.warning("cannot read the interrupted attempt's feed records: %s", exc)
    return None


def uses_parameter_servers(strategy) -> bool:
    """Whether ``strategy`` is TensorFlow 2's ParameterServerStrategy (a ``ClusterCoordinator`` runs its steps)."""
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy)
