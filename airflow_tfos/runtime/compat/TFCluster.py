"""TensorFlowOnSpark's ``TFCluster`` module: ``run`` returns a cluster, ``shutdown`` waits for it.

Differences from TFoS 2.2.5, all in the direction of failing clearly:

- a failed node raises :class:`~airflow_tfos.runtime.errors.NodeFailedError` (with the node's role,
  index and traceback) from ``shutdown()`` instead of calling ``sys.exit(1)``;
- ``timeout`` is enforced without SIGALRM, so ``shutdown`` also works outside the main thread;
- TF nodes run in fresh processes, so several clusters can run one after another in one
  SparkContext (TFoS failed with "Collective ops are already configured");
- InputMode.SPARK: ``train()`` starts the nodes with their data and returns when ``map_fun`` has
  finished on every training node, raising its errors; each partition given to ``inference()`` runs
  ``map_fun`` in a node process of its own.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from airflow_tfos.runtime.compat.TFSparkNode import TFoSMain
from airflow_tfos.runtime.driver.launcher import TFClusterRun
from airflow_tfos.runtime.errors import ClusterConfigError
from airflow_tfos.runtime.feed.rows import RowFeed
from airflow_tfos.runtime.node.task import CLUSTER_INFO, run_inference_partition
from airflow_tfos.shared.storage.tokens import TokenKeeper

log = logging.getLogger(__name__)


class InputMode:
    """How a TFoS cluster gets its data."""

    TENSORFLOW = 0  #: each node reads its data itself (files, HDFS)
    SPARK = 1  #: Spark feeds the nodes from an RDD


class TFCluster:
    """A running TFoS-style cluster, as returned by :func:`run`."""

    def __init__(self, sc, make_run: Callable[..., TFClusterRun], input_mode: int, queues: Sequence[str]):
        self.sc = sc
        self.input_mode = input_mode
        self.queues = list(queues)
        self.working_dir = None
        self.defaultFS = None
        self._make_run = make_run
        self._run = make_run()
        self.num_executors = self._run.num_nodes
        self.cluster_id = self._run.cluster_id
        self._trained = False
        self._result = None
        self._tokens: TokenKeeper | None = None
        if input_mode == InputMode.TENSORFLOW:
            self._run.start()

    @property
    def cluster_info(self) -> list[dict]:
        """One dict per node (executor_id, job_name, task_index, host, port), once the nodes are up."""
        info = self._read_info()
        if not info:
            return []
        nodes = []
        for role in self._run.roles:
            endpoint = info["cluster_spec"][role.job_name][role.task_index]
            host, port = endpoint.rsplit(":", 1)
            nodes.append(
                {
                    "executor_id": role.executor_id,
                    "job_name": role.job_name,
                    "task_index": role.task_index,
                    "host": host,
                    "port": int(port),
                }
            )
        return nodes

    def _read_info(self) -> dict | None:
        path = Path(self._run.run_dir) / CLUSTER_INFO
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def train(self, dataRDD, num_epochs=0, feed_timeout=600, qname="input"):
        """Feed ``dataRDD`` to the training nodes ``num_epochs`` times (0 means 10, as in TFoS); wait for it.

        The RDD's rows are laid out round-robin over the chief/master and workers, spilled to each
        executor's disk once, and replayed per epoch; every node gets the same number of rows per epoch.
        """
        if self.input_mode != InputMode.SPARK:
            raise ValueError("TFCluster.train() requires InputMode.SPARK")
        if qname not in self.queues:
            raise ValueError(f"Unknown queue: {qname}")
        if num_epochs < 0:
            raise ValueError("num_epochs cannot be negative")
        if self._trained:
            raise RuntimeError("TFCluster.train() was already called on this cluster: run a new TFCluster.run()")
        epochs = num_epochs or 10
        self._run = self._make_run(data=dataRDD, row_feed=RowFeed(epochs=epochs, feed_timeout=float(feed_timeout)))
        self.cluster_id = self._run.cluster_id
        self._trained = True
        self._result = self._run.start().wait()

    def inference(self, dataRDD, feed_timeout=600, qname="input"):
        """Return an RDD with ``map_fun``'s result for every row of ``dataRDD``, in order (lazy).

        Each partition is fed to a node process of its own, running ``map_fun`` with
        ``DataFeed(ctx.mgr, train_mode=False)``; it must call ``batch_results`` once per row.
        """
        if self.input_mode != InputMode.SPARK:
            raise ValueError("TFCluster.inference() requires InputMode.SPARK")
        if qname not in self.queues:
            raise ValueError(f"Unknown queue: {qname}")
        job = self._make_run(
            data=dataRDD, row_feed=RowFeed(train_mode=False, feed_timeout=float(feed_timeout))
        ).node_job()
        if self._tokens is None:  # HDFS with Kerberos: the node processes get a delegation token, until shutdown()
            self._tokens = TokenKeeper.for_hdfs(self._run.run_dir, f"TF cluster {self.cluster_id} inference")
        if self._tokens is not None:
            job = dataclasses.replace(job, webhdfs_token=self._tokens.token)
        return dataRDD.mapPartitionsWithIndex(lambda index, rows: run_inference_partition(job, index, rows))

    def shutdown(self, ssc=None, grace_secs=0, timeout=259200):
        """Wait for the nodes to finish, then stop the ps/evaluator nodes.

        :param ssc: a StreamingContext; Spark Streaming is not supported and must be None.
        :param grace_secs: seconds to wait after the workers finish (kept for TFoS programs).
        :param timeout: seconds to wait in all before the cluster is cancelled (-1 or 0: no limit).
        """
        if ssc is not None:
            raise NotImplementedError("Spark Streaming (ssc) is not supported: pass ssc=None")
        try:
            if self.input_mode == InputMode.SPARK:
                result = self._result  # train() already waited for the nodes
            else:
                wait = None if timeout is None or timeout <= 0 else float(timeout)
                result = self._run.wait(wait)
        finally:
            if self._tokens is not None:  # inference()'s token: its RDDs are computed by now
                self._tokens.stop()
                self._tokens = None
        if grace_secs:
            time.sleep(grace_secs)
        log.info("TF cluster %s shut down", self.cluster_id)
        return result

    def tensorboard_url(self) -> str | None:
        """Return TensorBoard's URL, once the chief (or worker 0) has started it; None otherwise."""
        if not self._run.spec.tensorboard:
            return None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not self._run.done():
            info = self._read_info()
            if info:
                return info.get("tensorboard_url")
            time.sleep(0.5)
        info = self._read_info()
        return info.get("tensorboard_url") if info else None


