"""Run one local Spark application and record how it ended: ``python -m airflow_tfos.hooks.backends.localrun``.

The local backend (:mod:`airflow_tfos.hooks.backends.local_tracker`) starts this wrapper as a detached process, the
leader of its own process group, instead of starting spark-submit directly. The wrapper runs the
command (spark-submit in client mode), waits for it and writes its exit code atomically to
``--exit-file``. So the exit code is known to whoever asks later, even when the process that submitted
the application (an Airflow task) is long gone. Pure Python: it must not import Airflow.

A SIGTERM or SIGINT sent to the wrapper (or to its whole group, as a kill does) is passed on to the
command; the wrapper stays until the command has ended and then records the exit code and the signal.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

#: Exit code recorded when the command cannot be started at all (as a shell does).
EXIT_NOT_STARTED = 127


def write_json_atomically(path: str | Path, value: dict) -> None:
    """Write ``value`` as JSON to ``path`` under a temporary name, then rename it into place."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(value, indent=1, sort_keys=True))
    os.replace(tmp, target)


def run(command: list[str], exit_file: str, remove: list[str]) -> int:
    """Run ``command``, record its end in ``exit_file``, delete the ``remove`` files; return its exit code."""
    received: list[int] = []
    child: subprocess.Popen | None = None

    def forward(signum, _frame):
        received.append(signum)
        if child is not None and child.poll() is None:
            try:
                child.send_signal(signum)
            except OSError:
                pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    started = time.time()
    error = None
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        while True:
            try:
                code = child.wait()
                break
            except InterruptedError:  # pragma: no cover - PEP 475 retries, kept for clarity
                continue
    except OSError as exc:
        error = f"cannot start {command[0]!r}: {exc}"
        sys.stderr.write(f"airflow-tfos localrun: {error}\n")
        code = EXIT_NOT_STARTED
    finally:
        for path in remove:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    record = {
        "exit_code": code,
        "signal": -code if code < 0 else None,
        "terminated_by": received[0] if received else None,
        "started": started,
        "ended": time.time(),
        "error": error,
    }
    write_json_atomically(exit_file, record)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m airflow_tfos.hooks.backends.localrun", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--exit-file", required=True, help="where to write the exit code (JSON)")
    parser.add_argument("--remove", action="append", default=[], help="a file to delete once the command ends")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    options = parser.parse_args(argv)
    command = options.command[1:] if options.command[:1] == ["--"] else options.command
    if not command:
        parser.error("give the command to run after --")
    code = run(command, options.exit_file, options.remove)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
