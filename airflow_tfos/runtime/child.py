"""Entry point of a TF node's process: ``python -m airflow_tfos.runtime.child <node-dir>``.

The Spark task writes ``payload.pkl`` (the user's function and its arguments) and ``context.pkl``
(the node's context) into a private directory and starts this module there. It runs
``main_fun(args, ctx)`` and leaves either ``result.pkl`` (the return value) or ``error.json`` (the
exception and its traceback) behind for the task to read. These files never leave the executor's local disk.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sys
import threading
import time
import traceback
from pathlib import Path

PAYLOAD = "payload.pkl"
CONTEXT = "context.pkl"
RESULT = "result.pkl"
ERROR = "error.json"

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


def _watch_parent(parent_pid: int) -> None:
    """Exit if the Spark task that started this process goes away (backs up PR_SET_PDEATHSIG)."""
    while True:
        if os.getppid() != parent_pid:
            os._exit(70)
        time.sleep(1.0)


def _write_error(node_dir: Path, exc: BaseException, reason: str | None = None) -> None:
    record = {
        "type": type(exc).__name__,
        "retryable": type(exc).__name__ in RETRYABLE,
        "reason": reason or f"{type(exc).__name__}: {exc}",
        "traceback": "".join(traceback.format_exception(exc)),
    }
    tmp = node_dir / (ERROR + ".tmp")
    tmp.write_text(json.dumps(record))
    tmp.replace(node_dir / ERROR)


def _load_payload(node_dir: Path):
    try:
        with open(node_dir / PAYLOAD, "rb") as f:
            main_fun, args = pickle.load(f)
        with open(node_dir / CONTEXT, "rb") as f:
            ctx = pickle.load(f)
        return main_fun, args, ctx
    except (ModuleNotFoundError, AttributeError) as exc:
        raise ImportError(
            f"cannot load main_fun on this executor ({exc}). The module that defines main_fun must be "
            "importable on every executor: ship it with --py-files / spark.submit.pyFiles (or "
            "sc.addPyFile), install it into the executors' Python environment, or define main_fun in "
            "the driver script itself"
        ) from exc


def main(argv: list[str]) -> int:
    node_dir = Path(argv[1])
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True, name="parent-watch").start()
    logging.basicConfig(
        level=os.environ.get("AIRFLOW_TFOS_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s [%(name)s] %(message)s",
        stream=sys.stderr,
    )
    try:
        main_fun, args, ctx = _load_payload(node_dir)
        if isinstance(args, list):
            sys.argv = list(args)  # as TFoS did, for programs that parse sys.argv
        log.info("node %s:%d starting main_fun", ctx.job_name, ctx.task_index)
        result = main_fun(args, ctx)
    except SystemExit as exc:
        if exc.code in (None, 0):
            result = None
        else:
            _write_error(node_dir, exc, reason=f"main_fun called sys.exit({exc.code!r})")
            return 1
    except BaseException as exc:
        _write_error(node_dir, exc)
        return 1
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
    return 0


if __name__ == "__main__":
    sys.stdout.flush()
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # TF's threads can keep a normal interpreter exit waiting; the result is already on disk.
    os._exit(code)
