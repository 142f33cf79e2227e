"""Checks made on the driver before a barrier stage is submitted.

Spark itself either hangs (it re-checks barrier slots for up to ten minutes) or fails with a generic
message when a barrier stage cannot be scheduled. These checks fail at once, naming the setting to
change. :func:`check_cluster` is pure; :func:`snapshot_resources` is the only part that talks to Spark.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from airflow_tfos.runtime.errors import ClusterConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClusterResources:
    """What the Spark application offers, as seen from the driver.

    :param master: the Spark master URL.
    :param conf: the SparkConf entries that matter here (string values).
    :param task_slots: how many tasks can run at once, or None when unknown.
    :param num_executors: how many executors are registered (the driver excluded).
    """

    master: str
    conf: dict[str, str] = field(default_factory=dict)
    task_slots: int | None = None
    num_executors: int = 0

    def get_int(self, key: str, default: int) -> int:
        value = self.conf.get(key)
        if value in (None, ""):
            return default
        try:
            return int(float(value))
        except ValueError:
            raise ClusterConfigError(f"{key}={value!r} is not a number") from None


def _is_true(value: str | None) -> bool:
    return str(value).strip().lower() == "true"


def check_cluster(resources: ClusterResources, num_nodes: int, *, gpus_per_node: int = 0) -> None:
    """Raise :class:`ClusterConfigError` if ``num_nodes`` TF nodes cannot run as one barrier stage."""
    conf = resources.conf
    if _is_true(conf.get("spark.dynamicAllocation.enabled")):
        raise ClusterConfigError(
            "spark.dynamicAllocation.enabled must be false: Spark's barrier mode, which places all TF "
            "nodes at once, does not support dynamic allocation (set spark.dynamicAllocation.enabled="
            f"false and spark.executor.instances={num_nodes})"
        )
    task_cpus = resources.get_int("spark.task.cpus", 1)
    if task_cpus < 1:
        raise ClusterConfigError(f"spark.task.cpus must be at least 1, got {task_cpus}")
    executor_cores = resources.get_int("spark.executor.cores", 0)
    if executor_cores and task_cpus > executor_cores:
        raise ClusterConfigError(
            f"spark.task.cpus={task_cpus} is larger than spark.executor.cores={executor_cores}: no "
            "executor can run a TF node; make spark.task.cpus at most spark.executor.cores"
        )
    if gpus_per_node > 0:
        task_gpus = float(conf.get("spark.task.resource.gpu.amount") or 0)
        if task_gpus <= 0:
            raise ClusterConfigError(
                f"gpus_per_node={gpus_per_node} but spark.task.resource.gpu.amount is not set: set "
                f"spark.task.resource.gpu.amount={gpus_per_node} and spark.executor.resource.gpu.amount "
                "(with a discovery script, spark.executor.resource.gpu.discoveryScript), or use "
                "gpus_per_node=0"
            )
        if task_gpus < gpus_per_node:
            raise ClusterConfigError(
                f"gpus_per_node={gpus_per_node} but spark.task.resource.gpu.amount={task_gpus:g}: raise "
                "spark.task.resource.gpu.amount to gpus_per_node"
            )
    slots = resources.task_slots
    if slots is not None and slots < num_nodes:
        where = (
            f"{resources.num_executors} executor(s)"
            if not resources.master.startswith("local[")
            else f"master {resources.master}"
        )
        raise ClusterConfigError(
            f"{num_nodes} TF nodes need {num_nodes} concurrent task slots in one barrier stage, but the "
            f"Spark application offers {slots} ({where}, spark.executor.cores="
            f"{conf.get('spark.executor.cores', 'default')}, spark.task.cpus={task_cpus}). Raise "
            "spark.executor.instances (or the local-cluster/local[N] size), raise spark.executor.cores "
            "or lower spark.task.cpus; or ask for fewer nodes (num_nodes / num_executors)"
        )
    if 0 < resources.num_executors < num_nodes and not resources.master.startswith("local"):
        log.warning(
            "%d TF nodes will share %d executors; for one node per executor set spark.executor.instances=%d "
            "and spark.task.cpus equal to spark.executor.cores",
            num_nodes,
            resources.num_executors,
            num_nodes,
        )


_CONF_KEYS = (
    "spark.dynamicAllocation.enabled",
    "spark.task.cpus",
    "spark.executor.cores",
    "spark.executor.instances",
    "spark.task.resource.gpu.amount",
    "spark.executor.resource.gpu.amount",
)


def snapshot_resources(sc, *, wanted_slots: int = 0, wait_seconds: float = 0.0) -> ClusterResources:
    """Read what the Spark application offers, waiting up to ``wait_seconds`` for ``wanted_slots``.

    Executors register with the driver some seconds after the SparkContext starts, so a check made
    at once would see too few slots; this polls until enough are there or the time is up.
    """
    spark_conf = sc.getConf()  # a copy of the whole configuration, made over py4j: once, not once per key
    conf = {key: spark_conf.get(key) for key in _CONF_KEYS if spark_conf.get(key) is not None}
    deadline = time.monotonic() + wait_seconds
    waited = False
    while True:
        slots, executors = _task_slots(sc)
        if slots is None or slots >= wanted_slots or time.monotonic() >= deadline:
            break
        if not waited:
            log.info("waiting up to %.0f s for %d task slots (%d now)", wait_seconds, wanted_slots, slots)
            waited = True
        time.sleep(0.5)
    return ClusterResources(master=sc.master, conf=conf, task_slots=slots, num_executors=executors)


def _task_slots(sc) -> tuple[int | None, int]:
    """Return (concurrent task slots, registered executors) of the default resource profile."""
    jsc = sc._jsc.sc()
    # the driver counts itself among the executors; pyspark 3.5's StatusTracker has no getExecutorInfos
    executors = max(len(jsc.statusTracker().getExecutorInfos()) - 1, 0)
    try:
        profile = jsc.resourceProfileManager().defaultResourceProfile()
        return int(jsc.maxNumConcurrentTasks(profile)), executors
    except Exception:
        log.debug("cannot read the number of task slots from Spark", exc_info=True)
        return None, executors
