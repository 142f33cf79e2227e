"""Entry point of a TF node's process: ``python -m airflow_tfos.runtime.program.child <node-dir>``.

The Spark task writes ``payload.pkl`` (the user's function and its arguments) and ``context.pkl``
(the node's context) into a private directory and starts this module there. It runs
``main_fun(args, ctx)`` and leaves either ``result.pkl`` (the return value) or ``error.json`` (the
exception and its traceback) behind for the task to read. These files never leave the executor's local disk.

With a run directory, the node also records there (as events, best effort): ``feed`` before ``main_fun``
when data was fed from Spark (``worker``, ``job_name``, ``task_index``, ``executor_id``, ``attempt``,
``rows`` of all splits, ``splits`` (rows by split), ``bytes``, ``seconds`` its Spark task took to read
them, ``rows_per_sec``, ``peak_rss_mb`` of the Spark task while it read; with direct reads of Parquet files,
which the TF process makes while it trains, only the rows and ``source`` ``parquet``), and ``node_memory`` when
``main_fun`` has returned or raised (``worker``, ``job_name``, ``task_index``, ``executor_id``,
``attempt``, ``host``, ``peak_rss_mb`` of this process, ``ok``).

Started with ``--await-context`` (how a barrier task starts it, before the nodes have swapped their
ports), the process first loads the program (which imports its module, and whatever that imports at its
top) and imports TensorFlow when ``main_fun``'s own code imports it (:func:`uses_tensorflow`), then waits
on its stdin for one JSON message from the task: ``tf_config`` (None: no TF_CONFIG), the task's launch
times, and on a Kerberized HDFS the run's WebHDFS delegation token (:mod:`airflow_tfos.shared.storage.tokens`,
kept in memory). It then sets TF_CONFIG (TensorFlow reads it when a strategy or cluster resolver is built,
not on import), reads ``context.pkl`` and calls ``main_fun``. An empty message means that the task went away: the
process exits. It records its launch times (:mod:`airflow_tfos.runtime.program.launch_times`).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import resource
import sys
import threading
import time
import traceback
import types
from pathlib import Path

PAYLOAD = "payload.pkl"
CONTEXT = "context.pkl"
RESULT = "result.pkl"
ERROR = "error.json"
#: The flag that makes the process load the program, then wait for its TF_CONFIG on stdin.
AWAIT_CONTEXT = "--await-context"
#: Exit code of a process whose task went away before handing it its context.
ORPHANED = 70

log = logging.getLogger("airflow_tfos.node")

#: Exceptions a node sees when a peer dies or the network fails: a new TF cluster may get past them.
RETRYABLE = frozenset(
    {
        "UnavailableError",
        "AbortedError",
        "DeadlineExceededError",
        "CancelledError",
        "ConnectionError",
        "ConnectionResetError",
        "BrokenPipeError",
    }
)


#: How a port bind failure reads: TF's gRPC server (``UnknownError: Could not start gRPC server``, logged
#: with "Failed to add port to server"), or the OS (``EADDRINUSE``). The port a node picked was free when
#: it looked, but something took it before TF bound it: a fresh TF cluster picks fresh ports.
PORT_CLASH_MARKERS = ("could not start grpc server", "failed to add port", "address already in use")


def is_peer_loss(reason: str) -> bool:
    """Whether a node's failure reason (``"UnavailableError: ..."``) is how a node meets a peer's loss or the
    network's, as opposed to a failure of its own (a port taken, its program's error)."""
    name = reason.split(":", 1)[0].strip()
    return name in RETRYABLE and not any(marker in reason.lower() for marker in PORT_CLASH_MARKERS)


def is_retryable(exc: BaseException) -> bool:
    """Whether a fresh TF cluster may get past ``exc``: a lost peer, the network, or a port taken meanwhile."""
    if type(exc).__name__ in RETRYABLE:
        return True
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return True
    text = str(exc).lower()
    return any(marker in text for marker in PORT_CLASH_MARKERS)


def _watch_parent(parent_pid: int) -> None:
    """Exit if the Spark task that started this process goes away (backs up PR_SET_PDEATHSIG)."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(ORPHANED)
        time.sleep(1.0)


