r"""Errors of the runtime (the Spark side), and how a node's failure travels to the driver.

Every one is a :class:`~airflow_tfos.shared.errors.TFoSError` (the package's base, with the shared package's
errors in :mod:`airflow_tfos.shared.errors`); the run's failures (a node failed, the run timed out or was
cancelled) also share :class:`TFoSRuntimeError`. Settings to change are ``ValueError``\s: the cluster
(:class:`ClusterConfigError`), the warm start (:class:`WarmStartError`) and the feed (:class:`FeedConfigError`).
Every exception the runtime defines is here (``tests/project/test_layout.py`` checks).

A failing node raises :class:`NodeFailure` inside its Spark task. Spark reports it to the driver as
text buried in a Java stack trace, so the node's details are also embedded there between two markers,
as JSON, and :func:`decode_node_failure` reads them back out on the driver.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

from airflow_tfos.shared.errors import TFoSError

__all__ = [
    "ClusterConfigError",
    "NodeFailedError",
    "NodeFailure",
    "ReportError",
    "RunCancelledError",
    "RunTimeoutError",
    "SavedModelChangedError",
    "StallError",
    "TFoSRuntimeError",
    "WarmStartError",
    "decode_node_failure",
]

_BEGIN = "<<airflow-tfos-node-failure>>"
_END = "<</airflow-tfos-node-failure>>"
_PATTERN = re.compile(re.escape(_BEGIN) + r"(.*?)" + re.escape(_END), re.DOTALL)


class TFoSRuntimeError(TFoSError, RuntimeError):
    """Base class of the runtime's run-time errors."""


class SavedModelChangedError(TFoSError, RuntimeError):
    """The export changed between reading its version and fetching it."""


class NodeReleased(TFoSError):
    """Raised into a service node's main thread when its process fails while it waits (a node task's own
    control flow: it never leaves the task)."""


class ClusterConfigError(TFoSError, ValueError):
    """The requested cluster cannot run; the message names the setting to change."""


class WarmStartError(TFoSError, ValueError):
    """The warm-start model cannot be used for this model; the message says what to change."""


class ReportError(TFoSError, RuntimeError):
    """The run directory holds nothing to report on; the message says what is missing."""


class RunTimeoutError(TFoSRuntimeError, TimeoutError):
    """The run did not finish within its ``timeout``; its Spark stage was cancelled."""


class StallError(TFoSRuntimeError):
    """No training node advanced its global step for ``stall_timeout`` seconds; the message names the
    stalled nodes and the last step each reached (a fresh TF cluster is tried while attempts are left)."""


class HungStageError(TFoSRuntimeError):
    """Every TF node ended but Spark's stage did not: an executor stopped answering (the attempt is cancelled and
    a fresh TF cluster returns the result from the latest checkpoint while attempts are left)."""


class RunCancelledError(TFoSRuntimeError):
    """The run's Spark stage was cancelled before it finished."""


@dataclass(frozen=True)
class NodeFailure:
    """What the driver learns about a failed node.

    :param job_name: the node's job (``chief``, ``worker``, ``ps``...).
    :param task_index: its index within the job.
    :param executor_id: its number in the cluster.
    :param host: the host it ran on.
    :param reason: one line: the exception, or how the process ended.
    :param traceback: the node's Python traceback, or the tail of its stderr.
    :param kind: ``node`` (the node's program or process failed) or ``input`` (its data was rejected
        before training started).
    :param retryable: whether a fresh TF cluster may get past it (a process killed, a lost peer), as
        opposed to an error in the program that would only happen again.
    """

    job_name: str
    task_index: int
    executor_id: int
    host: str
    reason: str
    traceback: str = ""
    kind: str = "node"
    retryable: bool = False

    def encode(self) -> str:
        """Return the text a node raises so that the driver can decode it."""
        return f"{self.describe()}\n{_BEGIN}{json.dumps(asdict(self))}{_END}"

    def describe(self) -> str:
        if self.kind == "input":
            return f"{self.reason} (seen by TF node {self.job_name}:{self.task_index} on host {self.host})"
        text = (
            f"TF node {self.job_name}:{self.task_index} (executor_id {self.executor_id}, host {self.host})"
            f" failed: {self.reason}"
        )
        if self.traceback:
            text += "\n" + self.traceback.rstrip()
        return text


class NodeFailedError(TFoSRuntimeError):
    """A TF node's ``main_fun`` raised, or its process died; the message holds its traceback."""

    def __init__(self, failure: NodeFailure, spark_message: str = ""):
        super().__init__(failure.describe())
        self.failure = failure
        self.spark_message = spark_message


def decode_node_failure(error: BaseException) -> NodeFailure | None:
    """Find the node failure embedded in a Spark job error, if there is one."""
    match = _PATTERN.search(str(error))
    if not match:
        return None
    # The JSON may have been escaped once more on its way through the JVM's exception text.
    raw = match.group(1)
    for candidate in (raw, raw.encode().decode("unicode_escape", errors="ignore")):
        try:
            return NodeFailure(**json.loads(candidate))
        except (ValueError, TypeError):
            continue
    return None
