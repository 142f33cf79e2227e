"""Real DAG runs (``airflow dags test`` on SQLite) against the local backend: a sensor failing at once on a
FAILED application of the ResourceManager emulator; a failed launch that leaves nothing running; a
lifecycle run (launch, feed, shutdown) run again after its spec changed, past its first shutdown's stop
request; concurrent publish runs racing on one model registry.

The DAGs are in tests/integration/airflow/dags/tfos_it_dags.py. Fresh runs and reruns are run by the DAG tests
on the Hadoop lab (tests/integration/hadoop, secure mode included), by the example DAGs' tests and by the failure
drills (tests/drills: a real scheduler and triggerer; a retry after the driver is killed, resuming from
its checkpoint; an executor kill; a UI "Clear"); launch / feed / shutdown, twice, by the lifecycle
example's test.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from airflow_tfos.shared.registry import ModelRegistry
from airflow_tfos.shared.rundir import RunDir
from tests.conftest import REPO, write_linear_parquet

pytestmark = pytest.mark.integration

DAGS = Path(__file__).parent / "dags"


@pytest.fixture(scope="module")
def data_path(tmp_path_factory) -> str:
    """600 rows of y = 3 x0 - 2 x1 + 1, as Parquet files written without Spark."""
    return write_linear_parquet(tmp_path_factory.mktemp("data") / "linear", seed=7)


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory, data_path) -> dict[str, str]:
    home = tmp_path_factory.mktemp("airflow")
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW_CONN_SPARK_TFOS_IT": json.dumps({"conn_type": "spark", "host": "local-cluster[2,1,1024]"}),
        "AIRFLOW_TFOS_LOCAL_DIR": str(home / "tfos-local"),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "TFOS_IT_DATA": data_path,
    }
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return env


_DATES = iter(f"2026-11-{day:02d}" for day in range(1, 29))


def dags_test(
    env: dict[str, str], dag_id: str, timeout: float = 600, date: str | None = None, **extra: str
) -> subprocess.CompletedProcess:
    """Run one DAG run to its end; each call uses a new logical date unless given ``date`` (the run of that
    date is run again: ``airflow dags test`` clears its task instances first, as a Clear in the UI does)."""
    return subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", dag_id, date or next(_DATES)],
        env={**env, **extra},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def succeeded(done: subprocess.CompletedProcess) -> bool:
    return done.returncode == 0 and "state=failed" not in done.stdout + done.stderr


def tail(done: subprocess.CompletedProcess) -> str:
    return (done.stdout + done.stderr)[-6000:]


def applications(env: dict[str, str]) -> list[dict]:
    apps = Path(env["AIRFLOW_TFOS_LOCAL_DIR"]) / "apps"
    names = sorted(p for p in apps.glob("*.json") if p.name.count(".") == 1) if apps.exists() else []
    return [json.loads(p.read_text()) for p in names]


def test_sensor_fails_at_once_on_a_failed_yarn_application(airflow_env):
    """The YARN side is the ResourceManager emulator (no YARN can run here)."""
    from airflow_tfos.testing.yarn import ResourceManagerEmulator

    with ResourceManagerEmulator() as rm:
        app_id = rm.add_application("tfos nightly.train", tags=["tfos-x"], state="RUNNING")
        rm.set_state(app_id, "FAILED", "FAILED", "Container killed by YARN for exceeding physical memory limits")
        conn = json.dumps({"conn_type": "yarn", "host": ",".join(rm.addresses), "login": "airflow"})
        started = time.monotonic()
        done = dags_test(
            airflow_env, "tfos_it_yarn_sensor", timeout=300, TFOS_IT_APP_ID=app_id, AIRFLOW_CONN_YARN_TFOS_IT=conn
        )
        elapsed = time.monotonic() - started
    assert not succeeded(done)
    assert "exceeding physical memory limits" in done.stdout + done.stderr
    assert elapsed < 55, f"the sensor waited {elapsed:.0f} s instead of failing at once"


def test_a_failed_launch_leaves_nothing_running_and_the_shutdown_still_runs(airflow_env):
    from airflow_tfos.hooks.backends.local_tracker import LocalBackend

    started = time.monotonic()
    done = dags_test(airflow_env, "tfos_it_launch_fails")
    out = done.stdout + done.stderr
    assert not succeeded(done)
    assert "(ready_timeout): it was stopped" in out, tail(done)
    assert "UndefinedError" not in out  # the shutdown needs no XCom of the launch to render
    assert "nothing to stop" in out  # it ran (all_done) and found the application already gone
    apps = [a for a in applications(airflow_env) if "tfos_it_launch_fails" in a.get("run_dir", "")]
    assert len(apps) == 1
    backend = LocalBackend(airflow_env["AIRFLOW_TFOS_LOCAL_DIR"])
    deadline = time.monotonic() + 30
    while backend.processes(apps[0]["app_id"]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert backend.processes(apps[0]["app_id"]) == [], "processes of the failed launch's application are left"
    sys.stdout.write(f"failed launch: nothing of it left {time.monotonic() - started:.0f} s after the run began\n")
    assert RunDir(apps[0]["run_dir"]).events("launch_failed")


def _wait_until_gone(backend, app_ids: list[str], timeout: float = 30) -> dict[str, list]:
    deadline = time.monotonic() + timeout
    left = {app_id: backend.processes(app_id) for app_id in app_ids}
    while any(left.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
        left = {app_id: backend.processes(app_id) for app_id in app_ids}
    return {app_id: procs for app_id, procs in left.items() if procs}


def test_a_cleared_lifecycle_run_trains_anew_despite_the_stop_request_of_its_first_shutdown(airflow_env):
    """Issue 19: launch -> feed -> shutdown to success, then the spec edited (2 epochs instead of 1) and the
    same logical date run again. The first shutdown's stop request (control/stop.json) named the first
    application: the new one must serve the feed, export its own spec, and stop only at its own shutdown.

    ``airflow dags test`` of a date that has a run replaces that run (its task instances run again): the
    tasks find what a Clear leaves them, the same default run directory and feed id (both keyed by the
    logical date), with the first run's stop request, feed done record and export in it."""
    from airflow_tfos.hooks.backends.local_tracker import LocalBackend

    date, dag_id = "2026-12-01", "tfos_it_lifecycle"
    started = time.monotonic()
    first = dags_test(airflow_env, dag_id, date=date, TFOS_IT_EPOCHS="1")
    assert succeeded(first), tail(first)
    (app1,) = [a for a in applications(airflow_env) if f"/{dag_id}/" in a.get("run_dir", "")]
    rundir = RunDir(app1["run_dir"])
    spec1 = rundir.read_spec()["spec_hash"]
    assert rundir.export_success()["spec_hash"] == spec1
    assert rundir.stop_requested()["application_id"] == app1["app_id"]  # left by the first shutdown
    first_done = time.monotonic()

    rerun = dags_test(airflow_env, dag_id, date=date, TFOS_IT_EPOCHS="2")
    out = rerun.stdout + rerun.stderr
    assert succeeded(rerun), tail(rerun)
    apps = [a for a in applications(airflow_env) if f"/{dag_id}/" in a.get("run_dir", "")]
    assert len(apps) == 2 and apps[0]["app_id"] == app1["app_id"], apps  # the rerun started an application
    app2 = apps[1]
    assert app2["run_dir"] == app1["run_dir"]  # the same run directory, with the first shutdown's stop.json
    spec2 = rundir.read_spec()["spec_hash"]
    assert spec2 != spec1
    # the feed, done for the first spec, was requested again; the new application served it and exported
    # its own spec, resuming from the first run's checkpoint (step 10: 1 epoch of 10 steps)
    assert f"was done for spec {spec1}, not for the run's spec {spec2}: requesting it again" in out, tail(rerun)
    export = rundir.export_success()
    assert export["spec_hash"] == spec2, export
    assert export["step"] == 20, export  # 2 epochs in all: the checkpoint at step 10, then one more epoch
    assert not rundir.events("idle_stop")
    # then its own shutdown stopped it
    assert rundir.stop_requested()["application_id"] == app2["app_id"]
    assert f"asked application {app2['app_id']} to stop" in out
    backend = LocalBackend(airflow_env["AIRFLOW_TFOS_LOCAL_DIR"])
    assert [backend.get_state(a["app_id"]).state for a in apps] == ["FINISHED", "FINISHED"]
    assert _wait_until_gone(backend, [a["app_id"] for a in apps]) == {}, "processes of the lifecycle runs are left"
    sys.stdout.write(
        f"lifecycle: first run {first_done - started:.0f} s, cleared rerun {time.monotonic() - first_done:.0f} s\n"
    )


