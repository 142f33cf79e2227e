"""Spark settings for a training run, the runtime zip and the launcher: pure functions, tested without Spark.

:class:`~airflow_tfos.hooks.tfos.TFoSHook` builds its spark-submit from these.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import logging
import math
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_tfos.hooks.backends.base import check_tag, own_private_file, private_dir, write_atomically
from airflow_tfos.hooks.errors import TFoSConfigError

log = logging.getLogger(__name__)

#: Memory (MB) of the PySpark worker that feeds a TF node and supervises it, on top of the TF process.
PYSPARK_WORKER_MB = 512
#: Spark's own off-heap overhead of a JVM: max(384 MB, 10 % of its heap) (memoryOverheadFactor, minMemoryOverhead).
MIN_OVERHEAD_MB, OVERHEAD_FACTOR = 384, 0.10
LAUNCHER_NAME = "tfos_driver.py"
#: Shipped with the runtime whether or not it imports them (storage plugs WebHDFS in by name).
#: The subpackages shipped to the Spark side (with the package's ``__init__.py``).
SHIPPED_PACKAGES = ("runtime", "shared")
GPU_SCRIPT_NAME = "tfos_gpu_discovery.sh"

_LAUNCHER = '''"""Start the airflow-tfos driver (written by airflow_tfos.hooks.tfos; spark-submit runs this file)."""
import sys

from airflow_tfos.runtime.driver import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''
_GPU_SCRIPT = """#!/usr/bin/env bash
# Spark resource discovery (airflow-tfos): print the GPUs this container sees, as Spark's JSON.
nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | awk 'BEGIN { ORS = ""; \
printf "{\\"name\\": \\"gpu\\", \\"addresses\\": [" } { printf "%s\\"%s\\"", (NR > 1 ? "," : ""), $1 } \
END { print "]}\\n" }'
"""
_MEMORY = re.compile(r"^\s*(\d+)\s*([kmgtp]?)b?\s*$", re.IGNORECASE)
_YARN_APP_ID = re.compile(r"\bapplication_\d+_\d+\b")
_SUBMITTED = re.compile(r"Submitted application (application_\d+_\d+)")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\]$")
_LOCAL_THREADS = re.compile(r"^local\[(\d+)(?:,\s*\d+)?\]$")
#: Set from arguments of submit(): conf may not set them to something else.
_FROM_ARGUMENTS = {
    "spark.executor.memory": "executor_memory",
    "spark.executor.cores": "executor_cores",
    "spark.task.cpus": "executor_cores",
    "spark.executor.resource.gpu.amount": "gpus_per_node",
    "spark.task.resource.gpu.amount": "gpus_per_node",
}


def memory_mb(value: str | int) -> int:
    """Spark's memory string (``2g``, ``768m``, ``1024``: MiB by default) in MiB."""
    if isinstance(value, int):
        return value
    found = _MEMORY.match(str(value))
    if not found:
        raise TFoSConfigError(f"{value!r} is not a Spark memory size such as 2g, 768m or 1024")
    power = {"k": -1, "": 0, "m": 0, "g": 1, "t": 2, "p": 3}[found.group(2).lower()]
    return math.ceil(int(found.group(1)) * 1024.0**power)


def default_overhead_mb(heap_mb: int) -> int:
    """Spark's default memoryOverhead of a JVM with ``heap_mb`` of heap."""
    return max(MIN_OVERHEAD_MB, math.ceil(OVERHEAD_FACTOR * heap_mb))


def _is_true(value: Any) -> bool:
    return str(value).strip().lower() == "true"