def run(
    sc,
    map_fun,
    tf_args,
    num_executors,
    num_ps,
    tensorboard=False,
    input_mode=InputMode.TENSORFLOW,
    log_dir=None,
    driver_ps_nodes=False,
    master_node=None,
    reservation_timeout=600,
    queues=("input", "output", "error"),
    eval_node=False,
    release_port=True,
):
    """Start a TF cluster of ``num_executors`` nodes running ``map_fun(tf_args, ctx)``; see TFoS.

    InputMode.TENSORFLOW: the nodes start at once; ``shutdown()`` waits for them. InputMode.SPARK: the
    nodes start with their data, in ``train()`` (or per partition in ``inference()``).
    ``release_port=False``: each node's TF port stays bound by ``ctx.tmp_socket`` until ``map_fun`` calls
    ``ctx.release_port()``.
    """
    if input_mode not in (InputMode.TENSORFLOW, InputMode.SPARK):
        raise ClusterConfigError(f"input_mode must be InputMode.TENSORFLOW or InputMode.SPARK, got {input_mode!r}")
    if input_mode == InputMode.SPARK and eval_node:
        raise ClusterConfigError("running evaluator nodes is only supported in InputMode.TENSORFLOW")
    if driver_ps_nodes:
        raise ClusterConfigError(
            "driver_ps_nodes=True is not supported: parameter servers run in executors like every other "
            "node; pass driver_ps_nodes=False and give the Spark application num_executors task slots"
        )
    run_dir = tempfile.mkdtemp(prefix="airflow-tfos-compat-")
    main = TFoSMain(map_fun, hold_port=not release_port)

    def make_run(**data) -> TFClusterRun:
        return TFClusterRun(
            sc,
            main,
            tf_args,
            num_nodes=num_executors,
            num_ps=num_ps,
            master_node=master_node,
            eval_node=eval_node,
            run_dir=run_dir,
            tensorboard=tensorboard,
            log_dir=log_dir,
            slot_wait_secs=float(min(reservation_timeout, 120)),
            # TFoS set TF_CONFIG only for clusters with a chief or master.
            set_tf_config=master_node is not None,
            **data,
        )

    return TFCluster(sc, make_run, input_mode, queues)
