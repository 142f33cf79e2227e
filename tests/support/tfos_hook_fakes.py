# ruff: noqa: E501  (the stand-in prints Spark's log lines as they are)
"""A stand-in spark-submit for TFoSHook tests: an EMULATION, not Spark.

No YARN cluster can run here. :func:`write_fake_spark_submit` writes an executable script that takes
spark-submit's command line and, for ``--master yarn --deploy-mode cluster``, registers the
application with a :class:`~airflow_tfos.testing.yarn.ResourceManagerEmulator` (through
:class:`SubmissionBroker`, standing in for the YARN client's submitApplication RPC) and prints the log
lines a real Spark 4 YARN client prints in cluster mode with ``spark.yarn.submit.waitAppCompletion=false``.
For other masters it records its command line and exits 0 (or sleeps, then exits).

Every invocation writes what it was given (argv, whether the WebHDFS variable was in its environment,
the properties file's text and mode) to ``$FAKE_SPARK_SUBMIT_RECORDS/<n>.json``. ``$FAKE_SPARK_SUBMIT_MODE``:
``ok`` (default), ``fail`` (exit 1 after a Spark-like exception), ``silent`` (exit 0 naming no application).
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_SCRIPT = r"""
import json, os, stat, sys, time, urllib.request

argv = sys.argv[1:]
options, confs, i = {}, {}, 0
while i < len(argv):
    if argv[i] == "--conf":
        key, _, value = argv[i + 1].partition("=")
        confs[key] = value
        i += 2
    elif argv[i] == "--load-spark-defaults" or argv[i] == "--verbose":
        options[argv[i]] = True
        i += 1
    elif argv[i].startswith("--"):
        options[argv[i]] = argv[i + 1]
        i += 2
    else:
        options["application"], options["args"] = argv[i], argv[i + 1:]
        break
props = options.get("--properties-file")
record = {
    "argv": argv, "options": options, "conf": confs,
    "env_has_webhdfs": "AIRFLOW_TFOS_WEBHDFS" in os.environ,
    "env_webhdfs": os.environ.get("AIRFLOW_TFOS_WEBHDFS"),
    "properties": open(props).read() if props else None,
    "properties_mode": stat.S_IMODE(os.stat(props).st_mode) if props else None,
    "keytab_hex": open(options["--keytab"], "rb").read().hex() if "--keytab" in options else None,
    "keytab_mode": stat.S_IMODE(os.stat(options["--keytab"]).st_mode) if "--keytab" in options else None,
    "krb5ccname": os.environ.get("KRB5CCNAME"),
    "ccache_hex": open(os.environ["KRB5CCNAME"].removeprefix("FILE:"), "rb").read().hex()
    if os.environ.get("KRB5CCNAME", "").startswith("FILE:") and os.path.exists(os.environ["KRB5CCNAME"][5:])
    else None,
}
folder = os.environ["FAKE_SPARK_SUBMIT_RECORDS"]
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, f"{time.time_ns()}-{os.getpid()}.json"), "w") as handle:
    json.dump(record, handle)
mode = os.environ.get("FAKE_SPARK_SUBMIT_MODE", "ok")
log = lambda level, cls, text: print(time.strftime("%y/%m/%d %H:%M:%S"), level, f"{cls}:", text, flush=True)
if options.get("--master") != "yarn":
    time.sleep(float(os.environ.get("FAKE_SPARK_SUBMIT_SLEEP", "0")))
    sys.exit(0)
log("WARN", "NativeCodeLoader", "Unable to load native-hadoop library for your platform... using builtin-java classes where applicable")
log("INFO", "DefaultNoHARMFailoverProxyProvider", "Connecting to ResourceManager at rm.example.com/10.0.0.1:8032")
if mode == "fail":
    print('Exception in thread "main" org.apache.hadoop.security.AccessControlException: Permission denied: user=airflow, access=WRITE, inode="/user":hdfs:supergroup:drwxr-xr-x', flush=True)
    print("\tat org.apache.hadoop.hdfs.server.namenode.FSPermissionChecker.check(FSPermissionChecker.java:506)", flush=True)
    sys.exit(1)