def training_conf(
    *,
    backend: str,
    tag: str,
    num_nodes: int,
    executor_cores: int = 1,
    executor_memory: str = "2g",
    tf_memory_mb: int | None = None,
    gpus_per_node: int = 0,
    user_conf: Mapping[str, str] | None = None,
    master: str = "yarn",
    gpu_discovery_script: str | None = None,
) -> dict[str, str]:
    """Return the Spark settings of a training application: what barrier-mode TF needs, then ``user_conf``.

    One TF node per executor: ``num_nodes`` executors of ``executor_cores`` cores, one task each
    (``spark.task.cpus`` = ``executor_cores``). On YARN the TF process is outside the JVM: its memory goes
    into ``spark.executor.memoryOverhead`` with :data:`PYSPARK_WORKER_MB` and Spark's own overhead.
    ``spark.executor.pyspark.memory`` is refused: PySpark enforces it as an address-space limit
    (``RLIMIT_AS``) on the Python worker, the TF process inherits it, and TensorFlow, which reserves far
    more address space than it uses, fails under it.

    :param backend: ``yarn`` or ``local``.
    :param tag: the run's tag (``spark.yarn.tags`` on YARN).
    :param tf_memory_mb: memory of each TF process in MiB (YARN only: locally there are no containers).
    :param user_conf: the user's settings; they win, unless they break the above (then this raises).
    :param master: the Spark master (local backend: ``local-cluster[...]``, ``local[...]`` or ``spark://``).
    :param gpu_discovery_script: the discovery script's path as executors see it (with ``gpus_per_node``).
    The other parameters are :meth:`TFoSHook.submit`'s.
    """
    user = {k: str(v) for k, v in (user_conf or {}).items()}
    if num_nodes < 1 or executor_cores < 1 or gpus_per_node < 0:
        raise TFoSConfigError(
            f"num_nodes ({num_nodes}) and executor_cores ({executor_cores}) must be >= 1, gpus_per_node >= 0"
        )
    conf = {
        "spark.dynamicAllocation.enabled": "false",
        "spark.locality.wait": "0",
        "spark.executor.instances": str(num_nodes),
        "spark.executor.cores": str(executor_cores),
        "spark.task.cpus": str(executor_cores),
        "spark.executor.memory": executor_memory,
    }
    executor_mb = memory_mb(executor_memory)
    if backend == "yarn":
        conf.update(
            {
                "spark.yarn.submit.waitAppCompletion": "false",
                "spark.yarn.maxAppAttempts": "1",
                "spark.yarn.tags": ",".join(dict.fromkeys([check_tag(tag), *_tags(user.pop("spark.yarn.tags", ""))])),
            }
        )
        if tf_memory_mb is not None:
            needed = int(tf_memory_mb) + PYSPARK_WORKER_MB
            given = user.get("spark.executor.memoryOverhead")
            if given is not None and memory_mb(given) < needed:
                raise TFoSConfigError(
                    f"spark.executor.memoryOverhead={given} is less than tf_memory_mb={tf_memory_mb} plus "
                    f"{PYSPARK_WORKER_MB} MB for the PySpark worker: set it to at least {needed}m, or leave it out "
                    "and airflow-tfos computes it"
                )
            conf["spark.executor.memoryOverhead"] = f"{default_overhead_mb(executor_mb) + needed}m"
    else:
        if master.startswith("spark://"):
            conf["spark.cores.max"] = str(num_nodes * executor_cores)  # exactly num_nodes executors
        if master.startswith("local"):
            conf.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    if gpus_per_node:
        conf["spark.executor.resource.gpu.amount"] = str(gpus_per_node)
        conf["spark.task.resource.gpu.amount"] = str(gpus_per_node)
        if gpu_discovery_script and "spark.executor.resource.gpu.discoveryScript" not in user:
            conf["spark.executor.resource.gpu.discoveryScript"] = gpu_discovery_script
    _check_user_conf(user, conf, num_nodes)
    return {**conf, **user}


def _tags(value: str) -> list[str]:
    return [check_tag(t.strip()) for t in value.split(",") if t.strip()]


