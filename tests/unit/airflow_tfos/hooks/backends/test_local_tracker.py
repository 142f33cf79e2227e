"""The local backend's process tracking, with small stand-in commands instead of spark-submit (no Spark)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import psutil
import pytest

from airflow_tfos.hooks.backends.local_tracker import (
    APP_ENV,
    ApplicationAlreadyRunningError,
    LocalBackend,
    check_tag,
    default_tracker_dir,
    map_local_state,
)
from airflow_tfos.hooks.errors import ApplicationNotFoundError
from airflow_tfos.shared.rundir import RunDir
from tests.conftest import REPO, wait_for

PY = sys.executable


def ended(backend: LocalBackend, app_id: str, within: float = 20.0):
    return wait_for(lambda: (s := backend.get_state(app_id)).is_terminal and s, within, f"{app_id} ended")


def submit(backend, code: str, tmp_path, tag: str = "tfos-test", **kwargs):
    return backend.submit(
        [PY, "-c", code], tag=tag, name="test", run_dir=str(tmp_path / "run"), master="local-cluster[1,1,512]", **kwargs
    )


@pytest.fixture
def backend(tmp_path):
    local = LocalBackend(str(tmp_path / "tracker"))
    yield local
    for record in local.records():  # never leave a stand-in running
        local.kill(record["app_id"], grace_secs=1)


def test_an_application_that_exits_0_is_finished_succeeded(backend, tmp_path):
    app_id = submit(backend, "print('hello from the driver')", tmp_path)
    assert app_id.startswith("local-")
    state = ended(backend, app_id)
    assert (state.state, state.final_status) == ("FINISHED", "SUCCEEDED")
    assert (state.tags, state.name) == (("tfos-test",), "test")
    assert "hello from the driver" in backend.log_path(app_id).read_text()


def test_a_failing_application_is_failed_with_the_log_tail(backend, tmp_path):
    app_id = submit(backend, "import sys; sys.stderr.write('Exception in thread main: boom\\n'); sys.exit(3)", tmp_path)
    state = ended(backend, app_id)
    assert (state.state, state.final_status) == ("FAILED", "FAILED")
    assert "exited with code 3" in state.diagnostics and "boom" in state.diagnostics


def test_the_status_json_error_is_in_the_diagnostics(backend, tmp_path):
    rundir = RunDir(str(tmp_path / "run"))
    code = (
        "from airflow_tfos.shared.rundir import RunDir; "
        f"RunDir({rundir.uri!r}).write_status('FAILED', error='bad spec'); "
        "exit(2)"
    )
    state = ended(backend, submit(backend, code, tmp_path))
    assert state.state == "FAILED" and "bad spec" in state.diagnostics


def test_a_command_that_cannot_start_is_failed(backend, tmp_path):
    app_id = backend.submit(
        [str(tmp_path / "no-such-spark-submit")], tag="t", name="n", run_dir=str(tmp_path), master="local[2]"
    )
    state = ended(backend, app_id)
    assert state.state == "FAILED" and "cannot start" in state.diagnostics


def test_running_then_killed_leaves_no_process_and_kill_twice_is_a_no_op(backend, tmp_path):
    code = (
        "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
        "time.sleep(600)"
    )
    app_id = submit(backend, code, tmp_path)
    wait_for(lambda: len(backend.processes(app_id)) >= 3, what="wrapper, command and grandchild")
    state = backend.get_state(app_id)
    assert (state.state, state.final_status) == ("RUNNING", "UNDEFINED")
    pgid = backend.record(app_id)["pgid"]
    killed = backend.kill(app_id, grace_secs=10)
    assert (killed.state, killed.final_status) == ("KILLED", "KILLED")
    assert backend.processes(app_id) == []
    assert not [p for p in psutil.process_iter() if _pgid(p) == pgid]
    again = backend.kill(app_id, grace_secs=10)
    assert again == killed


def test_a_command_that_ignores_sigterm_gets_sigkill_after_the_grace(backend, tmp_path):
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
        "time.sleep(600)"
    )
    app_id = submit(backend, code, tmp_path)
    wait_for(lambda: "ready" in backend.log_path(app_id).read_text(), what="ready")
    started = time.monotonic()
    assert backend.kill(app_id, grace_secs=1).state == "KILLED"
    assert time.monotonic() - started < 15
    assert backend.processes(app_id) == []


def test_another_process_sees_the_same_state(backend, tmp_path):
    app_id = submit(backend, "import time; time.sleep(600)", tmp_path)
    probe = (
        "import sys; from airflow_tfos.hooks.backends.local_tracker import LocalBackend; "
        f"print(LocalBackend({str(backend.tracker_dir)!r}).get_state({app_id!r}).state)"
    )
    seen = subprocess.run([PY, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert seen.stdout.strip() == "RUNNING", seen.stderr
    backend.kill(app_id, grace_secs=5)
    seen = subprocess.run([PY, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert seen.stdout.strip() == "KILLED", seen.stderr


def test_a_new_instance_reads_the_exit_code_after_the_submitter_is_gone(tmp_path):
    tracker = str(tmp_path / "tracker")
    code = (
        "import sys; from airflow_tfos.hooks.backends.local_tracker import LocalBackend; "
        f"print(LocalBackend({tracker!r}).submit([sys.executable, '-c', 'import time; time.sleep(1); exit(4)'], "
        f"tag='t', name='n', run_dir={str(tmp_path)!r}, master='local[1]'))"
    )
    done = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    app_id = done.stdout.strip()
    assert app_id.startswith("local-"), done.stderr
    state = ended(LocalBackend(tracker), app_id)
    assert state.state == "FAILED" and "code 4" in state.diagnostics


def test_a_live_application_with_the_tag_blocks_a_second_submission(backend, tmp_path):
    first = submit(backend, "import time; time.sleep(600)", tmp_path, tag="tfos-same")
    with pytest.raises(ApplicationAlreadyRunningError, match=first):
        submit(backend, "print(1)", tmp_path, tag="TFOS-same")
    assert [s.app_id for s in backend.find_live("tfos-same")] == [first]
    backend.kill(first, grace_secs=5)
    second = submit(backend, "print(1)", tmp_path, tag="tfos-same")
    assert [s.app_id for s in backend.find_by_tag("tfos-same")] == [first, second]


def test_racing_submissions_for_one_tag_start_one_application(tmp_path):
    tracker = str(tmp_path / "tracker")
    code = (
        "import sys, time\n"
        "from airflow_tfos.hooks.backends.local_tracker import LocalBackend\n"
        "from airflow_tfos.hooks.errors import ApplicationAlreadyRunningError\n"
        "time.sleep(max(0, float(sys.argv[1]) - time.time()))\n"
        f"backend = LocalBackend({tracker!r})\n"
        "try:\n"
        "    print(backend.submit([sys.executable, '-c', 'import time; time.sleep(600)'], tag='tfos-race', "
        f"name='n', run_dir={str(tmp_path)!r}, master='local[1]'))\n"
        "except ApplicationAlreadyRunningError:\n"
        "    print('refused')\n"
    )
    start_at = str(time.time() + 3)
    racers = [
        subprocess.Popen([PY, "-c", code, start_at], stdout=subprocess.PIPE, text=True, cwd=REPO) for _ in range(4)
    ]
    outputs = sorted(r.communicate(timeout=60)[0].strip() for r in racers)
    backend = LocalBackend(tracker)
    try:
        assert outputs.count("refused") == 3, outputs
        assert len(backend.find_live("tfos-race")) == 1
    finally:
        for record in backend.records():
            backend.kill(record["app_id"], grace_secs=2)


def test_a_reused_pid_is_not_taken_for_the_application(backend, tmp_path):
    app_id = submit(backend, "print(1)", tmp_path)
    ended(backend, app_id)
    # the wrapper writes its exit code, then exits: under load it may still be alive (and carry the application's
    # marker) a moment later, which would rightly count as running
    deadline = time.monotonic() + 30
    while backend._members(app_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not backend._members(app_id)
    path = backend._app_file(app_id)
    record = json.loads(path.read_text())
    os.unlink(backend._app_file(app_id, ".exit.json"))
    record.update(pid=os.getpid(), pgid=os.getpgid(0), start_time=psutil.Process().create_time() - 100)
    path.write_text(json.dumps(record))
    state = backend.get_state(app_id)  # this test process holds the pid, started at another time
    assert state.state == "FAILED" and "without recording an exit code" in state.diagnostics
    assert backend.kill(app_id, grace_secs=1).state == "FAILED"  # and kill leaves this process alone


def test_without_its_wrapper_the_application_runs_while_its_processes_do(backend, tmp_path):
    app_id = submit(backend, "import time; time.sleep(600)", tmp_path)
    wait_for(lambda: len(backend.processes(app_id)) >= 2, what="wrapper and command")
    os.kill(backend.record(app_id)["pid"], signal.SIGKILL)
    wait_for(lambda: backend._leader(backend.record(app_id)) is None, what="wrapper gone")
    assert backend.get_state(app_id).state == "RUNNING"
    assert backend.kill(app_id, grace_secs=5).state == "KILLED"
    assert backend.processes(app_id) == []


def test_unknown_applications(backend):
    with pytest.raises(ApplicationNotFoundError):
        backend.get_state("local-20260101000000-0123abcd")
    with pytest.raises(ApplicationNotFoundError):
        backend.get_state("application_1_1")
    assert backend.kill("local-20260101000000-0123abcd").diagnostics == "not known here"


def test_tags_are_lower_cased_and_checked():
    assert check_tag("TFoS-Run_1") == "tfos-run_1"
    for bad in ["", "a,b", "x" * 101, "é", " lead"]:
        with pytest.raises(ValueError, match="YARN application tag"):
            check_tag(bad)


def test_the_tracker_dir_default(monkeypatch, tmp_path):
    monkeypatch.setenv("AIRFLOW_TFOS_LOCAL_DIR", str(tmp_path / "x"))
    assert default_tracker_dir() == str(tmp_path / "x")
    monkeypatch.delenv("AIRFLOW_TFOS_LOCAL_DIR")
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    assert default_tracker_dir() == str(tmp_path / "home" / "tfos-local")
    monkeypatch.delenv("AIRFLOW_HOME")
    assert default_tracker_dir() == os.path.expanduser("~/airflow/tfos-local")


RECORD = {"app_id": "local-20260101000000-0123abcd", "tag": "t", "name": "n", "submitted": 100.0}


OK, BAD, RUN = ("FINISHED", "SUCCEEDED"), ("FAILED", "FAILED"), ("RUNNING", "UNDEFINED")
SIGTERMED = {"exit_code": -15, "signal": 15, "terminated_by": 15}


@pytest.mark.parametrize(
    ("kwargs", "expected", "diagnostics"),
    [
        ({"alive": True}, RUN, "the driver is starting"),
        ({"alive": True, "status": {"state": "RUNNING", "step": 7, "heartbeat": 150.0}}, RUN, "step 7"),
        ({"alive": True, "master_app": {"id": "app-1", "state": "WAITING"}}, ("ACCEPTED", "UNDEFINED"), "waiting"),
        ({"alive": False, "exit_info": {"exit_code": 0}}, OK, ""),
        ({"alive": False, "exit_info": {"exit_code": 1}, "log_tail": "oops"}, BAD, "oops"),
        ({"alive": False, "exit_info": {"exit_code": -15, "signal": 15}}, BAD, "signal 15"),
        ({"alive": False, "exit_info": SIGTERMED, "kill_info": {"reason": "r"}}, ("KILLED", "KILLED"), "r"),
        ({"alive": False, "exit_info": None, "kill_info": {"reason": "on_kill"}}, ("KILLED", "KILLED"), "on_kill"),
        ({"alive": False, "exit_info": {"exit_code": 0}, "kill_info": {"reason": "late"}}, OK, ""),
        ({"alive": False, "status": {"state": "SUCCEEDED", "heartbeat": 150.0}}, OK, ""),
        ({"alive": False, "status": {"state": "SUCCEEDED", "heartbeat": 50.0}}, BAD, "without recording"),
        ({"alive": False, "exit_info": {"exit_code": 2}, "status": {"error": "bad", "heartbeat": 150.0}}, BAD, "bad"),
    ],
)
def test_state_mapping(kwargs, expected, diagnostics):
    kwargs = {"exit_info": None, "kill_info": None, "status": None, **kwargs}
    state = map_local_state(RECORD, now=160.0, **kwargs)
    assert (state.state, state.final_status) == expected
    assert diagnostics in state.diagnostics
    assert state.tags == ("t",)


def test_a_standalone_master_waiting_for_executors_is_accepted(backend, tmp_path):
    answer = {"activeapps": [{"id": "app-20260101-0001", "state": "WAITING", "name": "airflow-tfos x"}]}

    class Master(BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(answer).encode() if self.path == "/json/" else b"{}"
            self.send_response(200 if self.path == "/json/" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Master)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        webui = f"http://127.0.0.1:{server.server_port}"
        app_id = submit(backend, "import time; time.sleep(600)", tmp_path, webui_url=webui)
        RunDir(str(tmp_path / "run")).write_status("STARTING", application_id="app-20260101-0001")
        state = backend.get_state(app_id)
        assert state.state == "ACCEPTED" and "waiting for executors" in state.diagnostics
        assert state.tracking_url == f"{webui}/app/?appId=app-20260101-0001"
        answer["activeapps"][0]["state"] = "RUNNING"
        assert backend.get_state(app_id).state == "RUNNING"
    finally:
        server.shutdown()


def test_every_process_of_an_application_carries_its_marker(backend, tmp_path):
    app_id = submit(backend, "import time; time.sleep(600)", tmp_path)
    processes = wait_for(lambda: len(p := backend.processes(app_id)) >= 2 and p, what="processes")
    assert all(p.environ()[APP_ENV] == app_id for p in processes)


def _pgid(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except (ProcessLookupError, PermissionError):
        return None


def test_the_tracking_url_is_the_applications_own_ui_not_the_local_masters():
    from airflow_tfos.hooks.backends.local_tracker import spark_ui_url

    log = (
        "INFO JettyUtils: Start Jetty 127.0.0.1:4041 for SparkUI\n"
        "INFO Utils: Successfully started service 'SparkUI' on port 4041.\n"
        "INFO MasterWebUI: Bound MasterWebUI to 127.0.0.1, and started at http://127.0.0.1:44345\n"
    )
    assert spark_ui_url(log) == "http://127.0.0.1:4041"
    taken = "INFO JettyUtils: Start Jetty 10.0.0.5:4040 for SparkUI\nWARN Utils: Service 'SparkUI' could not bind\n"
    retried = "INFO JettyUtils: Start Jetty 10.0.0.5:4041 for SparkUI\n" + log.splitlines(keepends=True)[1]
    assert spark_ui_url(taken + retried) == "http://10.0.0.5:4041"  # the port it got, not the one it tried first
    assert spark_ui_url("INFO Utils: Successfully started service 'SparkUI' on port 4045.\n") == "http://127.0.0.1:4045"
    assert spark_ui_url("INFO MasterWebUI: Bound MasterWebUI to 127.0.0.1, and started at http://127.0.0.1:1\n") is None


@pytest.mark.skipif(os.getuid() != 0, reason="starting a process as another user needs root")
def test_records_and_processes_of_another_user_are_never_taken_for_ours(backend, tmp_path):
    nobody = 65534
    foreign = subprocess.Popen(["sleep", "60"], user=nobody, start_new_session=True)
    records = backend.tracker_dir / "apps"
    try:
        # a record in our tracker directory naming another user's live process, with our tag (forged)
        forged = "local-20261121000000-0000abcd"
        records.mkdir(parents=True, exist_ok=True)
        (records / f"{forged}.json").write_text(
            json.dumps(
                {
                    "app_id": forged, "pid": foreign.pid, "pgid": foreign.pid, "tag": "tfos-test", "name": "x",
                    "start_time": psutil.Process(foreign.pid).create_time(), "run_dir": str(tmp_path / "run"),
                    "log": str(tmp_path / "none.log"), "master": "local[1]", "webui_url": None,
                    "submitted": time.time(), "command": ["sleep", "60"],
                }
            )
        )  # fmt: skip
        assert backend.find_live("tfos-test") == []
        backend.kill(forged, grace_secs=0.5)
        assert foreign.poll() is None  # never signalled
        # a record file that another user wrote, naming a live application of ours
        ours = submit(backend, "import time; time.sleep(60)", tmp_path, tag="tfos-mine")
        assert [a.app_id for a in backend.find_live("tfos-mine")] == [ours]
        os.chown(records / f"{ours}.json", nobody, -1)
        assert backend.find_live("tfos-mine") == []
        os.chown(records / f"{ours}.json", os.getuid(), -1)  # ours again, so that the fixture kills it
    finally:
        foreign.kill()
        foreign.wait()
