"""The context handed to a node's ``main_fun(args, ctx)``."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_tfos.runtime.node.cluster import CHIEF, MASTER, PS, WORKER

if TYPE_CHECKING:
    from airflow_tfos.runtime.feed.dataset import FeedShare
    from airflow_tfos.runtime.feed.files import WorkerFiles
    from airflow_tfos.runtime.feed.service import DataService


@dataclass
class NodeContext:
    """Where a TF node stands in its cluster and where its files go.

    Field names follow TensorFlowOnSpark's context, so programs written for it keep working.

    :param executor_id: the node's number, 0..N-1 (TFoS: ``executor_id``/``worker_num``).
    :param job_name: ``ps``, ``chief``, ``master``, ``evaluator`` or ``worker``.
    :param task_index: the node's index within its job.
    :param cluster_spec: job name to the ``host:port`` of its nodes.
    :param num_workers: number of nodes that run the training loop (chief/master and workers).
    :param num_nodes: number of nodes of every kind.
    :param host: the address this node's TF server is reachable on.
    :param port: the port reserved for this node's TF server.
    :param run_dir: the run's directory (URI or local path), or None when the run has none.
    :param working_dir: the executor's working directory when the node started.
    :param default_fs: Hadoop's ``fs.defaultFS`` of the Spark application.
    :param attempt: the run's attempt: 0 on the first TF cluster, then 1, 2... after each recovery.
    :param gpus: GPU addresses Spark assigned to this node (also in CUDA_VISIBLE_DEVICES).
    :param tensorboard_url: where TensorBoard serves this run, when this node started it.
    :param log_dir: TensorBoard's log directory.
    :param feed_shares: InputMode.SPARK: this node's share of the training (``train``) and validation
        (``validation``) data, spilled on its executor.
    :param mgr: TFoS programs' feed handle (``DataFeed(ctx.mgr)``), for RDDs fed by ``TFCluster.train``.
    :param data_service: under parameter servers, the tf.data service that serves the workers' shares
        (:mod:`~airflow_tfos.runtime.feed.service`), or None.
    :param warm_start: an exported model to start training from when the run has no checkpoint (the
        spec's ``warm_start``): a SavedModel directory, or a run directory whose ``export/`` to use.
        :meth:`~airflow_tfos.runtime.program.checkpoint.RunCheckpointer.restore` loads it. None: none.
    """

    executor_id: int
    job_name: str
    task_index: int
    cluster_spec: dict[str, list[str]]
    num_workers: int
    num_nodes: int
    host: str
    port: int
    run_dir: str | None = None
    working_dir: str = field(default_factory=os.getcwd)
    default_fs: str = "file://"
    attempt: int = 0
    gpus: list[str] = field(default_factory=list)
    tensorboard_url: str | None = None
    log_dir: str | None = None
    feed_shares: dict[str, FeedShare] = field(default_factory=dict)
    mgr: Any = None
    warm_start: str | None = None
    data_service: DataService | None = None

    # --- InputMode.SPARK -------------------------------------------------------------------------

    def _share(self, split: str) -> FeedShare:
        if split not in self.feed_shares:
            if not self.feed_shares:
                raise RuntimeError(
                    f"node {self.job_name}:{self.task_index} has no data fed from Spark: pass data= (and feed=) "
                    "to run(), and read it on the chief/master and workers only"
                )
            raise RuntimeError(f"no {split} data was fed: pass validation_data= to run()")
        return self.feed_shares[split]

    @property
    def steps_per_epoch(self) -> int:
        """Batches per epoch of the training data: the same on every node. Under parameter servers, the
        steps the chief schedules for one epoch: every worker's batches, every row once."""
        share = self._share("train")
        return share.native.steps_per_epoch if share.native is not None else share.steps_per_epoch

    @property
    def validation_steps(self) -> int | None:
        """Batches per pass over the validation data (as :attr:`steps_per_epoch`), or None without it."""
        share = self.feed_shares.get("validation")
        if share is None:
            return None
        return share.native.steps_per_epoch if share.native is not None else share.steps_per_epoch

    @property
    def dataset_fn(self):
        """Under parameter servers: the function to give ``coordinator.create_per_worker_dataset`` or Keras
        ``tf.keras.utils.experimental.DatasetCreator``. It yields the workers' shares, read from their local
        disks by TensorFlow's ops and served through the tf.data service, pass after pass without end: each
        batch to whichever worker asks first, every row once per pass. Schedule :attr:`steps_per_epoch`
        steps per pass (Keras: ``steps_per_epoch=ctx.steps_per_epoch``). A worker may hold a batch it
        fetched ahead when another starts the next pass, so an epoch of steps can end up to one batch per
        worker before or after a pass does; :attr:`epoch_dataset_fn` ends each epoch on its pass."""
        return self._native("train").dataset_fn(repeat=True, service=self.data_service)

    @property
    def validation_dataset_fn(self):
        """:attr:`dataset_fn` for the validation data (``validation_steps=ctx.validation_steps``), or None."""
        if "validation" not in self.feed_shares:
            return None
        return self._native("validation").dataset_fn(repeat=True, service=self.data_service)

    @property
    def epoch_dataset_fn(self):
        """Like :attr:`dataset_fn`, but each iterator ends after one pass: for custom loops that make an
        iterator per epoch (``iter(per_worker_dataset)``), take batches with ``iterator.get_next_as_optional()``
        and schedule steps until they have counted :attr:`steps_per_epoch` batches. Each epoch then trains on
        every row exactly once, whichever worker runs each step and however fast."""
        return self._native("train").dataset_fn(repeat=False, service=self.data_service)

    def _native(self, split: str):
        share = self._share(split)
        if share.native is None:
            raise RuntimeError(
                "ctx.dataset_fn is for ParameterServerStrategy (num_ps > 0 and a chief); this node reads its "
                "own data: use ctx.dataset() (and ctx.validation_dataset())"
            )
        return share.native

    def dataset(self, split: str = "train"):
        """This node's data as a ``tf.data.Dataset`` of ``(features, label)`` batches, one epoch long
        (``steps_per_epoch`` batches); every iteration replays it from the executor's local disk."""
        from airflow_tfos.runtime.feed.dataset import make_dataset

        return make_dataset(self._local(split))

    def _local(self, split: str) -> FeedShare:
        share = self._share(split)
        if share.native is not None:
            name = "dataset_fn" if split == "train" else "validation_dataset_fn"
            raise RuntimeError(
                f"under parameter servers the chief coordinates and the workers read the data, each its own "
                f"share: instead of ctx.dataset() use coordinator.create_per_worker_dataset(ctx.{name}), or "
                f"model.fit(tf.keras.utils.experimental.DatasetCreator(ctx.{name}), "
                "steps_per_epoch=ctx.steps_per_epoch, ...)"
            )
        return share

    def validation_dataset(self):
        """The validation data as a ``tf.data.Dataset``, or None when none was fed."""
        return self.dataset("validation") if "validation" in self.feed_shares else None

    def batches(self, split: str = "train", epoch: int = 0):
        """Iterate one epoch of this node's data as NumPy batches (for loops that do not use tf.data)."""
        from airflow_tfos.runtime.feed.dataset import iter_epoch

        return iter_epoch(self._local(split), epoch)

    # --- InputMode.TENSORFLOW --------------------------------------------------------------------

    def shard_files(self, paths) -> list[str]:
        """This node's share of ``paths`` (a path, directory, glob, or list of them): files dealt by size
        over the training nodes, the same split on every node. Parameter servers and evaluators get all.
        Under ParameterServerStrategy the workers, not the chief, read data: use :meth:`worker_files`."""
        from airflow_tfos.runtime.feed.files import list_files, shard_files

        files = list_files(paths)
        if self.training_rank is None:
            return sorted(f.path for f in files)
        return [f.path for f in shard_files(files, self.num_workers, self.training_rank)]

    def worker_files(self, paths) -> WorkerFiles:
        """Under parameter servers: ``paths`` (as :meth:`shard_files` takes them) dealt over the workers, for
        datasets that each worker reads itself with TensorFlow's ops: ``files.dataset_fn(read)`` for
        ``create_per_worker_dataset`` or ``DatasetCreator``, ``files.steps_per_epoch(read)`` for the steps
        of one epoch (see :class:`~airflow_tfos.runtime.feed.files.WorkerFiles`)."""
        from airflow_tfos.runtime.feed.files import WorkerFiles, list_files

        if not self._ps_coordinated:
            raise RuntimeError(
                "ctx.worker_files is for ParameterServerStrategy (num_ps > 0 and a chief), where the workers "
                "read the data; here each training node reads its own share: use ctx.shard_files()"
            )
        return WorkerFiles.deal(list_files(paths), len(self.cluster_spec.get(WORKER, [])), self.data_service)

    @property
    def _ps_coordinated(self) -> bool:
        return PS in self.cluster_spec and any(job in self.cluster_spec for job in (CHIEF, MASTER))

    def get_data_feed(self, train_mode=True, qname_in="input", qname_out="output", input_mapping=None):
        """TFoS: ``TFNode.DataFeed(ctx.mgr, ...)`` over the rows fed by ``TFCluster.train``/``inference``."""
        from airflow_tfos.runtime.feed.rows import DataFeed

        return DataFeed(self.mgr, train_mode, qname_in, qname_out, input_mapping)

    @property
    def worker_num(self) -> int:
        """TFoS's name for :attr:`executor_id`."""
        return self.executor_id

    @property
    def defaultFS(self) -> str:
        """TFoS's name for :attr:`default_fs`."""
        return self.default_fs

    @property
    def is_chief(self) -> bool:
        """Whether this node coordinates training: the chief/master, or worker 0 when there is none."""
        if self.job_name in (CHIEF, MASTER):
            return True
        has_chief = any(job in self.cluster_spec for job in (CHIEF, MASTER))
        return self.job_name == WORKER and self.task_index == 0 and not has_chief

    @property
    def training_rank(self) -> int | None:
        """This node's rank among the training nodes (chief/master first, then the workers), for
        sharding data; None on parameter servers and evaluators."""
        if self.job_name in (CHIEF, MASTER):
            return 0
        if self.job_name != WORKER:
            return None
        has_chief = any(job in self.cluster_spec for job in (CHIEF, MASTER))
        return self.task_index + (1 if has_chief else 0)

    @property
    def tf_config(self) -> dict[str, Any]:
        """The TF_CONFIG this node runs with, as a dict."""
        return json.loads(os.environ.get("TF_CONFIG", "{}"))

    @property
    def tmp_socket(self) -> None:
        """TFoS reserved the TF port with a socket kept open until ``release_port``; the port is
        already free when ``main_fun`` starts here, so there is no socket to hand out."""
        return None

    def release_port(self) -> None:
        """Kept for TFoS programs: the port is released before ``main_fun`` starts."""

    def absolute_path(self, path: str) -> str:
        """Turn ``path`` into a full URI as TFoS's ``TFNode.hdfs_path`` did (see there)."""
        from airflow_tfos.runtime.program.paths import absolute_path

        return absolute_path(path, default_fs=self.default_fs, working_dir=self.working_dir)
