"""Feeding RDD rows to TensorFlowOnSpark programs (``TFCluster.train``/``inference``, ``DataFeed``).

TFoS pushed every row through a multiprocessing queue. Here the Spark task writes its partition to
local disk in pickled chunks of rows (:func:`~airflow_tfos.runtime.feed.spill.spill_rows`) and the
node's :class:`DataFeed` slices batches out of those chunks; a small progress file lets the task
notice a feed that is not being read (``feed_timeout``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from airflow_tfos.runtime.node.cluster import NodeRole
from airflow_tfos.shared.errors import FeedConfigError

ROWS_FILE = "rows.pickles"
RESULTS_FILE = "results.pickles"
PROGRESS_FILE = "feed.progress"


@dataclass(frozen=True)
class RowFeed:
    """How a TFoS-style feed runs.

    :param epochs: passes over the data (TFoS ``num_epochs``).
    :param train_mode: training (rows balanced across nodes) or inference (rows in, one result out each).
    :param feed_timeout: seconds the node may leave its feed unread before the run fails.
    """

    epochs: int = 1
    train_mode: bool = True
    feed_timeout: float = 600.0

    def spill(self, rows: Iterable, node_dir: str) -> int:
        from airflow_tfos.runtime.feed.spill import spill_rows

        return spill_rows(rows, os.path.join(node_dir, ROWS_FILE))

    def manager(
        self, infos: Sequence[dict], roles: Sequence[NodeRole], me: NodeRole, node_dir: str
    ) -> RowFeedManager | None:
        """The feed of node ``me``; training nodes get equal rows per epoch (short ones repeat rows)."""
        from airflow_tfos.runtime.feed.spark_side import training_order

        order = training_order(roles)
        if me not in order:
            return None
        counts = [infos[r.executor_id]["rows"] for r in order]
        if self.train_mode and sum(counts) == 0:
            raise FeedConfigError("the RDD given to TFCluster.train is empty: nothing to train on")
        mine = infos[me.executor_id]["rows"]
        per_epoch = max(counts) if self.train_mode and mine else mine
        return self.manager_for(node_dir, rows=mine, rows_per_epoch=per_epoch, label=me.label)

    def describe(self, infos: Sequence[dict], roles: Sequence[NodeRole]) -> list[str]:
        """Lines for the driver's log: the rows each training node feeds per epoch, and how many it repeats."""
        from airflow_tfos.runtime.feed.spark_side import training_order

        if not self.train_mode:
            return []
        order = training_order(roles)
        counts = [infos[r.executor_id]["rows"] for r in order]
        per_epoch = max(counts)
        parts = [
            f"{r.label} {c} rows" + (f" (+{per_epoch - c} repeated)" if 0 < c < per_epoch else "")
            for r, c in zip(order, counts, strict=True)
        ]
        return [f"TFCluster.train: {self.epochs} epoch(s) of {per_epoch} rows on every node: " + ", ".join(parts)]

    def manager_for(self, node_dir: str, *, rows: int, rows_per_epoch: int, label: str) -> RowFeedManager:
        """The feed handle of rows spilled by :meth:`spill` into ``node_dir``."""
        return RowFeedManager(
            path=os.path.join(node_dir, ROWS_FILE),
            rows=rows,
            rows_per_epoch=rows_per_epoch,
            epochs=self.epochs,
            progress_path=os.path.join(node_dir, PROGRESS_FILE),
            results_path=os.path.join(node_dir, RESULTS_FILE),
            feed_timeout=self.feed_timeout,
            label=label,
        )


