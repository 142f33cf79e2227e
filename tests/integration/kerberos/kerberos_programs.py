"""A training program for the Kerberized run-directory test: its worker dies once, after the first checkpoint."""

from __future__ import annotations

import os
import threading
import time

from tests.support import programs


def crash_once_after_a_checkpoint(args, ctx):
    """``programs.recoverable_training``; in the first attempt, the (non-chief) worker exits once a checkpoint
    is published."""
    if ctx.attempt == 0 and ctx.job_name == "worker":
        from airflow_tfos.shared.rundir import RunDir

        def crash() -> None:
            rundir = RunDir(ctx.run_dir)  # read over WebHDFS with the node's delegation token
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                latest = rundir.latest_checkpoint()
                if latest is not None and latest.step >= args["every"]:
                    os._exit(3)
                time.sleep(0.2)

        threading.Thread(target=crash, daemon=True).start()
    return programs.recoverable_training(args, ctx)