class _ServiceWatch(threading.Thread):
    """Reads current.json every few milliseconds: it must always name a complete copy (``_SUCCESS`` beside its
    ``model/``), whose model file stays the one first seen in service (same inode, size and time)."""

    def __init__(self, registry: Path):
        super().__init__(daemon=True)
        self.registry, self.done = registry, threading.Event()
        self.seen: dict[str, tuple] = {}  # model path -> its saved_model.pb when first seen in service
        self.order: list[str] = []  # versions/<version>/<spec> in service, in the order seen
        self.problems: list[str] = []
        self.polls = 0

    def run(self) -> None:
        while not self.done.wait(0.005):
            self.polls += 1
            try:
                record = json.loads((self.registry / "current.json").read_text())
            except FileNotFoundError:
                continue
            except ValueError as exc:
                self.problems.append(f"current.json is not JSON: {exc}")
                continue
            model = Path(record["model_path"])
            try:
                found = _identity(model / "saved_model.pb")
                complete = (model.parent / "_SUCCESS").is_file()
            except FileNotFoundError:
                found, complete = None, False
            if not complete or found != self.seen.setdefault(str(model), found):
                self.problems.append(f"current.json names {model}: complete {complete}, saved_model.pb {found}")
            where = str(model.parent.relative_to(self.registry))
            if not self.order or self.order[-1] != where:
                self.order.append(where)


