"""Drop the executors of a failed attempt that stopped answering, so the next attempt does not wait for them.

When a TF cluster attempt fails, Spark cancels the barrier stage: it asks every executor to kill its task.
An executor on a host that is cut off, or whose JVM hangs, does not answer; its task stays "running" and
its slot stays taken until Spark's executor heartbeat times out (``spark.network.timeout``), and the next
barrier stage, which needs every slot at once, waits for it. Here the driver looks at the failed attempt's
tasks a few seconds after the failure: an executor still running one of them, while the others have
ended theirs, is dropped at once, as Spark itself drops an executor whose heartbeat timed out (killed and
replaced, and removed from the scheduler), and the master starts a replacement on spare capacity.

:func:`executors_to_drop` is the decision, pure; :func:`attempt_tasks` and :func:`drop_executors` are the
parts that talk to Spark. In local mode (``local[...]``) there is no executor to drop: nothing is done.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from airflow_tfos.runtime.errors import decode_node_failure

log = logging.getLogger(__name__)

#: How long the failed attempt's other tasks may take to end after the failure before the executors still
#: running one count as not answering (a killed task stops its node process within its kill grace, 5 s).
DROP_GRACE_SECS = 10.0
#: The same after an attempt whose nodes had all ended was cancelled (:mod:`.ended`): its tasks have no
#: process left to stop, and the run has already waited for them.
ENDED_DROP_GRACE_SECS = 5.0
RUNNING = "RUNNING"


@dataclasses.dataclass(frozen=True)
class AttemptTask:
    """One barrier task of a failed attempt, as the driver's scheduler last saw it.

    :param node: the TF node it ran (``chief:0``, ``worker:1``).
    :param executor_id: Spark's id of the executor that ran it.
    :param host: that executor's host.
    :param status: Spark's task status (``RUNNING``, ``KILLED``, ``FAILED``, ``SUCCESS``).
    :param executor_active: whether Spark still counts the executor as alive (not lost, not being removed).
    """

    node: str
    executor_id: str
    host: str
    status: str
    executor_active: bool = True


@dataclasses.dataclass(frozen=True)
class Drop:
    """An executor to drop, and why (the line the driver logs)."""

    executor_id: str
    host: str
    reason: str

    def message(self) -> str:
        return f"dropping executor {self.executor_id} on {self.host}: {self.reason}"


def executors_to_drop(
    tasks: Iterable[AttemptTask],
    *,
    failed_node: str | None = None,
    stalled: Mapping[str, int] | None = None,
    last_steps: Mapping[str, int] | None = None,
    ended: Collection[str] = (),
    waited: float = DROP_GRACE_SECS,
) -> list[Drop]:
    """Decide which executors of a failed attempt to drop.

    An executor is dropped when it still runs a task of the attempt after the failure (``waited`` seconds
    later) while Spark still counts it alive: it did not answer the cancel. The node that reported the
    failure answered, and an executor Spark already lost is Spark's to replace: neither is dropped. A node
    that stalled but whose task ended (its executor killed it, and its TF process with it) leaves a usable
    executor: it is kept too.

    :param tasks: the attempt's tasks (:func:`attempt_tasks`).
    :param failed_node: the node whose failure ended the attempt, if one did.
    :param stalled: the stall watchdog's nodes and the last step each reached, when it ended the attempt.
    :param last_steps: the last global step each node reported.
    :param ended: the nodes whose process had ended when the attempt was cancelled (:mod:`.ended`).
    :param waited: seconds between the failure and the look at the tasks, for the message.
    """
    stalled, last_steps = dict(stalled or {}), dict(last_steps or {})
    drops: dict[str, Drop] = {}
    for task in tasks:
        if task.status != RUNNING or not task.executor_active or task.node == failed_node:
            continue
        if task.executor_id in drops:
            continue
        if task.node in stalled:
            why = f"its TF node {task.node} stalled at step {stalled[task.node]}"
        elif task.node in ended:
            why = f"its TF node {task.node} ended, but the executor does not answer"
        elif task.node in last_steps:
            why = f"its TF node {task.node} (last step {last_steps[task.node]}) is cut off or hangs"
        else:
            why = f"its TF node {task.node} is cut off or hangs"
        reason = f"{why}; its task did not end within {waited:.0f} s of the attempt's failure"
        drops[task.executor_id] = Drop(task.executor_id, task.host, reason)
    return sorted(drops.values(), key=lambda d: d.executor_id)


def is_local(master: str) -> bool:
    """Whether ``master`` runs everything in the driver's JVM (``local``, ``local[N]``): no executor to drop."""
    return master == "local" or master.startswith("local[")


def job_ids(sc, job_group: str) -> set[int]:
    """The ids of the Spark jobs run so far in ``job_group``."""
    return set(sc.statusTracker().getJobIdsForGroup(job_group))


