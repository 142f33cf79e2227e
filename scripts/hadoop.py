"""A Hadoop lab on this machine: Hadoop's own HDFS and YARN (3.5.0's mini clusters) in one JVM, on 127.0.0.1.

    python scripts/hadoop.py up DIR        # build if needed, start, wait until WebHDFS and the RM REST answer
    python scripts/hadoop.py up DIR --kerberos --krb5-conf F --principal P --keytab K   # secure mode
    python scripts/hadoop.py status DIR    # is it up; addresses; the daemons; memory
    python scripts/hadoop.py control DIR 'stop-datanode 0'   # or start-datanode, stop/start-nodemanager, failover
    python scripts/hadoop.py down DIR      # stop everything ``up`` started, and check that nothing is left
    python scripts/hadoop.py inspect DIR PATH...   # what HDFS holds there, as Hadoop's own client sees it (JSON)
    python scripts/hadoop.py build         # only fetch the jars from Maven Central and compile the launcher

``up`` writes ``core-site.xml``, ``hdfs-site.xml`` and ``yarn-site.xml`` into DIR (use it as HADOOP_CONF_DIR),
and ``lab.json`` with the addresses; the daemons keep their data under ``DIR/data`` and their log in
``DIR/lab.log``. The lab is a NameNode with WebHDFS, 2 DataNodes, a ResourceManager and 2 NodeManagers
(4096 MB and 4 vcores declared each) in one JVM; the containers that YARN runs are processes of their own.
The launcher is built by Maven from ``hadoop-lab/`` (see docs/hadoop-lab.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAB_SOURCE = REPO / "hadoop-lab"
LAB_TARGET = LAB_SOURCE / "target"
LAUNCHER_CLASS = "airflowtfos.hadooplab.HadoopLab"
INSPECT_CLASS = "airflowtfos.hadooplab.HdfsInspect"
READY_PREFIX = "hadoop-lab ready "
PID_FILE = "lab.pid"
DESCRIPTION_FILE = "lab.json"

log = logging.getLogger("hadoop-lab")


class LabError(RuntimeError):
    """The lab could not be built, started, reached or stopped; the message says what to change."""


# ---------------------------------------------------------------------------------------------- build


def _newest_mtime(root: Path) -> float:
    return max((p.stat().st_mtime for p in root.rglob("*") if p.is_file()), default=0.0)


def needs_build() -> bool:
    """Return whether the launcher's classes or jars are missing or older than its sources."""
    stamp = LAB_TARGET / "lib" / ".complete"
    if not stamp.exists() or not (LAB_TARGET / "classes").is_dir():
        return True
    newest = max(_newest_mtime(LAB_SOURCE / "src"), (LAB_SOURCE / "pom.xml").stat().st_mtime)
    return newest > stamp.stat().st_mtime


def _maven_failure(output: str) -> str:
    """Return Maven's lines that name what could not be fetched, or its error lines."""
    output = re.sub(r"\x1b\[[0-9;]*m", "", output)
    artifact_lines = [
        line.strip()
        for line in output.splitlines()
        if re.search(
            r"Could not (transfer|resolve|find) artifact|Cannot access central|"
            r"Failed to read artifact descriptor|Non-resolvable",
            line,
        )
    ]
    if artifact_lines:
        return "\n".join(dict.fromkeys(artifact_lines))
    errors = [line.strip() for line in output.splitlines() if line.startswith("[ERROR]")]
    return "\n".join(errors[:15]) or output[-2000:]


def build(maven_args: list[str] | None = None) -> float:
    """Fetch the pinned jars from Maven Central (checksums enforced), compile the launcher; return seconds."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LabError("Maven (mvn) is not on PATH: install Maven 3.8+ (Debian: apt-get install maven)")
    cmd = [mvn, "-B", "-C", "-q", "-f", str(LAB_SOURCE / "pom.xml"), *(maven_args or []), "package"]
    log.info("building the lab: %s", " ".join(cmd))
    started = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        what = _maven_failure(result.stdout + result.stderr)
        hint = ""
        if re.search(r"artifact|central", what, re.IGNORECASE):
            hint = (
                "\nMaven could not fetch an artifact named above: Maven Central "
                "(https://repo.maven.apache.org/maven2) must be reachable, or ~/.m2/repository must already "
                "hold it (then pass --maven-arg=-o)."
            )
        raise LabError(f"building hadoop-lab failed (mvn exit {result.returncode}):\n{what}{hint}")
    (LAB_TARGET / "lib" / ".complete").touch()
    return time.monotonic() - started


def classpath() -> str:
    return os.pathsep.join([str(LAB_TARGET / "classes"), str(LAB_TARGET / "lib" / "*")])


# ---------------------------------------------------------------------------------------------- processes


def _start_ticks(pid: int) -> int | None:
    """Return the process's start time in clock ticks since boot (to tell a reused pid), None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] == "Z"


