"""Every row once per pass under parameter servers, whatever the workers' speeds: TensorFlow's tf.data service.

Under ParameterServerStrategy the ``ClusterCoordinator`` hands each step to whichever worker is free. Were
each worker to read only its own share, a fast worker would run out of it first: with its dataset
repeating it would read its own rows again while a slower worker's last batches were never read. So the
workers' shares are served through the tf.data service:

- the chief's node process runs the dispatcher (``DispatchServer``) on a port its Spark task reserved and
  swapped with the other tasks, as the TF port is; every worker's process runs a tf.data worker
  (``WorkerServer``) beside its TF server, in its own working directory, on a port it binds itself;
- a pass over the data is one tf.data service job in ``parallel_epochs`` mode (no sharding): each tf.data
  worker makes one pass over *its own* share (the pipeline's relative names resolve in its own working
  directory), and the consumers (the per-worker iterators the chief creates) share that job: each batch
  goes to exactly one consumer, first come first served. A fast worker takes more batches, a slow one
  fewer, and every batch of every share is handed out once per pass;
- a job's name carries the run's attempt, the dataset (its split, numbered), how many iterators this
  process made of it so far, and the pass: every worker's iterator of a given epoch joins the same job, and
  a new iterator (``iter()`` on the per-worker dataset, which runs the dataset function again on each
  worker) starts a new one instead of joining one already finished.

The batches then travel from the worker that read them to the worker that trains on them (often
another host), over gRPC, uncompressed.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: The servers of this process, kept for as long as it lives (a server stops when collected).
_SERVERS: list = []
#: Numbers the dataset functions made in this process (the chief's), so that each has jobs of its own.
_DATASETS = itertools.count()


@dataclass(frozen=True)
class DataService:
    """Where the workers' shares are served from.

    :param dispatcher: ``host:port`` of the dispatcher, in the chief's node process.
    :param job: prefix of this attempt's job names (unique per run and attempt).
    :param max_outstanding_requests: batches a consumer may request ahead of its steps (``distribute``'s
        option): 1 keeps the batches a worker holds without having trained on them to one.
    """

    dispatcher: str
    job: str
    max_outstanding_requests: int = 1

    @property
    def address(self) -> str:
        return f"grpc://{self.dispatcher}"

    def passes(self, one_pass, split: str, repeat: bool):
        """A function for ``create_per_worker_dataset``'s dataset function that returns the consumer's dataset:
        ``one_pass()`` (run on each tf.data worker, over its own share) as one job per pass; with ``repeat``
        pass after pass without end, else one pass. Each call gives a dataset jobs of its own."""
        name = f"{split}{next(_DATASETS)}"

        def consumer():
            import tensorflow as tf

            iteration = tf.strings.as_string(_count_iterations(f"airflow_tfos_{name}_iterations"))
            prefix = tf.strings.join([f"{self.job}-{name}-", iteration])

            def serve(number):
                return self._distribute(one_pass(), tf.strings.join([prefix, "-", tf.strings.as_string(number)]))

            first = tf.constant(0, tf.int64)
            passes = tf.data.Dataset.counter(dtype=tf.int64).flat_map(serve) if repeat else serve(first)
            # No autotuning on the consumer's side: it would add a prefetch there, and batches a worker fetched
            # ahead are batches another worker cannot take (and an epoch of steps may end before its pass).
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
            options.autotune.enabled = False
            return passes.with_options(options)

        return consumer

    def _distribute(self, dataset, job_name):
        # The public distribute() takes a job name known when the graph is built; a job per iterator needs
        # one computed when the dataset function runs, which the function under it takes.
        from tensorflow.python.data.experimental.ops import data_service_ops

        return dataset.apply(
            data_service_ops._distribute(
                "parallel_epochs",
                self.address,
                job_name=job_name,
                max_outstanding_requests=self.max_outstanding_requests,
                compression=None,
            )
        )


def _count_iterations(name: str):
    """Add one to a counter of this process, kept under ``name`` in its resource manager, and return it.

    Runs on the worker each time the dataset function runs there (once per ``iter()`` on a per-worker
    dataset): every worker counts the same, so the same epoch's iterators name the same job. A raw variable
    handle, not ``tf.Variable``: ``create_per_worker_dataset`` refuses variables made in a dataset function.
    """
    import tensorflow as tf

    handle = tf.raw_ops.VarHandleOp(dtype=tf.int64, shape=[], shared_name=name, container="airflow_tfos")
    initialized = tf.raw_ops.VarIsInitializedOp(resource=handle)

    def start():
        zero = tf.constant(0, tf.int64)
        with tf.control_dependencies([tf.raw_ops.AssignVariableOp(resource=handle, value=zero)]):
            return tf.constant(0, tf.int64)

    with tf.control_dependencies([tf.cond(initialized, lambda: tf.constant(0, tf.int64), start)]):
        bump = tf.raw_ops.AssignAddVariableOp(resource=handle, value=tf.constant(1, tf.int64))
    with tf.control_dependencies([bump]):
        return tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.int64)


def start_dispatcher(port: int) -> None:
    """Start the tf.data dispatcher in this process (the chief's), on ``port``."""
    import tensorflow as tf

    service = tf.data.experimental.service
    _SERVERS.append(service.DispatchServer(service.DispatcherConfig(port=port)))
    log.info("tf.data dispatcher serving on port %d", port)


def start_worker(dispatcher: str, host: str) -> None:
    """Start a tf.data worker in this process (a parameter-server worker's), on a port it binds itself,
    known to the dispatcher as ``host:<port>``; it runs the pipelines in this process's working directory."""
    import tensorflow as tf

    service = tf.data.experimental.service
    config = service.WorkerConfig(dispatcher_address=dispatcher, worker_address=f"{host}:%port%", port=0)
    _SERVERS.append(service.WorkerServer(config))
    log.info("tf.data worker registered with the dispatcher at %s", dispatcher)