@dataclass
class RowFeedManager:
    """A node's rows on local disk: what TFoS programs reach as ``ctx.mgr``."""

    path: str
    rows: int
    rows_per_epoch: int
    epochs: int
    progress_path: str
    results_path: str
    feed_timeout: float
    label: str = ""
    _seen: tuple = field(default=(None, 0.0), repr=False)

    @property
    def total(self) -> int:
        return self.rows_per_epoch * self.epochs

    def balance_record(self) -> dict[str, int]:
        """What one epoch feeds of this node's rows, for the ``feed`` event (short nodes repeat rows)."""
        return {"rows_per_epoch": self.rows_per_epoch, "repeated": self.rows_per_epoch - self.rows, "dropped": 0}

    def stalled(self) -> str | None:
        """On the Spark task's side: a message if the feed went unread for ``feed_timeout`` seconds."""
        now = time.monotonic()
        try:
            with open(self.progress_path) as f:
                progress = f.read()
        except OSError:
            progress = ""
        if progress != self._seen[0]:
            self._seen = (progress, now)
            return None
        if progress.startswith("done") or now - self._seen[1] < self.feed_timeout:
            return None
        read = int(progress or 0)
        if read >= self.total:
            return None
        return (
            f"Timeout while feeding partition: TF node {self.label} read {read} of its {self.total} rows and then "
            f"nothing for feed_timeout={self.feed_timeout:g} s; map_fun must call DataFeed.next_batch until "
            "should_stop() (or DataFeed.terminate() to stop early)"
        )


class DataFeed:
    """TFoS's DataFeed: batches of rows for ``map_fun``, and results back for inference.

    :param mgr: ``ctx.mgr``.
    :param train_mode: training (True) or inference (False).
    :param qname_in: kept for TFoS programs (one input feed per node here).
    :param qname_out: kept for TFoS programs.
    :param input_mapping: column name to tensor name; ``next_batch`` then returns a dict of
        ``{tensor name: [values]}`` with columns taken in sorted column-name order, as TFoS did.
    """

    def __init__(self, mgr, train_mode=True, qname_in="input", qname_out="output", input_mapping=None):
        if mgr is None:
            raise RuntimeError("this node has no data feed: only training nodes of an InputMode.SPARK cluster do")
        self.mgr = mgr
        self.train_mode = train_mode
        self.qname_in = qname_in
        self.qname_out = qname_out
        self.done_feeding = False
        self.input_tensors = [tensor for _, tensor in sorted(input_mapping.items())] if input_mapping else None
        self._chunks = self._iterate_chunks()
        self._buffer: list = []
        self._offset = 0
        self._read = 0
        self._last_report = 0.0
        self._results = None

    def _iterate_chunks(self) -> Iterator[list]:
        from airflow_tfos.runtime.feed.spill import read_row_chunks

        for _ in range(self.mgr.epochs):
            left = self.mgr.rows_per_epoch
            while left > 0:
                for chunk in read_row_chunks(self.mgr.path):
                    part = chunk[:left]
                    left -= len(part)
                    yield part
                    if left <= 0:
                        break
                if self.mgr.rows == 0:
                    break

    def next_batch(self, batch_size):
        """Return up to ``batch_size`` rows (fewer at the end of the feed; empty once it is done)."""
        batch: list = []
        while len(batch) < batch_size and not self.done_feeding:
            if self._offset >= len(self._buffer):
                try:
                    self._buffer, self._offset = next(self._chunks), 0
                except StopIteration:
                    self.done_feeding = True
                    break
            take = self._buffer[self._offset : self._offset + batch_size - len(batch)]
            self._offset += len(take)
            batch.extend(take)
        self._read += len(batch)
        self._report()
        if self.input_tensors is None:
            return batch
        return {tensor: [row[i] for row in batch] for i, tensor in enumerate(self.input_tensors)}

    def should_stop(self):
        """Whether the feed is done (every row of every epoch has been returned, or terminate() was called)."""
        return self.done_feeding

    def batch_results(self, results):
        """Send back one result per input row (inference)."""
        import pickle

        if self._results is None:
            self._results = open(self.mgr.results_path, "ab")  # noqa: SIM115 - closed by terminate()/exit
        pickle.dump(list(results), self._results, protocol=pickle.HIGHEST_PROTOCOL)
        self._results.flush()

    def terminate(self):
        """Stop the feed early; the remaining rows are not read."""
        self.done_feeding = True
        self._report(final=True)
        if self._results is not None:
            self._results.close()
            self._results = None

    def _report(self, final: bool = False) -> None:
        now = time.monotonic()
        if not final and not self.done_feeding and now - self._last_report < 0.5:
            return
        self._last_report = now
        text = "done" if (final or self.done_feeding) else str(self._read)
        tmp = self.mgr.progress_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.mgr.progress_path)