def _check_user_conf(user: Mapping[str, str], conf: Mapping[str, str], num_nodes: int) -> None:
    if _is_true(user.get("spark.dynamicAllocation.enabled", "false")):
        raise TFoSConfigError("spark.dynamicAllocation.enabled must be false: barrier mode does not support it")
    if "spark.yarn.maxAppAttempts" in user and user["spark.yarn.maxAppAttempts"] != "1":
        raise TFoSConfigError(
            "spark.yarn.maxAppAttempts must be 1: Airflow retries the task, and the barrier stage retries "
            "lost TF nodes (max_attempts in the spec)"
        )
    if "spark.yarn.submit.waitAppCompletion" in user and _is_true(user["spark.yarn.submit.waitAppCompletion"]):
        raise TFoSConfigError("spark.yarn.submit.waitAppCompletion must be false: sensors wait, not spark-submit")
    if "spark.executor.pyspark.memory" in user:
        raise TFoSConfigError(
            "remove spark.executor.pyspark.memory: PySpark applies it as an address-space limit that the TF "
            "process inherits, and TensorFlow fails under it; give the TF process's memory as tf_memory_mb"
        )
    if int(user.get("spark.executor.instances", num_nodes)) < num_nodes:
        raise TFoSConfigError(
            f"spark.executor.instances={user['spark.executor.instances']} is less than num_nodes={num_nodes}: "
            "each TF node needs its own executor; remove the setting"
        )
    for key, argument in _FROM_ARGUMENTS.items():
        if key in user and key in conf and user[key] != conf[key]:
            raise TFoSConfigError(f"{key}={user[key]} in conf contradicts {argument}: set it with {argument} instead")
        if key in user and key not in conf:
            raise TFoSConfigError(f"{key} is set in conf but {argument} is 0: set it with {argument} instead")


def env_conf(env: Mapping[str, str], *, backend: str) -> dict[str, str]:
    """Settings that put ``env`` in the environment of the executors (and of the YARN driver)."""
    conf = {f"spark.executorEnv.{k}": str(v) for k, v in env.items()}
    if backend == "yarn":
        conf.update({f"spark.yarn.appMasterEnv.{k}": str(v) for k, v in env.items()})
    return conf


def packed_env_conf(*, backend: str) -> dict[str, str]:
    """Settings that run the driver and executors with the packed environment's Python (``...#environment``)."""
    python = "./environment/bin/python"
    return {"spark.pyspark.python": python, **env_conf({"PYSPARK_PYTHON": python}, backend=backend)}


def _container(conf: Mapping[str, str], role: str, default_memory: str) -> tuple[int, dict[str, int]]:
    heap = memory_mb(conf.get(f"spark.{role}.memory", default_memory))
    parts = {f"spark.{role}.memory": heap}
    overhead = conf.get(f"spark.{role}.memoryOverhead")
    parts[f"spark.{role}.memoryOverhead"] = memory_mb(overhead) if overhead else default_overhead_mb(heap)
    if role == "executor":
        if conf.get("spark.executor.pyspark.memory"):
            parts["spark.executor.pyspark.memory"] = memory_mb(conf["spark.executor.pyspark.memory"])
        if _is_true(conf.get("spark.memory.offHeap.enabled", "false")):
            parts["spark.memory.offHeap.size"] = memory_mb(conf.get("spark.memory.offHeap.size", "0"))
    return sum(parts.values()), parts