def _alive(pid: int, ticks: int | None) -> bool:
    now = _start_ticks(pid)
    if now is None or _zombie(pid):
        return False
    return ticks is None or now == ticks


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def lab_processes(conf_dir: Path, lab_pid: int | None) -> list[int]:
    """Return the pids the lab started: its JVM, its session, and YARN's containers (working under DIR/data)."""
    data = str((conf_dir / "data").resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == os.getpid() or _zombie(pid):  # an exited process that its parent has not reaped yet
            continue
        try:
            if lab_pid is not None and (pid == lab_pid or os.getsid(pid) == lab_pid):
                found.append(pid)
                continue
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd == data or cwd.startswith(data + os.sep):
            found.append(pid)
    return sorted(found)


def _read_pid_file(conf_dir: Path) -> dict | None:
    path = conf_dir / PID_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _running_lab(conf_dir: Path) -> dict | None:
    recorded = _read_pid_file(conf_dir)
    if recorded and _alive(recorded["pid"], recorded.get("start_ticks")):
        return recorded
    return None


# ---------------------------------------------------------------------------------------------- probes


def _get_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def webhdfs_answers(namenode_http: str, user: str) -> bool:
    try:
        status = _get_json(f"http://{namenode_http}/webhdfs/v1/?op=GETFILESTATUS&user.name={user}")
    except (OSError, ValueError):
        return False
    return status.get("FileStatus", {}).get("type") == "DIRECTORY"


def _refuses_anonymous(url: str) -> bool:
    """Whether a secure endpoint answers an anonymous request with 401 Negotiate."""
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.HTTPError as e:
        return e.code == 401 and "Negotiate" in (e.headers.get("WWW-Authenticate") or "")
    except OSError:
        return False
    return False


def rm_nodes_running(rm_web: str) -> int:
    """Return how many NodeManagers the ResourceManager's REST API reports active (-1 if it does not answer)."""
    try:
        info = _get_json(f"{rm_web}/ws/v1/cluster/info")
        metrics = _get_json(f"{rm_web}/ws/v1/cluster/metrics")
    except (OSError, ValueError):
        return -1
    if info.get("clusterInfo", {}).get("state") != "STARTED":
        return -1
    return int(metrics.get("clusterMetrics", {}).get("activeNodes", 0))


def control(conf_dir: Path, command: str, timeout: float = 120.0) -> str:
    """Send one command to the lab's control port; return its answer, raise LabError on an error answer."""
    description = read_description(conf_dir)
    host, port = description["control"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(command.encode() + b"\n")
        answer = sock.makefile(encoding="utf-8").readline().strip()
    if not answer.startswith("ok"):
        raise LabError(f"the lab refused {command!r}: {answer}")
    return answer[3:]


def read_description(conf_dir: Path) -> dict:
    path = conf_dir / DESCRIPTION_FILE
    try:
        return json.loads(path.read_text())
    except OSError as e:
        raise LabError(f"no lab is up in {conf_dir} ({path} is missing): run 'hadoop.py up {conf_dir}'") from e


# ---------------------------------------------------------------------------------------------- up / down


def _java() -> tuple[str, str]:
    """Return (java executable, JAVA_HOME); YARN's containers find java through the NodeManager's JAVA_HOME."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java"), java_home
    java = shutil.which("java")
    if java is None:
        raise LabError("no java: install Java 17 or set JAVA_HOME")
    return java, str(Path(java).resolve().parent.parent)


@dataclass(frozen=True)
class Kerberos:
    """Secure mode: the realm's ``krb5.conf``, the daemons' principal (``service/127.0.0.1@REALM``) and a keytab
    holding it and ``HTTP/127.0.0.1@REALM``; users that may impersonate others; delegation tokens' renew interval
    and lifetime (short ones let a test outlive them). The principals are the caller's to create (a KDC of its own)."""

    krb5_conf: str
    principal: str
    keytab: str
    proxy_users: tuple[str, ...] = ()
    token_renew_secs: int = 86400
    token_max_lifetime_secs: int = 7 * 86400

    def java_options(self) -> list[str]:
        return [f"-Djava.security.krb5.conf={self.krb5_conf}"]

    def launcher_args(self) -> list[str]:
        args = ["--kerberos-principal", self.principal, "--kerberos-keytab", self.keytab]
        for user in self.proxy_users:
            args += ["--proxy-user", user]
        args += ["--token-renew-secs", str(self.token_renew_secs)]
        return [*args, "--token-max-lifetime-secs", str(self.token_max_lifetime_secs)]


def up(
    conf_dir: Path,
    *,
    datanodes: int,
    nodemanagers: int,
    vcores: int,
    heap: str,
    timeout: float,
    ha: bool = False,
    kerberos: Kerberos | None = None,
) -> dict:
    """Start a lab described in ``conf_dir`` and wait until it answers; return its description.

    ``ha``: an HA pair of NameNodes behind ``hdfs://lab`` (nn0 active); ``nodemanagers=0``: HDFS alone, no YARN;
    ``kerberos``: secure mode (Kerberos on RPC, SPNEGO on the web endpoints; docs/hadoop-lab.md)."""
    conf_dir = conf_dir.resolve()
    running = _running_lab(conf_dir)
    if running:
        raise LabError(
            f"a lab is already running from {conf_dir} (pid {running['pid']}): run 'hadoop.py down {conf_dir}' first"
        )
    left = lab_processes(conf_dir, None)
    if left:
        raise LabError(
            f"processes of an earlier lab in {conf_dir} are still running ({left}): run 'hadoop.py down {conf_dir}'"
        )
    if needs_build():
        log.info("built the launcher in %.1f s", build())
    data = conf_dir / "data"
    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    for stale in (DESCRIPTION_FILE, "lab.log", "lab.out", "lab.err"):
        (conf_dir / stale).unlink(missing_ok=True)
    java, java_home = _java()
    cmd = [
        java,
        f"-Xmx{heap}",
        "-XX:+UseSerialGC",
        f"-Dhadoop.lab.log={conf_dir / 'lab.log'}",
        *(kerberos.java_options() if kerberos else []),
        "-cp",
        classpath(),
        LAUNCHER_CLASS,
        "--dir",
        str(conf_dir),
        "--datanodes",
        str(datanodes),
        "--nodemanagers",
        str(nodemanagers),
        "--nodemanager-vcores",
        str(vcores),
        *(["--ha"] if ha else []),
        *(kerberos.launcher_args() if kerberos else []),
    ]
    env = dict(os.environ, JAVA_HOME=java_home)
    env.pop("HADOOP_CONF_DIR", None)
    started = time.monotonic()
    with open(conf_dir / "lab.out", "wb") as out, open(conf_dir / "lab.err", "wb") as err:
        process = subprocess.Popen(
            cmd,
            cwd=data,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    (conf_dir / PID_FILE).write_text(json.dumps({"pid": process.pid, "start_ticks": _start_ticks(process.pid)}))
    log.info("started the lab's JVM, pid %d; waiting for WebHDFS and the ResourceManager", process.pid)
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or "root"
    deadline = started + timeout
    description: dict | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = (conf_dir / "lab.err").read_text(errors="replace")[-3000:]
            raise LabError(f"the lab's JVM exited with {process.returncode} while starting; its stderr ends:\n{tail}")
        if description is None and (conf_dir / DESCRIPTION_FILE).exists():
            description = read_description(conf_dir)
        if description and kerberos:
            # SPNEGO everywhere: an anonymous request is refused (401), which says the server is up; the launcher
            # wrote lab.json once every NodeManager had registered
            urls = [f"http://{description['namenode_http']}/webhdfs/v1/?op=GETFILESTATUS"]
            urls += [f"{description['rm_web']}/ws/v1/cluster"] if nodemanagers else []
            answering = all(_refuses_anonymous(url) for url in urls)
        else:
            answering = (
                description
                and webhdfs_answers(description["namenode_http"], user)
                and (nodemanagers == 0 or rm_nodes_running(description["rm_web"]) >= nodemanagers)
            )
        if answering:
            description["up_seconds"] = round(time.monotonic() - started, 2)
            description["java_home"] = java_home
            return description
        time.sleep(0.5)
    down(conf_dir)
    raise LabError(
        f"the lab did not answer within {timeout:.0f} s (see {conf_dir / 'lab.log'} and "
        f"{conf_dir / 'lab.err'}); raise --timeout on a busy machine"
    )


def down(conf_dir: Path, *, grace: float = 60.0) -> list[int]:
    """Stop the lab's JVM (SIGTERM, then SIGKILL after ``grace``) and YARN's containers; return the pids ended."""
    conf_dir = conf_dir.resolve()
    recorded = _running_lab(conf_dir)
    lab_pid = recorded["pid"] if recorded else None
    ended = lab_processes(conf_dir, lab_pid)
    if lab_pid is not None:
        os.kill(lab_pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while _alive(lab_pid, recorded.get("start_ticks")) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(lab_pid, recorded.get("start_ticks")):
            log.warning("the lab's JVM (pid %d) did not stop in %.0f s: killing it", lab_pid, grace)
            os.kill(lab_pid, signal.SIGKILL)
    # What is left (containers the NodeManagers did not stop, children of a killed JVM), by pid.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        left = lab_processes(conf_dir, lab_pid)
        if not left:
            break
        ended.extend(p for p in left if p not in ended)
        log.info("sending %s to what the lab left: %s", sig.name, left)
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(3.0)
    left = lab_processes(conf_dir, lab_pid)
    if left:
        raise LabError(f"processes of the lab in {conf_dir} are still there: {left}; end them by pid")
    (conf_dir / PID_FILE).unlink(missing_ok=True)
    (conf_dir / DESCRIPTION_FILE).unlink(missing_ok=True)
    return sorted(ended)


def inspect_hdfs(conf_dir: Path, paths: list[str], timeout: float = 120.0) -> dict:
    """Describe ``paths`` on the lab's HDFS with Hadoop's own Java client (over RPC, from DIR's site files).

    Return ``{"fs": ..., "client": ..., "paths": {path: None | [entry, ...]}}``: each existing path gives itself
    and everything under it, each entry with ``path``, ``type``, ``permission`` (octal), ``owner``, ``group``,
    ``length``, ``replication`` and, for a file, the ``sha256`` of its content and (up to 64 KiB, UTF-8) its ``text``.
    """
    conf_dir = conf_dir.resolve()
    if needs_build():
        log.info("built the launcher in %.1f s", build())
    java, _ = _java()
    cmd = [java, f"-Dhadoop.lab.log={conf_dir / 'inspect.log'}"]
    secure = read_description(conf_dir).get("kerberos") if (conf_dir / DESCRIPTION_FILE).exists() else None
    if secure:  # a secure lab: Hadoop's client logs in as the daemons' principal (HDFS's superuser)
        cmd.append(f"-Djava.security.krb5.conf={secure['krb5_conf']}")
    cmd += ["-cp", classpath(), INSPECT_CLASS, "--conf", str(conf_dir)]
    if secure:
        cmd += ["--login", secure["principal"], secure["keytab"]]
    cmd += paths
    env = dict(os.environ)
    env.pop("HADOOP_CONF_DIR", None)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    if result.returncode != 0:
        raise LabError(f"HdfsInspect exited with {result.returncode}: {result.stderr.strip()[-3000:]}")
    return json.loads(result.stdout.strip().split("\n")[-1])  # one line (text may hold other line breaks)


def status(conf_dir: Path) -> dict:
    """Describe the lab in ``conf_dir``: up or not, its addresses, its daemons and its processes' memory."""
    conf_dir = conf_dir.resolve()
    recorded = _running_lab(conf_dir)
    result: dict = {"conf_dir": str(conf_dir), "running": recorded is not None}
    if recorded is None:
        left = lab_processes(conf_dir, None)
        if left:
            result["left_processes"] = left
        return result
    description = read_description(conf_dir) if (conf_dir / DESCRIPTION_FILE).exists() else {}
    result.update(description)
    pids = lab_processes(conf_dir, recorded["pid"])
    result["processes"] = {pid: {"rss_mib": round(_rss_kib(pid) / 1024, 1), "cmd": _cmdline(pid)[:120]} for pid in pids}
    if description:
        if "rm_web" in description:
            result["rm_active_nodes"] = rm_nodes_running(description["rm_web"])
        result["webhdfs_answers"] = webhdfs_answers(description["namenode_http"], os.environ.get("USER", "root"))
        try:
            result["daemons"] = json.loads(control(conf_dir, "status", timeout=10))
        except (OSError, LabError, ValueError) as e:
            result["daemons"] = f"control port did not answer: {e}"
    return result


def spark_setup(conf_dir: Path, *, env_mode: str | None = "link") -> dict:
    """Spark on the lab's YARN as an administrator sets it up (``hadoop_spark.py``): jars and a packed
    environment on HDFS, ``DIR/spark-defaults.conf``."""
    import importlib.util

    conf_dir = conf_dir.resolve()
    if _running_lab(conf_dir) is None:
        raise LabError(f"no lab is running from {conf_dir}: run 'hadoop.py up {conf_dir}' first")
    spec = importlib.util.spec_from_file_location("hadoop_lab_spark", Path(__file__).with_name("hadoop_spark.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.setup(conf_dir, read_description(conf_dir), env_mode=env_mode)


# ---------------------------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start a lab whose *-site.xml files go into DIR")
    p_up.add_argument("dir", type=Path)
    p_up.add_argument("--datanodes", type=int, default=2)
    p_up.add_argument("--nodemanagers", type=int, default=2, help="0: HDFS alone, no YARN")
    p_up.add_argument("--ha", action="store_true", help="an HA pair of NameNodes behind hdfs://lab (nn0 active)")
    p_up.add_argument("--vcores", type=int, default=4, help="vcores each NodeManager declares")
    p_up.add_argument("--heap", default="1g", help="the lab JVM's -Xmx")
    p_up.add_argument("--timeout", type=float, default=180.0)
    p_up.add_argument("--kerberos", action="store_true", help="secure mode: needs --krb5-conf, --principal, --keytab")
    p_up.add_argument("--krb5-conf", help="the realm's krb5.conf (the KDC is yours to run)")
    p_up.add_argument("--principal", help="the daemons' principal, service/127.0.0.1@REALM")
    p_up.add_argument("--keytab", help="a keytab holding --principal and HTTP/127.0.0.1@REALM")
    p_up.add_argument("--proxy-user", action="append", default=[], help="a user that may impersonate others")
    p_up.add_argument("--token-renew-secs", type=int, default=86400, help="delegation tokens' renew interval")
    for name in ("down", "status"):
        sub.add_parser(name).add_argument("dir", type=Path)
    p_control = sub.add_parser("control", help="stop-datanode I | start-datanode I | stop-nodemanager I | ...")
    p_control.add_argument("dir", type=Path)
    p_control.add_argument("line")
    p_inspect = sub.add_parser("inspect", help="describe HDFS paths with Hadoop's own client, as JSON")
    p_inspect.add_argument("dir", type=Path)
    p_inspect.add_argument("paths", nargs="+")
    p_spark = sub.add_parser("spark", help="Spark's jars and a packed environment on HDFS; DIR/spark-defaults.conf")
    p_spark.add_argument("dir", type=Path)
    p_spark.add_argument("--packed-env", choices=["link", "copy", "none"], default="link")
    p_build = sub.add_parser("build", help="fetch the jars and compile the launcher")
    p_build.add_argument("--maven-arg", action="append", default=[], help="passed to mvn, e.g. -o")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        if args.command == "build":
            print(f"built in {build(args.maven_arg):.1f} s: {LAB_TARGET}")
        elif args.command == "up":
            kerberos = None
            if args.kerberos:
                if not (args.krb5_conf and args.principal and args.keytab):
                    raise LabError("--kerberos needs --krb5-conf, --principal and --keytab")
                kerberos = Kerberos(
                    args.krb5_conf,
                    args.principal,
                    args.keytab,
                    tuple(args.proxy_user),
                    args.token_renew_secs,
                    max(args.token_renew_secs, 7 * 86400),
                )
            d = up(
                args.dir,
                datanodes=args.datanodes,
                nodemanagers=args.nodemanagers,
                vcores=args.vcores,
                heap=args.heap,
                timeout=args.timeout,
                ha=args.ha,
                kerberos=kerberos,
            )
            print(f"lab up in {d['up_seconds']} s (the JVM's own start: {d['start_seconds']} s), pid {d['pid']}")
            print(f"  HADOOP_CONF_DIR={d['conf_dir']}")
            print(f"  fs.defaultFS   {d['fs_default']}")
            print(f"  WebHDFS        {d['webhdfs']}   (http://{d['namenode_http']}/webhdfs/v1/)")
            for nn in d.get("namenodes", []):
                print(f"  NameNode {nn['id']}    RPC {nn['rpc']}   HTTP {nn['http']}")
            if "rm_web" in d:
                print(f"  ResourceManager {d['rm_address']}   REST {d['rm_web']}/ws/v1/cluster")
            print(f"  control        {d['control']}")
        elif args.command == "down":
            ended = down(args.dir)
            print(f"lab down; ended pids {ended}" if ended else "no lab was running; nothing left")
        elif args.command == "status":
            print(json.dumps(status(args.dir), indent=2))
        elif args.command == "inspect":
            print(json.dumps(inspect_hdfs(args.dir, args.paths), indent=2))
        elif args.command == "spark":
            done = spark_setup(args.dir, env_mode=None if args.packed_env == "none" else args.packed_env)
            took = ", ".join(f"{k} {v}" for k, v in done["timings"].items())
            print(f"  SPARK_CONF_DIR={args.dir.resolve()}  ({took})")
            for key, value in done["settings"].items():
                print(f"  {key} {value}")
        elif args.command == "control":
            print(control(args.dir, args.line))
    except LabError as e:
        print(f"hadoop.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
