"""The barrier stage of one attempt of a TF cluster, and what its failures mean.

A DataFrame feed runs the nodes in ``mapInArrow(..., barrier=True)`` over the laid-out frame (one partition per
node); an RDD (TFoS's ``TFCluster.train``) or no data runs them in ``rdd.barrier().mapPartitions``. Either way
each node's task yields ``(executor_id, pickled result, log lines)`` from the result node. A failure comes back
as Spark's exception: :func:`translate` turns it into the error the run raises, :func:`retryable` says whether
a fresh TF cluster may get past it.
"""

from __future__ import annotations

from typing import Any

from airflow_tfos.runtime.errors import (
    ClusterConfigError,
    HungStageError,
    NodeFailedError,
    RunCancelledError,
    StallError,
    TFoSRuntimeError,
    decode_node_failure,
)
from airflow_tfos.runtime.feed.rows import RowFeed
from airflow_tfos.runtime.node.job import NodeJob
from airflow_tfos.runtime.node.task import run_node
from airflow_tfos.shared.errors import FeedConfigError
from airflow_tfos.shared.feed import Feed

#: What each node's task of a DataFrame stage yields.
_OUTCOME = "executor_id int, result binary, notes string"


def frame_stage(frame, job: NodeJob) -> list[tuple[int, bytes, str]]:
    """Run the nodes over ``frame`` (one partition per node); return the result node's outcome."""

    def node_batches(batches):
        import pyarrow as pa

        schema = pa.schema([("executor_id", pa.int32()), ("result", pa.binary()), ("notes", pa.string())])
        for executor_id, result, notes in run_node(job, batches):
            yield pa.RecordBatch.from_pydict(
                {"executor_id": [executor_id], "result": [result], "notes": [notes]}, schema=schema
            )

    rows = frame.mapInArrow(node_batches, _OUTCOME, barrier=True)
    outcome = [(r["executor_id"], bytes(r["result"]), r["notes"]) for r in rows.collect()]
    if not outcome:
        # Spark's adaptive execution skips the stage altogether when the input has no rows.
        raise FeedConfigError("the training data is empty: nothing to train on (check the DataFrame's filter/path)")
    return outcome


def rdd_stage(rdd, job: NodeJob) -> list[tuple[int, bytes, str]]:
    """Run the nodes over ``rdd``'s partitions (one per node); return the result node's outcome."""
    return rdd.barrier().mapPartitions(lambda it: run_node(job, it)).collect()


def translate(error: BaseException, cluster_id: str, num_nodes: int, cancelled: bool) -> BaseException:
    """The error a failed stage raises: a node's own failure (decoded from Spark's text), a cancellation, a
    cluster too large for the slots, or Spark's failure as it is."""
    if isinstance(error, (FeedConfigError, StallError, HungStageError)):
        return error
    failure = decode_node_failure(error)
    if failure is not None and failure.kind == "input":
        return FeedConfigError(failure.describe())
    if failure is not None:
        return NodeFailedError(failure, str(error))
    if cancelled:
        return RunCancelledError(f"TF cluster {cluster_id} was cancelled")
    text = str(error)
    if "BarrierJobSlotsNumberCheckFailed" in text or "more slots than the total number" in text:
        return ClusterConfigError(f"Spark could not place {num_nodes} barrier tasks at once: {text.splitlines()[0]}")
    return TFoSRuntimeError(f"TF cluster {cluster_id} failed in Spark: {text}")


def retryable(error: BaseException) -> bool:
    """Whether a fresh TF cluster may get past ``error``: infrastructure, not the program or its input."""
    if isinstance(error, (StallError, HungStageError)):
        return True
    if isinstance(error, (FeedConfigError, ClusterConfigError, KeyboardInterrupt)):
        return False
    failure = decode_node_failure(error)
    if failure is None:
        return True  # an executor lost, a task killed: Spark's own failure, not the program's
    return failure.kind == "node" and failure.retryable


def check_data_args(data: Any, feed: Feed | None, validation_data: Any, row_feed: RowFeed | None) -> None:
    """Refuse data arguments that make no stage (a DataFrame without a feed, an RDD without a row feed), naming
    the argument to change."""
    if data is None:
        if feed is not None or validation_data is not None or row_feed is not None:
            raise FeedConfigError("feed=, validation_data= and row_feed= need data= (the DataFrame to feed)")
        return
    is_frame = hasattr(data, "mapInArrow")
    if is_frame and feed is None:
        raise FeedConfigError(
            "data= is a DataFrame: also pass feed=Feed(features=[...], label=...) to say which columns to feed"
        )
    if is_frame and row_feed is not None:
        raise FeedConfigError("row_feed= is for RDDs; a DataFrame is fed with feed=Feed(...)")
    if not is_frame and not hasattr(data, "mapPartitions"):
        raise FeedConfigError(f"data= must be a Spark DataFrame or RDD, got {type(data).__name__}")
    if not is_frame and row_feed is None:
        raise FeedConfigError("data= is an RDD: feed it with row_feed=RowFeed(...), or pass a DataFrame with feed=")
    if validation_data is not None and not hasattr(validation_data, "mapInArrow"):
        raise FeedConfigError("validation_data= must be a DataFrame fed beside a DataFrame data=")