def check_container_fits(
    conf: Mapping[str, str], *, max_memory_mb: int, max_vcores: int, cluster_mode: bool = True
) -> None:
    """Raise :class:`TFoSConfigError` unless the executor (and driver) containers fit YARN's largest one.

    :param conf: the application's Spark settings (as :func:`training_conf` returns them).
    :param max_memory_mb: the ResourceManager's maximum allocation (``yarn.scheduler.maximum-allocation-mb``).
    :param max_vcores: ``yarn.scheduler.maximum-allocation-vcores``.
    :param cluster_mode: the driver runs in a YARN container too.
    """
    roles = [("executor", "1g", int(conf.get("spark.executor.cores", "1")))]
    if cluster_mode:
        roles.append(("driver", "1g", int(conf.get("spark.driver.cores", "1"))))
    for role, default, vcores in roles:
        total, parts = _container(conf, role, default)
        article = "an" if role == "executor" else "a"
        if total > max_memory_mb:
            terms = " + ".join(f"{mb} MB ({key})" for key, mb in parts.items())
            hint = "lower executor_memory or tf_memory_mb" if role == "executor" else "lower spark.driver.memory"
            raise TFoSConfigError(
                f"{article} {role} container needs {terms} = {total} MB, but the cluster's largest container "
                f"is {max_memory_mb} MB (yarn.scheduler.maximum-allocation-mb): {hint}, or raise "
                "yarn.scheduler.maximum-allocation-mb"
            )
        if vcores > max_vcores:
            raise TFoSConfigError(
                f"{article} {role} container needs {vcores} vcores (spark.{role}.cores), but the cluster's "
                f"largest container has {max_vcores} (yarn.scheduler.maximum-allocation-vcores): lower "
                f"{'executor_cores' if role == 'executor' else 'spark.driver.cores'}"
            )


def check_local_master(master: str, *, num_nodes: int, executor_cores: int, executor_memory: str) -> None:
    """Raise :class:`TFoSConfigError` when a local master cannot hold ``num_nodes`` such executors."""
    found = _LOCAL_CLUSTER.match(master)
    if found:
        workers, cores, worker_mb = (int(g) for g in found.groups())
        if num_nodes > workers:
            raise TFoSConfigError(
                f"{master} has {workers} workers but num_nodes={num_nodes} needs one executor each: "
                f"raise the first number of local-cluster[...] to {num_nodes}"
            )
        if executor_cores > cores:
            raise TFoSConfigError(
                f"{master} workers have {cores} cores but executor_cores={executor_cores}: lower executor_cores"
            )
        if memory_mb(executor_memory) > worker_mb:
            raise TFoSConfigError(
                f"executor_memory={executor_memory} does not fit the {worker_mb} MB of a {master} worker: "
                "lower executor_memory or raise the third number of local-cluster[...]"
            )
        return
    threads = _LOCAL_THREADS.match(master)
    if threads and int(threads.group(1)) < num_nodes * executor_cores:
        raise TFoSConfigError(
            f"{master} has {threads.group(1)} task slots but num_nodes={num_nodes} x executor_cores="
            f"{executor_cores} are needed at once: use local[{num_nodes * executor_cores}] or local-cluster[...]"
        )
    if not master.startswith(("local", "spark://")):
        raise TFoSConfigError(f"master {master!r} is not supported: use yarn, spark://, local-cluster[...] or local[N]")


def parse_application_id(line: str) -> str | None:
    """The YARN application id in one line of spark-submit's output, if any."""
    submitted = _SUBMITTED.search(line)
    if submitted:
        return submitted.group(1)
    found = _YARN_APP_ID.search(line)
    return found.group(0) if found else None


#: A line of spark-defaults.conf: a key, then whitespace or ``=``, then the value.
_DEFAULTS_LINE = re.compile(r"(\S+?)(?:\s*=\s*|\s+)(.*)")


