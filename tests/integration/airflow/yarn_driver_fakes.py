"""A stand-in spark-submit that runs the REAL driver for a YARN submission: an EMULATION of YARN, not of Spark.

No YARN cluster can run here. :func:`write_spark_submit` writes an executable ``spark-submit`` that takes
the command line TFoSHook builds for ``--master yarn --deploy-mode cluster`` and hands the submission to
a :class:`YarnDriverBroker` in the test's process, standing in for YARN's submitApplication RPC and the
ApplicationMaster's container. The broker starts the real driver entrypoint
(``python -m airflow_tfos.runtime.driver <the application's arguments> --master local-cluster[2,1,1024]``)
as a local process in its own session, and registers it with the
:class:`~airflow_tfos.testing.yarn.ResourceManagerEmulator` (``add_process_application``), which then
reports it RUNNING, then FINISHED/SUCCEEDED or FAILED from the process's exit, and kills its process group
when asked to kill the application. The stand-in then prints the log lines a Spark 4 YARN client prints
with ``spark.yarn.submit.waitAppCompletion=false`` (so TFoSHook reads the application id) and exits.

What is carried over as YARN would: ``spark.yarn.appMasterEnv.*`` (from ``--conf`` and from the private
``--properties-file``, read while it exists) becomes the driver's environment; every other setting is
given to the driver with ``--conf`` (so ``spark.executorEnv.*`` reaches the executors). Not emulated:
``--py-files``/``--files`` shipping (the driver imports this installation), queues, containers, and the
application id Spark itself reports (local-cluster names its own, so status.json holds that one).

Every invocation of the stand-in appends one line to ``$FAKE_SPARK_SUBMIT_CALLS``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.tfos_hook_fakes import JsonBroker, write_fake_spark_submit

#: The master the broker gives the driver instead of YARN.
LOCAL_MASTER = "local-cluster[2,1,1024]"
#: The environment variable naming a driver's stand-in container, inherited by whatever the driver starts (not
#: YARN's CONTAINER_ID: with it Spark takes itself for a YARN container and looks for YARN's LOCAL_DIRS).
CONTAINER_ENV = "FAKE_YARN_CONTAINER"

_SCRIPT = r"""
import json, os, sys, time, urllib.request

with open(os.environ["FAKE_SPARK_SUBMIT_CALLS"], "a") as calls:
    calls.write(json.dumps(sys.argv[1:]) + "\n")

def unescape(value):
    out, chars = [], iter(value)
    for char in chars:
        if char == "\\":
            nxt = next(chars, "")
            out.append({"n": "\n", "r": "\r", "t": "\t", "f": "\f"}.get(nxt, nxt))
        else:
            out.append(char)
    return "".join(out)

argv, options, confs, i = sys.argv[1:], {}, {}, 0
while i < len(argv):
    if argv[i] == "--conf":
        key, _, value = argv[i + 1].partition("=")
        confs[key] = value
        i += 2
    elif argv[i] in ("--load-spark-defaults", "--verbose", "--supervise"):
        i += 1
    elif argv[i].startswith("--"):
        options[argv[i]] = argv[i + 1]
        i += 2
    else:
        options["application"], options["args"] = argv[i], argv[i + 1:]
        break
if options.get("--properties-file"):
    with open(options["--properties-file"], encoding="utf-8") as handle:
        for line in handle:
            line = line.rstrip("\n")
            if line and not line.startswith(("#", "!")) and "=" in line:
                key, _, value = line.partition("=")
                confs.setdefault(key.strip(), unescape(value))
if options.get("--master") != "yarn" or options.get("--deploy-mode") != "cluster":
    print(f"this stand-in only takes --master yarn --deploy-mode cluster, got {options}", file=sys.stderr)
    sys.exit(2)
log = lambda level, cls, text: print(time.strftime("%y/%m/%d %H:%M:%S"), level, f"{cls}:", text, flush=True)
log("INFO", "DefaultNoHARMFailoverProxyProvider", "Connecting to ResourceManager at rm.example.com/10.0.0.1:8032")
request = urllib.request.Request(
    os.environ["FAKE_YARN_DRIVER_BROKER"],
    data=json.dumps({"name": options.get("--name", ""), "queue": options.get("--queue", "default"),
                     "tags": [t for t in confs.get("spark.yarn.tags", "").split(",") if t],
                     "args": options.get("args", []), "conf": confs}).encode(),
    headers={"Content-Type": "application/json"}, method="POST")