def attempt_tasks(sc, jobs: Iterable[int], nodes: Sequence[str]) -> list[AttemptTask]:
    """The barrier tasks of ``jobs`` (one attempt's), from the driver's status store: one per node, the
    node being the task's partition (``nodes[partition]``). The barrier stage is each job's result stage (its
    last); the stages before it (laying the rows out) are left out."""
    jsc = sc._jsc.sc()
    store, backend = jsc.statusStore(), jsc.schedulerBackend()
    found = []
    for job in sorted(jobs):
        try:
            stage_ids = store.job(job).stageIds()
        except Exception:  # not in the store (yet, or any more)
            continue
        if stage_ids.size():
            stage = store.lastStageAttempt(max(stage_ids.apply(i) for i in range(stage_ids.size())))
            if stage.numTasks() != len(nodes):
                continue
            tasks = store.taskList(stage.stageId(), stage.attemptId(), len(nodes) * 4)
            for k in range(tasks.size()):
                task = tasks.apply(k)
                index = task.index()
                if not 0 <= index < len(nodes):
                    continue
                executor = task.executorId()
                found.append(
                    AttemptTask(nodes[index], executor, task.host(), task.status(), _is_active(backend, executor))
                )
    return found


def _is_active(backend, executor_id: str) -> bool:
    try:
        return bool(backend.isExecutorActive(executor_id))
    except Exception:
        return True


def wait_for_tasks(sc, jobs: Iterable[int], nodes: Sequence[str], grace: float) -> list[AttemptTask]:
    """Look at the attempt's tasks until none runs on a live executor, or ``grace`` seconds passed."""
    deadline = time.monotonic() + grace
    while True:
        tasks = attempt_tasks(sc, jobs, nodes)
        if not any(t.status == RUNNING and t.executor_active for t in tasks) or time.monotonic() >= deadline:
            return tasks
        time.sleep(0.5)


def drop_executors(sc, drops: Sequence[Drop]) -> list[str]:
    """Kill and replace each executor of ``drops`` and remove it from the scheduler now, as Spark does when an
    executor's heartbeat times out; return the ids Spark accepted. A no-op in local mode."""
    if not drops or is_local(sc.master):
        return []
    jsc = sc._jsc.sc()
    backend = jsc.schedulerBackend()
    accepted = []
    for drop in drops:
        log.warning("%s", drop.message())
        try:
            # adjustTargetNumExecutors=false: the master starts a replacement on whatever capacity is free
            if not jsc.killAndReplaceExecutor(drop.executor_id):
                log.warning("Spark did not kill executor %s (already gone?)", drop.executor_id)
                continue
            _remove_from_scheduler(sc, backend, drop)
        except Exception as exc:  # a Spark that lacks these calls: the heartbeat timeout still applies
            log.warning("cannot drop executor %s: %s", drop.executor_id, str(exc).splitlines()[0])
            continue
        accepted.append(drop.executor_id)
    return accepted


def _remove_from_scheduler(sc, backend, drop: Drop) -> None:
    """Fail what the executor still runs and free its slot at once, instead of when it disconnects."""
    jvm = sc._jvm
    lost = jvm.org.apache.spark.scheduler.ExecutorProcessLost(
        f"dropped by airflow-tfos: {drop.reason}", jvm.scala.Option.apply(None), False
    )
    messages = jvm.org.apache.spark.scheduler.cluster
    remove = getattr(messages, "CoarseGrainedClusterMessages$RemoveExecutor")(drop.executor_id, lost)
    backend.driverEndpoint().send(remove)


def describe(drops: Sequence[Drop]) -> list[dict[str, Any]]:
    """The drops as JSON fields for the run's events."""
    return [dataclasses.asdict(d) for d in drops]


def drop_unanswering(
    sc,
    job_group: str,
    jobs_before: set[int],
    nodes: Sequence[str],
    error: BaseException,
    stall,
    hung,
    last_steps: Mapping[str, int],
) -> list[dict[str, Any]]:
    """After an attempt of ``job_group`` failed (``error``; the stall watchdog's ``stall`` or the end watch's
    ``hung`` report when one of them ended it), drop the executors still running one of its tasks once the
    others ended theirs; return what was dropped, as the event's fields. Never raises: Spark's heartbeat
    timeout still applies when this cannot look."""
    try:
        jobs = job_ids(sc, job_group) - jobs_before
        waited = ENDED_DROP_GRACE_SECS if hung is not None else DROP_GRACE_SECS
        tasks = wait_for_tasks(sc, jobs, nodes, waited)
        failure = decode_node_failure(error)
        drops = executors_to_drop(
            tasks,
            failed_node=f"{failure.job_name}:{failure.task_index}" if failure is not None else None,
            stalled={n.node: n.step for n in stall.nodes} if stall is not None else None,
            last_steps=last_steps,
            ended=hung.ended if hung is not None else (),
            waited=waited,
        )
        accepted = set(drop_executors(sc, drops))
    except Exception as exc:
        log.warning("cannot look for executors to drop in %s: %s", job_group, exc)
        return []
    return describe([d for d in drops if d.executor_id in accepted])