def spark_defaults(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings of ``$SPARK_CONF_DIR/spark-defaults.conf`` (what a cluster's administrator set for every
    application: spark-submit reads the same file); empty when there is none."""
    folder = (os.environ if environ is None else environ).get("SPARK_CONF_DIR")
    path = os.path.join(folder, "spark-defaults.conf") if folder else None
    if not path or not os.path.isfile(path):
        return {}
    settings = {}
    with open(path, encoding="utf-8") as lines:
        for line in lines:
            found = _DEFAULTS_LINE.fullmatch(line.strip())
            if found and not line.lstrip().startswith("#"):
                settings[found.group(1)] = found.group(2).strip()
    return settings


def escape_property(value: str) -> str:
    """``value`` escaped for a Java properties file (which Spark reads as UTF-8)."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return "\\" + out if out[:1] in (" ", "\f") else out


def properties_text(conf: Mapping[str, str]) -> str:
    return "".join(f"{key}={escape_property(str(value))}\n" for key, value in conf.items())


# --- what is shipped ---------------------------------------------------------------------------------


def runtime_files(package_dir: Path | None = None) -> list[Path]:
    """The package's files the Spark side needs: the runtime and what both halves share (``runtime/``,
    ``shared/`` and the package's ``__init__.py``); tests check that these import nothing else of the package."""
    root = package_dir or Path(importlib.util.find_spec("airflow_tfos").origin).parent
    wanted = {root / "__init__.py"}
    for folder in SHIPPED_PACKAGES:
        wanted.update(p for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts)
    return sorted(wanted)


def runtime_zip(cache_dir: str | Path, package_dir: Path | None = None) -> Path:
    """A zip of :func:`runtime_files` for ``--py-files``, named by its content's hash; a cached one is shipped only
    if it holds exactly what is built now (else it is written again)."""
    root = package_dir or Path(importlib.util.find_spec("airflow_tfos").origin).parent
    files = [(f"airflow_tfos/{p.relative_to(root).as_posix()}", p.read_bytes()) for p in runtime_files(root)]
    digest = hashlib.sha256()
    for name, data in files:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    target = Path(cache_dir) / f"airflow_tfos-runtime-{digest.hexdigest()[:16]}.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files:
            archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    _ensure_cached(target, buffer.getvalue())
    return target


def _ensure_cached(target: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` to ``target`` unless it is a plain file of this user (not a link, writable by no one else)
    holding exactly ``data`` (by SHA-256) with ``mode``; ``target``'s directory must be private
    (:func:`~airflow_tfos.hooks.backends.base.private_dir`), so no one else can change it once checked."""
    private_dir(target.parent)
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        write_atomically(target, data, mode)
        return
    except OSError as exc:  # a symbolic link (ELOOP), or unreadable
        log.warning("cannot check the cached %s (%s): writing it again", target, exc)
        write_atomically(target, data, mode)
        return
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        same = (
            own_private_file(info)
            and info.st_mode & 0o777 == mode
            and hashlib.sha256(handle.read()).digest() == hashlib.sha256(data).digest()
        )
    if not same:
        log.warning(
            "the cached %s does not hold what its name says, or is not this user's own file writable by no one "
            "else (owner uid %d, mode %o): writing it again",
            target,
            info.st_uid,
            info.st_mode & 0o7777,
        )
        write_atomically(target, data, mode)


def cached_file(cache_dir: str | Path, name: str, text: str, mode: int = 0o644) -> Path:
    """``text`` in ``<cache_dir>/<content hash>/<name>``, checked (content and mode) each time it is asked for."""
    target = Path(cache_dir) / hashlib.sha256(text.encode()).hexdigest()[:16] / name
    _ensure_cached(target, text.encode(), mode)
    return target


def openlineage_parent_conf(conf: dict[str, str]) -> dict[str, str]:
    """The ``spark.openlineage.*`` parent-job settings of the running Airflow task, computed by the OpenLineage
    provider's own helper; empty without the provider, with OpenLineage disabled, outside a task, or when
    ``conf`` already names a parent job.

    :param conf: the application's Spark settings so far.
    """
    try:
        from airflow.providers.openlineage.conf import is_disabled
        from airflow.providers.openlineage.utils.spark import inject_parent_job_information_into_spark_properties
    except ImportError:
        return {}
    if is_disabled():
        return {}
    from airflow.sdk import get_current_context

    try:
        context = get_current_context()
    except RuntimeError:  # not inside a task (e.g. a script using the hook)
        return {}
    injected = inject_parent_job_information_into_spark_properties(dict(conf), context)
    return {key: str(value) for key, value in injected.items() if key not in conf}