if mode == "silent":
    log("INFO", "ShutdownHookManager", "Shutdown hook called")
    sys.exit(0)
request = urllib.request.Request(
    os.environ["FAKE_YARN_BROKER"],
    data=json.dumps({"name": options.get("--name", ""), "tags": confs.get("spark.yarn.tags", "").split(","),
                     "queue": options.get("--queue", "default")}).encode(),
    headers={"Content-Type": "application/json"}, method="POST")
reply = json.loads(urllib.request.urlopen(request, timeout=10).read())
app_id, max_mb = reply["id"], reply["max_mb"]
log("INFO", "Client", "Requesting a new application from cluster with 3 NodeManagers")
log("INFO", "Client", f"Verifying our application has not requested more than the maximum memory capability of the cluster ({max_mb} MB per container)")
log("INFO", "Client", "Will allocate AM container, with 1408 MB memory including 384 MB overhead")
log("INFO", "Client", "Setting up container launch context for our AM")
log("INFO", "Client", "Preparing resources for our AM container")
for path in [options["application"], *options.get("--py-files", "").split(",")]:
    if path:
        name = os.path.basename(path)
        log("INFO", "Client", f"Uploading resource file:{path} -> hdfs://nn.example.com:8020/user/airflow/.sparkStaging/{app_id}/{name}")
log("INFO", "Client", f"Submitting application {app_id} to ResourceManager")
log("INFO", "YarnClientImpl", f"Submitted application {app_id}")
log("INFO", "Client", f"Application report for {app_id} (state: ACCEPTED)")
log("INFO", "Client", "\n\t client token: N/A\n\t diagnostics: AM container is launched, waiting for AM container to Register with RM\n"
    f"\t ApplicationMaster host: N/A\n\t ApplicationMaster RPC port: -1\n\t queue: default\n\t start time: {int(time.time() * 1000)}\n"
    f"\t final status: UNDEFINED\n\t tracking URL: http://rm.example.com:8088/proxy/{app_id}/\n\t user: airflow")
log("INFO", "ShutdownHookManager", "Shutdown hook called")
"""


def write_fake_spark_submit(folder: Path, script: str = _SCRIPT) -> Path:
    """Write a stand-in spark-submit (``script``, run by this interpreter) into ``folder``; return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "spark-submit"
    path.write_text(f"#!{sys.executable}\n{script}")
    path.chmod(0o755)
    return path


def read_records(folder: Path) -> list[dict]:
    """What each invocation of the stand-in was given, oldest first."""
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))] if folder.is_dir() else []


class JsonBroker:
    """A 127.0.0.1 HTTP server taking JSON POSTs from a stand-in spark-submit; subclasses say what a submission does.

    Used as a context manager: serving while inside it.
    """

    def __init__(self) -> None:
        broker = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                try:
                    answer, status = broker.handle(body), 200
                except Exception as exc:  # the stand-in prints it and fails, as spark-submit would
                    answer, status = {"error": repr(exc)}, 500
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def handle(self, body: dict) -> dict:
        """Answer one submission (a JSON object)."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/submit"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()


class SubmissionBroker(JsonBroker):
    """Registers a submission with the ResourceManager emulator (stands in for YARN's submitApplication RPC).

    :param rm: the :class:`~airflow_tfos.testing.yarn.ResourceManagerEmulator`.
    """

    def __init__(self, rm) -> None:
        super().__init__()
        self.rm = rm

    def handle(self, body: dict) -> dict:
        app_id = self.rm.add_application(
            body["name"], tags=[t for t in body["tags"] if t], state="ACCEPTED", queue=body["queue"]
        )
        return {"id": app_id, "max_mb": self.rm.max_allocation_mb}