def _write_error(node_dir: Path, exc: BaseException, reason: str | None = None) -> None:
    record = {
        "type": type(exc).__name__,
        "retryable": is_retryable(exc),
        "reason": reason or f"{type(exc).__name__}: {exc}",
        "traceback": "".join(traceback.format_exception(exc)),
    }
    bad_input = _input_error()
    if bad_input is not None:  # the node's own reads met bad data: that is the cause, whatever TF raised
        record.update(type=type(bad_input).__name__, retryable=False, reason=str(bad_input), kind="input")
    tmp = node_dir / (ERROR + ".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(node_dir / ERROR)


def _input_error() -> BaseException | None:
    """The bad input this process's direct reads of Parquet files met, if it read any."""
    reads = sys.modules.get("airflow_tfos.runtime.feed.parquet_reads")
    return reads.input_error() if reads is not None else None


def peak_rss_mb() -> float:
    """This process's peak resident memory in MiB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / 2**20 if sys.platform == "darwin" else peak / 1024, 1)  # bytes on macOS, KiB on Linux


def _node_fields(ctx) -> dict:
    fields = {
        "worker": f"{ctx.job_name}:{ctx.task_index}",
        "job_name": ctx.job_name,
        "task_index": ctx.task_index,
        "executor_id": ctx.executor_id,
        "attempt": ctx.attempt,
    }
    cluster_id = os.environ.get("AIRFLOW_TFOS_CLUSTER_ID")  # written as the records' run_id
    return {**fields, "run_id": cluster_id} if cluster_id else fields


def _record_feed(ctx) -> None:
    """Record how many rows reached this node from Spark, and how fast (all splits were read together)."""
    if not ctx.run_dir or not (ctx.feed_shares or hasattr(ctx.mgr, "balance_record")):
        return
    from airflow_tfos.shared import events
    from airflow_tfos.shared.rundir import RunDir

    try:
        if not ctx.feed_shares:  # TFCluster.train's rows, read by DataFeed
            balance = {"train": ctx.mgr.balance_record()}
            RunDir(ctx.run_dir).add_event(events.FEED, **_node_fields(ctx), rows=ctx.mgr.rows, balance=balance)
            return
        shares = dict(sorted(ctx.feed_shares.items()))
        rows = sum(int(share.rows) for share in shares.values())
        fields = {
            **_node_fields(ctx),
            "rows": rows,
            "splits": {name: int(share.rows) for name, share in shares.items()},
            # Per split: the rows an epoch feeds, and how many of them balance repeated or left out on this node.
            "balance": {name: share.balance_record() for name, share in shares.items() if share.rows},
            "orders": {name: share.order for name, share in shares.items() if share.order},
        }
        if any(share.streamed for share in shares.values()):
            # Direct reads: the TF process reads its Parquet slices while it trains, nothing was read before.
            RunDir(ctx.run_dir).add_event(events.FEED, **fields, source="parquet")
            return
        seconds = max(float(share.spill_seconds) for share in shares.values())
        RunDir(ctx.run_dir).add_event(
            events.FEED,
            **fields,
            bytes=sum(os.path.getsize(share.path) for share in shares.values() if os.path.exists(share.path)),
            seconds=round(seconds, 3),
            rows_per_sec=round(rows / seconds, 1) if seconds > 0 else None,
            peak_rss_mb=round(max(float(share.spill_peak_rss_mb) for share in shares.values()), 1),
        )
    except Exception as exc:  # statistics only: never fail a node for them
        log.warning("cannot record the feed statistics in %s: %s", ctx.run_dir, exc)


def _record_end(ctx, ok: bool) -> None:
    """Wait for pending progress writes, then record this process's peak memory."""
    if ctx is None or not ctx.run_dir:
        return
    try:
        from airflow_tfos.runtime.program.progress_writer import flush_all
        from airflow_tfos.shared.rundir import RunDir

        flush_all(timeout=30.0 if ok else 10.0)
        RunDir(ctx.run_dir).add_event(
            "node_memory", **_node_fields(ctx), host=ctx.host, peak_rss_mb=peak_rss_mb(), ok=ok
        )
    except Exception as exc:
        log.warning("cannot record the node's memory in %s: %s", ctx.run_dir, exc)


def _record_ended(ctx) -> None:
    """Record that this node's program ended and its result is written: the driver's end watch
    (runtime/driver/ended.py) ends an attempt whose nodes all ended but whose Spark stage does not."""
    if not ctx.run_dir:
        return
    from airflow_tfos.shared.rundir import RunDir

    fields = _node_fields(ctx)
    try:
        RunDir(ctx.run_dir).mark_node_ended(fields["worker"], run_id=fields.get("run_id"), attempt=ctx.attempt)
    except Exception as exc:  # then Spark's heartbeat timeout is what ends a stage an executor hangs
        log.warning("cannot record the node's end in %s: %s", ctx.run_dir, exc)


def _load_payload(node_dir: Path):
    from airflow_tfos.runtime.program.keras_refs import load_main

    try:
        with open(node_dir / PAYLOAD, "rb") as f:
            return load_main(f)  # with one Keras, whatever the driver's module imported at its top
    except (ModuleNotFoundError, AttributeError) as exc:
        raise ImportError(
            f"cannot load main_fun on this executor ({exc}). The module that defines main_fun must be "
            "importable on every executor: ship it with --py-files / spark.submit.pyFiles (or "
            "sc.addPyFile), install it into the executors' Python environment, or define main_fun in "
            "the driver script itself"
        ) from exc


def _load_context(node_dir: Path):
    with open(node_dir / CONTEXT, "rb") as f:
        return pickle.load(f)


def _code_names(code: types.CodeType):
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_names(const)


def uses_tensorflow(main_fun, _depth: int = 0) -> bool:
    """Whether ``main_fun``'s code imports TensorFlow (looking through wrappers: ``functools.partial``, TFoS's
    ``map_fun``, ``__wrapped__``)."""
    if _depth > 4:
        return False
    code = getattr(main_fun, "__code__", None)
    if code is not None and "tensorflow" in set(_code_names(code)):
        return True
    inner = (getattr(main_fun, name, None) for name in ("func", "map_fun", "__wrapped__"))
    return any(uses_tensorflow(f, _depth + 1) for f in inner if f is not None and f is not main_fun)


def _preload(main_fun) -> float | None:
    """Import TensorFlow now if the program uses it; return when it was imported (None: it is not)."""
    if "tensorflow" not in sys.modules and uses_tensorflow(main_fun):
        try:
            import tensorflow  # noqa: F401
        except ImportError as exc:  # main_fun meets it again, and reports it as its own failure
            log.warning("cannot import tensorflow ahead of main_fun: %s", exc)
    return time.time() if "tensorflow" in sys.modules else None


def _await_context(times: dict) -> bool:
    """Wait for the task's message; set TF_CONFIG from it. False: the task went away."""
    data = sys.stdin.buffer.read()
    if not data:
        return False
    message = json.loads(data)
    os.environ.pop("TF_CONFIG", None)
    if message.get("tf_config"):
        os.environ["TF_CONFIG"] = message["tf_config"]
    if message.get("webhdfs_token"):  # in this process's memory only: every WebHDFS call sends it
        from airflow_tfos.shared.storage.kerberos import use_delegation_token

        use_delegation_token(message["webhdfs_token"])
    times.update(message.get("times", {}))
    return True


def _record_launch(ctx, times: dict) -> None:
    """Record this node's launch times (:mod:`airflow_tfos.runtime.program.launch_times`), best effort."""
    from airflow_tfos.runtime.program import launch_times

    record = {**_node_fields(ctx), **times}
    try:
        if directory := os.environ.get(launch_times.LAUNCH_TIMES_ENV):
            launch_times.write_record(directory, record)
        if ctx.run_dir:
            from airflow_tfos.shared.rundir import RunDir

            RunDir(ctx.run_dir).add_event("launch", **record)
    except Exception as exc:  # statistics only: never fail a node for them
        log.warning("cannot record the launch times: %s", exc)


def _start_data_service(ctx) -> None:
    """Under parameter servers: the chief's tf.data dispatcher, each worker's tf.data worker (in its working
    directory), before ``main_fun`` builds its strategy (:mod:`airflow_tfos.runtime.feed.service`)."""
    service = getattr(ctx, "data_service", None)
    if service is None:
        return
    from airflow_tfos.runtime.feed import service as data_service

    if ctx.job_name in ("chief", "master"):
        data_service.start_dispatcher(int(service.dispatcher.rsplit(":", 1)[1]))
    elif ctx.job_name == "worker":
        data_service.start_worker(service.dispatcher, ctx.host)


def main(argv: list[str]) -> int:
    times = {"started": time.time()}
    node_dir = Path(argv[1])
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True, name="parent-watch").start()
    logging.basicConfig(
        level=os.environ.get("AIRFLOW_TFOS_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s [%(name)s] %(message)s",
        stream=sys.stderr,
    )
    awaits = AWAIT_CONTEXT in argv[2:]
    ctx = None
    try:
        main_fun, args = _load_payload(node_dir)
        if awaits:
            times["tf_imported"] = _preload(main_fun)
            if not _await_context(times):
                log.info("the task that started this node went away before handing over its context")
                return ORPHANED
        ctx = _load_context(node_dir)
        times["main_started"] = time.time()
        if awaits:
            _record_launch(ctx, times)
        if isinstance(args, list):
            sys.argv = list(args)  # as TFoS did, for programs that parse sys.argv
        _record_feed(ctx)
        _start_data_service(ctx)
        log.info("node %s:%d starting main_fun", ctx.job_name, ctx.task_index)
        result = main_fun(args, ctx)
    except SystemExit as exc:
        if exc.code in (None, 0):
            result = None
        else:
            _write_error(node_dir, exc, reason=f"main_fun called sys.exit({exc.code!r})")
            _record_end(ctx, ok=False)
            return 1
    except BaseException as exc:
        _write_error(node_dir, exc)
        _record_end(ctx, ok=False)
        return 1
    _record_end(ctx, ok=True)
    try:
        from pyspark import cloudpickle

        data = cloudpickle.dumps(result)
    except Exception as exc:
        _write_error(node_dir, exc, reason=f"main_fun's return value cannot be pickled: {exc}")
        return 1
    tmp = node_dir / (RESULT + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(node_dir / RESULT)
    log.info("node %s:%d finished main_fun", ctx.job_name, ctx.task_index)
    _record_ended(ctx)
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # TF's threads can keep a normal interpreter exit waiting; the result is already on disk.
    os._exit(code)
