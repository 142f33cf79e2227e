"""Spark on the Hadoop lab's YARN, set up as a cluster's administrator sets it up (``scripts/hadoop.py spark DIR``).

- Spark's jars (pip's pyspark ``jars/``, as one stored zip) on HDFS, named by ``spark.yarn.archive``, so that a
  submit does not upload 397 MB: the NodeManagers keep it between applications (it is world-readable).
- Optionally a packed Python environment on HDFS (:mod:`airflow_tfos.testing.packed_env`: the runtime's
  packages without ``airflow_tfos`` and ``pyspark``), named by ``spark.yarn.dist.archives`` and run as the
  containers' Python, the cluster's default environment.
- Event logs on HDFS (``/spark-history``) and a Spark history server reading them (pip's pyspark's own
  ``HistoryServer``, on 127.0.0.1, a process of the lab that ``down`` ends), named by
  ``spark.yarn.historyServer.address``: where an ended application's UI lives on.
- ``DIR/spark-defaults.conf`` with those settings: ``SPARK_CONF_DIR=DIR`` beside ``HADOOP_CONF_DIR=DIR``.

Both files are built once in ``hadoop-lab/target/`` (ignored by git) and uploaded to each new lab. A built file
is reused only while it, its folder and its ``.sha256`` beside it belong to this user, no one else may write
them, and its bytes still have that digest; else it is built again.
"""

from __future__ import annotations

import hashlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAB_TARGET = REPO / "hadoop-lab" / "target"
SPARK_DEFAULTS = "spark-defaults.conf"
JARS_DIR, ENVS_DIR, HISTORY_DIR = "/spark", "/envs", "/spark-history"
#: The Python the containers run from the packed environment (``--archives ...#environment``).
ENV_PYTHON = "./environment/bin/python"


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _ours(path: Path) -> bool:
    """Whether ``path`` belongs to this user and no one else may write it."""
    info = path.stat()
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def reusable(target: Path) -> bool:
    """Whether a file built earlier may be used again: ``target``, its folder and ``target.sha256`` are this
    user's and no one else's to write, and ``target``'s bytes have the digest recorded when it was built."""
    sidecar = target.with_name(target.name + ".sha256")
    try:
        if not (_ours(target.parent) and _ours(target) and _ours(sidecar)):
            return False
        return sidecar.read_text().strip() == _digest(target)
    except OSError:
        return False


def record(target: Path) -> Path:
    """Write ``target.sha256`` (its digest, for :func:`reusable`); return ``target``."""
    sidecar = target.with_name(target.name + ".sha256")
    partial = sidecar.with_name(f".{sidecar.name}.{os.getpid()}")
    partial.write_text(_digest(target) + "\n")
    partial.chmod(0o644)
    partial.rename(sidecar)
    return target


def spark_jars_zip() -> Path:
    """pip's pyspark jars as one stored (not compressed) zip, built once per pyspark version."""
    import pyspark

    target = LAB_TARGET / f"spark-jars-{pyspark.__version__}.zip"
    if not reusable(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_STORED) as archive:
            for jar in sorted((Path(pyspark.__file__).parent / "jars").glob("*.jar")):
                archive.write(jar, jar.name)
        partial.chmod(0o644)
        partial.rename(target)
        record(target)
    return target