app_id = json.loads(urllib.request.urlopen(request, timeout=30).read())["id"]
log("INFO", "Client", "Requesting a new application from cluster with 1 NodeManagers")
log("INFO", "Client", "Setting up container launch context for our AM")
log("INFO", "Client", f"Submitting application {app_id} to ResourceManager")
log("INFO", "YarnClientImpl", f"Submitted application {app_id}")
log("INFO", "Client", f"Application report for {app_id} (state: RUNNING)")
log("INFO", "Client", "\n\t client token: N/A\n\t diagnostics: N/A\n\t ApplicationMaster host: 127.0.0.1\n"
    f"\t queue: default\n\t start time: {int(time.time() * 1000)}\n\t final status: UNDEFINED\n"
    f"\t tracking URL: http://rm.example.com:8088/proxy/{app_id}/\n\t user: airflow")
log("INFO", "ShutdownHookManager", "Shutdown hook called")
"""


def write_spark_submit(folder: Path) -> Path:
    """Write the stand-in ``spark-submit`` (run by this interpreter) into ``folder``; return its path."""
    return write_fake_spark_submit(folder, _SCRIPT)


def read_calls(path: Path) -> list[list[str]]:
    """The command line of every invocation of the stand-in, oldest first."""
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def driver_command(args: list[str], conf: dict[str, str], master: str = LOCAL_MASTER) -> tuple[list[str], dict]:
    """The driver's command line and the environment YARN would add, for a submission's arguments and settings."""
    env = {k[len("spark.yarn.appMasterEnv.") :]: v for k, v in conf.items() if k.startswith("spark.yarn.appMasterEnv.")}
    command = [sys.executable, "-m", "airflow_tfos.runtime.driver", *args, "--master", master]
    for key, value in sorted(conf.items()):
        if not key.startswith("spark.yarn."):
            command += ["--conf", f"{key}={value}"]
    return command, env


class YarnDriverBroker(JsonBroker):
    """Takes the stand-in's submissions: starts the real driver and registers it with the RM emulator.

    :param rm: the running :class:`~airflow_tfos.testing.yarn.ResourceManagerEmulator`.
    :param log_dir: where each driver's output goes (``<application id>.log``).
    :param env: the drivers' base environment (YARN's ``appMasterEnv`` settings are added to it).
    :param master: the Spark master the drivers get instead of YARN.
    """

    def __init__(self, rm, *, log_dir: Path, env: dict[str, str], master: str = LOCAL_MASTER) -> None:
        super().__init__()
        self.rm, self.log_dir, self.env, self.master = rm, log_dir, dict(env), master
        #: what each submission was: application id, name, tags, the driver's command line, pid and container
        self.submissions: list[dict] = []
        self.processes: list[subprocess.Popen] = []
        self._lock = threading.Lock()

    def handle(self, body: dict) -> dict:
        return {"id": self.start_driver(body)}

    def start_driver(self, submission: dict) -> str:
        """Start the driver of one submission in its own session; register it; return its application id."""
        command, extra_env = driver_command(submission["args"], submission["conf"], self.master)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            log_path = self.log_dir / f"driver-{len(self.submissions)}.log"
            # inherited by whatever the driver starts, so that a test can find it all
            marker = {CONTAINER_ENV: f"container_fake_{os.getpid()}_{len(self.submissions):04d}"}
            with open(log_path, "wb") as log:
                process = subprocess.Popen(
                    command,
                    env={**self.env, **extra_env, **marker},
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.log_dir,
                    start_new_session=True,
                )
            self.processes.append(process)
            app_id = self.rm.add_process_application(
                process, submission["name"], tags=submission["tags"], queue=submission["queue"]
            )
            self.submissions.append(
                {
                    "app_id": app_id,
                    "name": submission["name"],
                    "tags": submission["tags"],
                    "command": command,
                    "env": sorted(extra_env),
                    "pid": process.pid,
                    "container": marker[CONTAINER_ENV],
                    "log": log_path,
                }
            )
        return app_id

    def __exit__(self, *exc_info) -> None:
        super().__exit__(*exc_info)
        for process in self.processes:  # only the drivers this broker started (each leads its own group)
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