def _identity(path: Path) -> tuple[int, int, int]:
    """A file's inode, size and modification time: another file put in its place differs."""
    found = path.stat()
    return found.st_ino, found.st_size, found.st_mtime_ns


def _task_span(done: subprocess.CompletedProcess, task_id: str) -> tuple[datetime, datetime]:
    """When ``airflow dags test`` started and ended ``task_id``, from its log."""
    stamps, markers = {}, {"start": f"[DAG TEST] starting task_id={task_id} ", "end": f"end task task_id={task_id} "}
    for line in (done.stdout + done.stderr).splitlines():
        for what, marker in markers.items():
            if marker in line:
                stamps[what] = datetime.fromisoformat(line.split()[0].replace("Z", "+00:00"))
    return stamps["start"], stamps["end"]


def _model_head(model: Path) -> bytes:
    with open(model / "saved_model.pb", "rb") as handle:
        return handle.readline().strip()


def test_concurrent_publishes_keep_the_newest_model_in_service_and_never_touch_a_model_in_service(
    airflow_env, tmp_path
):
    """Issue 19, the registry race, with real DAG runs on one registry: with an old model in service, a run of
    a newer date and a backfill of an older one (a better score and a bigger model: without the lock both
    would decide against the old model, and the backfill would write current.json last) publish at the same
    moment; then the newer date is run again with another spec (a changed DAG) while its first copy is in
    service. The newer model ends in service, no copy that was in service is deleted or replaced, and
    current.json always names a complete copy.

    (Two ``airflow dags test`` of a DAG not yet in the metadata database collide on SQLite while they write
    it: the first, sequential, run puts it there.)"""
    registry = tmp_path / "registry"
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {**airflow_env, "TFOS_IT_REGISTRY": str(registry)}
    oldest, older, newer = [(f"2026-12-0{day}", f"2026120{day}T000000") for day in (1, 2, 3)]
    watch = _ServiceWatch(registry)
    watch.start()
    started = time.monotonic()
    try:
        first = dags_test(env, "tfos_it_publish", date=oldest[0], TFOS_IT_SPEC="dddd0000", TFOS_IT_ACCURACY="0.80")
        assert succeeded(first), tail(first)
        assert ModelRegistry(str(registry)).current()["version"] == oldest[1]
        first_done = time.monotonic()
        together = {"TFOS_IT_BARRIER": str(barrier), "TFOS_IT_BARRIER_N": "2"}
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            runs = [
                pool.submit(
                    dags_test,
                    env,
                    "tfos_it_publish",
                    date=newer[0],
                    TFOS_IT_SPEC="aaaa1111",
                    TFOS_IT_ACCURACY="0.93",
                    TFOS_IT_BASELINE="0.90",
                    **together,
                ),
                pool.submit(
                    dags_test,
                    env,
                    "tfos_it_publish",
                    date=older[0],
                    TFOS_IT_SPEC="cccc3333",
                    TFOS_IT_ACCURACY="0.99",
                    TFOS_IT_MODEL_MB="64",
                    **together,
                ),
            ]
            for run in runs:
                assert succeeded(run.result()), tail(run.result())
        concurrent_done = time.monotonic()
        (start_a, end_a), (start_b, end_b) = (_task_span(run.result(), "publish") for run in runs)
        assert start_a < end_b and start_b < end_a, "the two publish tasks did not run at the same time"
        current = ModelRegistry(str(registry)).current()
        assert (current["version"], current["spec_hash"]) == (newer[1], "aaaa1111"), current

        # the newer date again, its DAG changed (another spec): a copy of its own beside the one in service
        changed = {"TFOS_IT_SPEC": "bbbb2222", "TFOS_IT_ACCURACY": "0.95", "TFOS_IT_BASELINE": "0.93"}
        again = dags_test(env, "tfos_it_publish", date=newer[0], **changed)
        assert succeeded(again), tail(again)
    finally:
        watch.done.set()
        watch.join(timeout=10)
    current = ModelRegistry(str(registry)).current()
    assert (current["version"], current["spec_hash"]) == (newer[1], "bbbb2222"), current
    assert watch.problems == [], watch.problems[:5]
    assert watch.seen, "current.json was never seen"
    for model, found in watch.seen.items():  # every copy that was in service is still there, unchanged
        assert _identity(Path(model) / "saved_model.pb") == found, model
        assert (Path(model).parent / "_SUCCESS").is_file(), model
    versions = registry / "versions"
    assert _model_head(versions / newer[1] / "aaaa1111" / "model") == f"model of {newer[1][:8]} spec aaaa1111".encode()
    assert _model_head(versions / newer[1] / "bbbb2222" / "model") == f"model of {newer[1][:8]} spec bbbb2222".encode()
    assert _model_head(versions / older[1] / "cccc3333" / "model") == f"model of {older[1][:8]} spec cccc3333".encode()
    # the backfill went into service, if at all, only before the newer model did (both decided under the lock)
    published = [d["version"] for d in ModelRegistry(str(registry)).decisions() if d["published"]]
    assert older[1] not in published[published.index(newer[1]) :], published
    sys.stdout.write(
        f"registry race: publish tasks started {abs((start_a - start_b).total_seconds()):.2f} s apart; in service, "
        f"in order: {watch.order}; {watch.polls} reads of current.json; first run "
        f"{first_done - started:.0f} s, concurrent runs {concurrent_done - first_done:.0f} s, rerun "
        f"{time.monotonic() - concurrent_done:.0f} s\n"
    )
