"""Run the whole test suite as two pytest sessions side by side: the Airflow side (DAG runs, the Airflow stack's
drills, the example DAGs, the multi-host cluster) and the rest (the runtime on a local Spark cluster, the run
directory, Kerberos, packaging).

Many of these tests wait (for a JVM to start, a task to be scheduled, a trigger to fire, a heartbeat to
lapse): one session alone leaves a two-core machine idle about a third of the time. Each session keeps its own
fixtures (one Spark context, one KDC, one Airflow stack, one multi-host cluster at most), its own temporary
folder and its own Spark application ids, so that executors of the two never share a work directory.

This is what ``make test`` (and so CI) runs; ``make test-serial`` runs one pytest session instead.
docs/testing.md says what it measured.

Usage: ``scripts/run_tests.py [pytest options...]`` (given to both sessions). Each session's output goes to
``<log dir>/<group>.log``; this prints a progress line every two minutes, then each session's summary, and the
failures of a session that failed. Exit status: 0 when both passed, else 1 (2 on a usage error).
To run some tests alone, call pytest directly:
``.venv/bin/python -m pytest tests/integration/spark/test_feed_direct.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: The tests of the Airflow side: the unit tests of its packages, the integration tests that run Airflow, the
#: drills and the multi-host cluster; every other test runs in the second session.
AIRFLOW_GROUP = [
    "tests/unit/airflow_tfos/hooks",
    "tests/unit/airflow_tfos/operators",
    "tests/unit/airflow_tfos/sensors",
    "tests/unit/airflow_tfos/triggers",
    "tests/unit/airflow_tfos/links",
    "tests/unit/airflow_tfos/plugins",
    "tests/unit/airflow_tfos/test_operators.py",
    "tests/integration/airflow",
    "tests/integration/hadoop",  # one Hadoop lab; its DAG tests are Airflow's too
    "tests/drills",
    # Airflow-side tests filed elsewhere by what they test or start; they keep to this session, as measured
    # (docs/testing.md).
    "tests/unit/airflow_tfos/shared/test_lease.py",
    "tests/unit/airflow_tfos/testing/test_yarn.py",
    "tests/integration/spark/test_adoption_trust.py",
    "tests/integration/spark/test_lease_standalone.py",
    "tests/integration/kerberos/test_adoption_trust.py",
    "tests/integration/kerberos/test_sensors.py",
    "tests/project/test_provider.py",
]
GROUPS = {
    "airflow": AIRFLOW_GROUP,
    "runtime": ["tests", *(f"--ignore={path}" for path in AIRFLOW_GROUP)],
}
#: The JVM options of each session's JVMs: the JIT's first tier only (the tests' JVMs are short-lived; see
#: tests/conftest.py) and Spark application ids of its own (a local cluster's executors work in
#: ``<SPARK_HOME>/work/<application id>``, and two masters started in the same second would pick the same id).
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -Dspark.deploy.appIdPattern=app-%s-%04d-{group}"
PROGRESS = re.compile(r"\[\s*(\d+)%\]")
SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed|errors?|skipped)|no tests ran)\b.* in [\d.]+s\b")


def prepare() -> None:
    """What both sessions would otherwise install at once: the KDC's Debian packages (apt-get holds a lock)."""
    sys.path.insert(0, str(REPO))
    from airflow_tfos.testing.kdc import ensure_installed

    ensure_installed()


def start(group: str, paths: list[str], extra: list[str], logs: Path) -> tuple[subprocess.Popen, Path]:
    log = logs / f"{group}.log"
    env = {**os.environ, "JAVA_TOOL_OPTIONS": JAVA_OPTIONS.format(group=group)}
    command = [
        sys.executable, "-m", "pytest", *paths, "-p", "no:cacheprovider", f"--basetemp={logs / group}",
        "--durations=40",  # the slowest tests, at the end of the session's log: where the suite's time goes
        *extra,
    ]  # fmt: skip
    with open(log, "w") as out:
        out.write(" ".join(command) + "\n")
        out.flush()
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    return process, log


def progress(log: Path) -> str:
    """The session's last percentage, as pytest printed it."""
    found = PROGRESS.findall(log.read_text(errors="replace")[-4000:])
    return f"{found[-1]}%" if found else "starting"


def report(group: str, log: Path, code: int, seconds: float) -> str:
    """The session's summary line, and its failures (or the end of its output) when it failed."""
    text = log.read_text(errors="replace")
    last = [line for line in text.splitlines() if SUMMARY.match(line)]
    head = f"--- {group}: exit {code} after {seconds / 60:.1f} min: {last[-1].strip('= ') if last else 'no summary'}"
    if code == 0:
        return head
    marks = [i for i in (text.find("= FAILURES ="), text.find("= ERRORS =")) if i >= 0]
    return f"{head}\n{text[min(marks) :] if marks else text[-20000:]}"


def stop(running: dict) -> None:
    """Interrupt the sessions as Ctrl-C would (pytest then tears its fixtures down: clusters, stacks, KDCs);
    kill those that are still there two minutes later."""
    for process, _ in running.values():
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
    deadline = time.monotonic() + 120
    for process, _ in running.values():
        try:
            process.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", help="folder for the sessions' output and temporary files (default: a new one)")
    options, extra = parser.parse_known_args(argv)
    logs = Path(options.logs or tempfile.mkdtemp(prefix="airflow-tfos-tests-")).resolve()
    logs.mkdir(parents=True, exist_ok=True)
    prepare()
    started = time.monotonic()
    running = {group: start(group, paths, extra, logs) for group, paths in GROUPS.items()}
    print(f"test suite: {len(running)} sessions side by side ({', '.join(running)}), output in {logs}", flush=True)
    ended: dict[str, tuple[int, float]] = {}
    last_line = started
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a CI timeout: stop the sessions cleanly too
    try:
        while len(ended) < len(running):
            time.sleep(2)
            for group, (process, log) in running.items():
                if group not in ended and process.poll() is not None:
                    ended[group] = (process.returncode, time.monotonic() - started)
                    print(report(group, log, *ended[group]), flush=True)
            if time.monotonic() - last_line >= 120 and len(ended) < len(running):
                last_line = time.monotonic()
                states = ", ".join(
                    f"{group} {'done' if group in ended else progress(log)}" for group, (_, log) in running.items()
                )
                print(f"test suite: {(last_line - started) / 60:.0f} min: {states}", flush=True)
    except KeyboardInterrupt:
        print("test suite: interrupted, stopping both sessions", flush=True)
        stop(running)
        return 1
    failed = [group for group, (code, _) in ended.items() if code != 0]
    total = (time.monotonic() - started) / 60
    print(f"test suite: {'FAILED in ' + ', '.join(failed) if failed else 'passed'} after {total:.1f} min", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
