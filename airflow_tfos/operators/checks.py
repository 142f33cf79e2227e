"""Checks of the arguments of the operators that start Spark applications, run twice with the same function:
when the DAG file is parsed (every argument but those still holding Jinja), and after rendering, before
anything is submitted. A DAG file with a typo then fails to import, naming the task and the argument, instead
of failing inside the Spark application at night.

What the spec says (``train_fn``, ``data``, ``feed``, ...) is checked by the spec's own
:func:`~airflow_tfos.shared.spec.parse_spec`; what only the submission uses (memory sizes, cores, Spark
settings) is checked here. No I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from airflow_tfos.hooks.errors import RunConfigError, TFoSConfigError, TFoSSubmitError
from airflow_tfos.hooks.run_dir import check_run_dir, run_dir_base, templated
from airflow_tfos.hooks.spark_conf import memory_mb
from airflow_tfos.operators.errors import RenderedArgumentError
from airflow_tfos.shared.spec import SpecError, parse_spec

#: Spark settings whose values are memory sizes (``512m``, ``2g``).
MEMORY_SETTINGS = (
    "spark.driver.memory",
    "spark.driver.memoryOverhead",
    "spark.executor.memory",
    "spark.executor.memoryOverhead",
)


#: Arguments that set one Spark setting each (``SparkSubmitOperator``'s spelling), which ``conf`` may not set too.
SETTING_ARGUMENTS = {"driver_memory": "spark.driver.memory", "yarn_queue": "spark.yarn.queue"}
#: The opt-out of :func:`check_paths_reach_the_cluster`, as an argument and as a setting.
SHARED_OPT_OUT = "local_paths_shared=True (or [tfos] local_paths_shared = True)"


def rendered(value: Any) -> bool:
    """What :func:`check_arguments` is given after rendering: nothing is left to render."""
    return False


def where(op: Any) -> str:
    """How an error names the task: its operator and task id."""
    return f"{type(op).__name__} {op.task_id!r}"


def is_count(value: Any, least: int) -> bool:
    """Whether ``value`` is an integer (not a boolean) of at least ``least``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def check_memory(value: Any, name: str, task: str) -> None:
    """Raise :class:`RunConfigError` naming ``name`` unless ``value`` is a Spark memory size (``512m``, ``2g``)."""
    try:
        if isinstance(value, bool) or memory_mb(value) <= 0:
            raise TFoSConfigError(f"{value!r} is not a positive memory size")
    except TFoSConfigError:
        raise RunConfigError(
            f"{task}: {name} must be a Spark memory size such as 512m or 2g (MiB when no unit), got {value!r}"
        ) from None


def check_spec(op: Any, *, pending: Callable[[Any], bool] = rendered) -> None:
    """Raise :class:`RunConfigError` naming the task and the argument unless the spec the task asks for can be
    run: unknown keys of ``data``, ``validation_data``, ``feed``, the format, the import paths (spec.json's
    fields are the operators' arguments, so the spec's message names the argument)."""
    try:
        parse_spec(op.build_spec(code=False).to_json(), pending=pending)
    except SpecError as exc:
        message = str(exc).removeprefix("spec.json ")
        for field, argument in op.spec_argument_names.items():  # the argument the user wrote, not the spec's field
            message = re.sub(rf"(?<![\w.'])'?{field}'?(?![\w(])", argument, message)
        raise RunConfigError(f"{where(op)}: {message}") from None


def check_arguments(op: Any, *, pending: Callable[[Any], bool] = rendered) -> None:
    """Check the arguments of ``op``, a training, launch or inference operator (an
    ``airflow_tfos.operators.application._TFoSApplicationOperator``); raise :class:`RunConfigError`
    (a ``ValueError``: a DAG import error at parse time) naming the task, the argument and what it may be.

    :param pending: whether a value is not rendered yet: :func:`~airflow_tfos.hooks.run_dir.templated` at parse
        time, when such a value is checked only for its keys; the default after rendering, when all is checked.
    """
    task = where(op)
    if op.run_dir is not None and not pending(op.run_dir):
        check_run_dir(op.run_dir, f"{task}: run_dir")
    if not isinstance(op.poll_interval, (int, float)) or op.poll_interval <= 0:
        raise RunConfigError(f"{task}: poll_interval must be > 0, got {op.poll_interval!r}")
    if not is_count(op.executor_cores, 1):
        raise RunConfigError(f"{task}: executor_cores must be an integer >= 1, got {op.executor_cores!r}")
    check_memory(op.executor_memory, "executor_memory", task)
    if op.driver_memory is not None:
        check_memory(op.driver_memory, "driver_memory", task)
    for name, value in (("yarn_queue", op.yarn_queue), ("name", op.name)):
        if value is not None and not pending(value) and (not isinstance(value, str) or not value.strip()):
            raise RunConfigError(f"{task}: {name} must be a non-empty string or None, got {value!r}")
    if op.tf_memory_mb is not None and not is_count(op.tf_memory_mb, 1):
        raise RunConfigError(f"{task}: tf_memory_mb must be an integer >= 1 (MiB) or None, got {op.tf_memory_mb!r}")
    packed = op.packed_env
    if isinstance(packed, str) and not pending(packed) and "#" in packed.removesuffix("#environment"):
        raise RunConfigError(
            f"{task}: packed_env {packed!r} names an alias of its own: give the archive alone (or with "
            "#environment); it is unpacked as ./environment in every container"
        )
    if not pending(op.conf):
        if not isinstance(op.conf, dict):
            raise RunConfigError(f"{task}: conf must be a mapping of Spark settings, got {type(op.conf).__name__}")
        for name in MEMORY_SETTINGS:
            if name in op.conf and not pending(op.conf[name]):
                check_memory(op.conf[name], f"conf[{name!r}]", task)
        for argument, setting in SETTING_ARGUMENTS.items():
            if getattr(op, argument) is not None and setting in op.conf:
                raise RunConfigError(
                    f"{task}: {argument} and conf[{setting!r}] set the same Spark setting: give one of them"
                )
    check_spec(op, pending=pending)