def packed_env(mode: str, extras: tuple[str, ...] = ("runtime", "demo")) -> Path:
    """The packed environment for ``extras`` in ``mode``, built again when the installed packages change."""
    sys.path.insert(0, str(REPO))
    from airflow_tfos.testing import packed_env as packing

    distributions = [d for extra in extras for d in packing.runtime_distributions(extra)]
    names = sorted({f"{d.metadata['Name']}=={d.version}" for d in distributions})
    key = hashlib.sha256("\n".join([*names, mode, sys.version]).encode()).hexdigest()[:12]
    target = LAB_TARGET / f"packed-env-{mode}-{key}.tar"
    if not reusable(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        packing.build(target, mode=mode, extras=extras)
        target.chmod(0o644)
        record(target)
    return target


def _client(description: dict):
    """An HdfsCLI client of the lab's WebHDFS as HDFS's superuser: the lab's OS user, or on a secure lab the
    daemons' principal logged in from their keytab (SPNEGO, the project's own)."""
    from hdfs import Client, InsecureClient

    url = f"http://{description['namenode_http']}"
    secure = description.get("kerberos")
    if not secure:
        return InsecureClient(url, user=os.environ.get("USER") or "root")
    import requests

    sys.path.insert(0, str(REPO))
    from airflow_tfos.shared.storage.kerberos import KerberosLogin, SpnegoAuth

    os.environ.setdefault("KRB5_CONFIG", secure["krb5_conf"])
    session = requests.Session()
    session.auth = SpnegoAuth(KerberosLogin(secure["principal"], secure["keytab"]), use_token=False)
    return Client(url, session=session)


def upload(description: dict, local: Path, hdfs_path: str) -> None:
    """Put ``local`` on HDFS at ``hdfs_path``, readable by everyone (so YARN localizes it once per NodeManager)."""
    client = _client(description)
    folder = os.path.dirname(hdfs_path)
    client.makedirs(folder, permission="755")
    client.set_permission(folder, "755")
    client.upload(hdfs_path, str(local), overwrite=True, permission="644")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_history_server(conf_dir: Path, description: dict, timeout: float = 120.0) -> str:
    """Start Spark's history server on the lab's event logs, working in ``DIR/data/history`` (so ``down`` ends
    it); return its address (``127.0.0.1:port``) once its page answers."""
    import pyspark

    client = _client(description)
    client.makedirs(HISTORY_DIR, permission="1777")
    client.set_permission(HISTORY_DIR, "1777")
    port = _free_port()
    work = conf_dir / "data" / "history"
    work.mkdir(parents=True, exist_ok=True)
    options = [
        f"-Dspark.history.fs.logDirectory={description['fs_default']}{HISTORY_DIR}",
        f"-Dspark.history.ui.port={port}",
        "-Dspark.history.fs.update.interval=2s",
        "-Dspark.ui.enabled=true",
    ]
    secure = description.get("kerberos")
    if secure:  # it reads the event logs as HDFS's superuser, logged in from the daemons' keytab
        options += [
            f"-Djava.security.krb5.conf={secure['krb5_conf']}",
            "-Dspark.history.kerberos.enabled=true",
            f"-Dspark.history.kerberos.principal={secure['principal']}",
            f"-Dspark.history.kerberos.keytab={secure['keytab']}",
        ]
    env = {
        **os.environ,
        "HADOOP_CONF_DIR": str(conf_dir),
        "SPARK_CONF_DIR": str(work),  # not the lab's spark-defaults.conf: those are the applications' settings
        "SPARK_LOCAL_IP": "127.0.0.1",  # its page listens there (else on every address)
        "SPARK_HISTORY_OPTS": " ".join(options),
        "SPARK_NO_DAEMONIZE": "1",
    }
    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    with open(work / "history.log", "wb") as log:
        subprocess.Popen(
            [str(spark_class), "org.apache.spark.deploy.history.HistoryServer"],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/applications", timeout=5):
                return f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"the Spark history server did not answer on port {port} in {timeout:.0f} s: see {log.name}")


def setup(conf_dir: Path, description: dict, *, env_mode: str | None = "link") -> dict:
    """Upload Spark's jars (and a packed environment unless ``env_mode`` is None) to the lab's HDFS and write
    ``conf_dir/spark-defaults.conf``; return the settings written and the seconds each step took."""
    import pyspark

    timings: dict[str, float] = {}
    started = time.monotonic()
    jars = spark_jars_zip()
    jars_path = f"{JARS_DIR}/{jars.name}"
    upload(description, jars, jars_path)
    timings["spark_jars_s"] = round(time.monotonic() - started, 1)
    settings = {"spark.yarn.archive": f"{description['fs_default']}{jars_path}"}
    # the lab listens on 127.0.0.1 only: so do the driver and the executors (else the machine's outside address);
    # and their JVMs are short-lived (the JIT's first tier only). A secure lab's realm is not the machine's
    # (/etc/krb5.conf on a site's hosts): every JVM is told where its krb5.conf is
    java_options = "-XX:TieredStopAtLevel=1"
    if description.get("kerberos"):
        java_options += f" -Djava.security.krb5.conf={description['kerberos']['krb5_conf']}"
    for role in ("spark.yarn.appMasterEnv", "spark.executorEnv"):
        settings[f"{role}.SPARK_LOCAL_IP"] = "127.0.0.1"
        settings[f"{role}.JAVA_TOOL_OPTIONS"] = java_options
    if env_mode:
        started = time.monotonic()
        env = packed_env(env_mode)
        env_path = f"{ENVS_DIR}/{env.name}"
        upload(description, env, env_path)
        timings["packed_env_s"] = round(time.monotonic() - started, 1)
        settings.update(
            {
                "spark.yarn.dist.archives": f"{description['fs_default']}{env_path}#environment",
                "spark.pyspark.python": ENV_PYTHON,
                "spark.yarn.appMasterEnv.PYSPARK_PYTHON": ENV_PYTHON,
                "spark.executorEnv.PYSPARK_PYTHON": ENV_PYTHON,
            }
        )
    started = time.monotonic()
    history = start_history_server(conf_dir, description)
    timings["history_server_s"] = round(time.monotonic() - started, 1)
    settings.update(
        {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": f"{description['fs_default']}{HISTORY_DIR}",
            "spark.yarn.historyServer.address": history,
        }
    )
    lines = [f"# Spark on the Hadoop lab's YARN (pyspark {pyspark.__version__}); SPARK_CONF_DIR={conf_dir}"]
    lines += [f"{key} {value}" for key, value in settings.items()]
    (conf_dir / SPARK_DEFAULTS).write_text("\n".join(lines) + "\n")
    return {"settings": settings, "timings": timings}