def check_at_parse_time(op: Any) -> None:
    """:func:`check_arguments` at DAG parse time: values still holding Jinja wait for :func:`check_rendered`."""
    check_arguments(op, pending=templated)


def check_rendered(op: Any) -> None:
    """:func:`check_arguments` after rendering, before anything is submitted: every value is checked; an error
    is a :class:`RenderedArgumentError` (no retry)."""
    try:
        check_arguments(op)
    except RunConfigError as exc:
        raise RenderedArgumentError(str(exc)) from exc


def is_local_path(path: str) -> bool:
    """Whether ``path`` names this host's file system: no scheme, or ``file://``."""
    scheme = urlsplit(path).scheme.lower()
    return scheme in ("", "file")


def check_paths_reach_the_cluster(op: Any, master: str) -> None:
    """Raise :class:`RenderedArgumentError` naming the argument and the fix when the Spark master is YARN and one
    of the rendered paths the application uses (:meth:`cluster_paths`) is on this Airflow worker's own disk: the
    driver and the TF nodes run in containers on other hosts and cannot reach it. Unless the operator says that
    every host mounts such paths (``local_paths_shared``); checked before anything is written or submitted."""
    if not str(master).startswith("yarn") or op.local_paths_shared:
        return
    for name, path in op.cluster_paths().items():
        if not isinstance(path, str) or not path or not is_local_path(path):
            continue
        if name == "run_dir" and op._run_dir_as_written is None:
            fix = (
                f"set [tfos] run_dir_base (or $AIRFLOW_TFOS_RUN_DIR_BASE) to an HDFS folder, e.g. "
                f"hdfs://<nameservice>/user/<you>/tfos-runs (now {run_dir_base()!r}), or pass run_dir='hdfs://...'"
            )
        else:
            fix = f"give {name} as an hdfs:// (or webhdfs://) URI"
        raise RenderedArgumentError(
            f"{where(op)}: {name} {path!r} is on the local disk of the host that runs this task, but the Spark "
            f"master is {master!r}: the application's driver and TF nodes run in YARN containers on other hosts, "
            f"which cannot reach it. {fix[0].upper()}{fix[1:]}; if every host mounts this path at the same place "
            f"(NFS), pass {SHARED_OPT_OUT}"
        )


#: Spark settings that log spark-submit in from a keytab: Spark refuses them together with ``--proxy-user``.
KERBEROS_LOGIN_CONF = frozenset(
    {"spark.kerberos.principal", "spark.kerberos.keytab", "spark.yarn.principal", "spark.yarn.keytab"}
)


def check_proxy_user_conf(proxy_user: str | None, conf: dict[str, Any] | None) -> None:
    """Refuse ``proxy_user`` with Spark's own keytab login in ``conf`` (when the DAG is parsed: the keys are not
    templated)."""
    login_conf = sorted(key for key in (conf or {}) if key in KERBEROS_LOGIN_CONF)
    if proxy_user and login_conf:
        raise ValueError(
            f"proxy_user={proxy_user!r} together with conf {', '.join(login_conf)}: Spark refuses --proxy-user "
            "with --principal/--keytab. Drop those settings: the spark connection's principal, logged in from its "
            "keytab, impersonates the proxy user"
        )


def check_proxy_user(proxy_user: str | None, run_dir: str, webhdfs_conn_id: str | None) -> None:
    """With a proxy user and a run directory on Kerberized HDFS, the ``webhdfs`` connection must read HDFS as that
    user (its ``proxy_user``): the run directory is theirs, 0700. Raises :class:`TFoSSubmitError` naming the
    connection and what to set."""
    if not proxy_user or "://" not in run_dir or run_dir.startswith("file://"):
        return
    from airflow_tfos.hooks.webhdfs_connection import DEFAULT_CONN_ID, webhdfs_config_from_connection
    from airflow_tfos.shared.errors import WebHDFSConfigError

    conn_id = webhdfs_conn_id or DEFAULT_CONN_ID
    try:
        config = webhdfs_config_from_connection(conn_id)
    except WebHDFSConfigError:
        config = None
    if config is None or config.auth != "kerberos":
        return
    reads_as = config.effective_user()
    if reads_as != proxy_user:
        raise TFoSSubmitError(
            f"proxy_user {proxy_user!r}, but connection {conn_id!r} reads HDFS as "
            f"{reads_as or 'its own principal'!r}: the run directory {run_dir} will be {proxy_user}'s, readable by "
            f"them only; set the connection's extra doas to {proxy_user!r} (one webhdfs connection per proxied user; "
            "its sensors and the report read with it too)"
        )
