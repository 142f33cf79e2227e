"""The demo: the nightly retraining DAG, run by Airflow for two consecutive days, on this machine.

Run by ``make demo``. Everything lives under ``.demo/`` in the repository (or ``$AIRFLOW_TFOS_DEMO_DIR``):
Airflow's home (SQLite), the day's data, the run directories (checkpoints, exports, training reports),
the model registry and the predictions. Spark runs as ``local-cluster[2,1,1024]``: a master, two
workers and two executor JVMs on this machine, each executor hosting one TF node (chief and worker)
in one barrier stage.

    python scripts/demo.py                 # run the two days (again: days whose Airflow run succeeded are skipped)
    python scripts/demo.py --days 3        # three days
    python scripts/demo.py --ui            # the Airflow UI on the demo's runs, at http://127.0.0.1:8080
    python scripts/demo.py --yarn          # the same nights on Hadoop's own YARN and HDFS (the Hadoop lab)

With ``--yarn`` the demo starts the Hadoop lab (``scripts/hadoop.py``: a NameNode, 2 DataNodes, a
ResourceManager and 2 NodeManagers in one JVM, built with Maven on first use) in ``.demo/yarn/hadoop-lab``,
runs the nights with Spark on its YARN (cluster mode, the containers' Python a packed environment) and every
file on its HDFS, prints the YARN application ids and the ``hdfs://`` paths, and stops the lab. Each such demo
starts from an empty lab and Airflow database.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import subprocess
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Where the demo keeps everything (``AIRFLOW_TFOS_DEMO_DIR`` moves it, e.g. for tests).
DEMO = Path(os.environ.get("AIRFLOW_TFOS_DEMO_DIR") or REPO / ".demo").resolve()
DAG_ID = "tfos_nightly_digits"
FIRST_DAY = date(2026, 11, 20)
UI_PORT = 8080


#: Where a demo on the Hadoop lab keeps its Airflow home and the lab; data, runs and models go to the lab's HDFS.
YARN_DEMO = DEMO / "yarn"
HDFS_BASE, HDFS_RUNS = "hdfs:///tfos-example", "hdfs:///tfos-runs"


def demo_env() -> dict[str, str]:
    """The environment of every Airflow command of the demo."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "AIRFLOW_HOME": str(DEMO / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "example_dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DEFAULT_TIMEZONE": "utc",  # each day's run is at its UTC midnight
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{DEMO / 'airflow' / 'airflow.db'}",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__TFOS__RUN_DIR_BASE": str(DEMO / "runs"),
        "AIRFLOW_CONN_TFOS_SPARK": json.dumps({"conn_type": "spark", "host": "local-cluster[2,1,1024]"}),
        "AIRFLOW_TFOS_LOCAL_DIR": str(DEMO / "spark-apps"),
        "TFOS_EXAMPLE_BASE": str(DEMO),
        "PATH": os.pathsep.join([venv_bin, os.environ.get("PATH", "")]),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


def yarn_env(lab: dict) -> dict[str, str]:
    """The demo's environment on the Hadoop lab: what a cluster gives (``HADOOP_CONF_DIR``, ``SPARK_CONF_DIR``)
    and a ``spark`` connection to YARN; no ``yarn`` or ``webhdfs`` connection."""
    conf_dir = lab["conf_dir"]
    spark = {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}
    env = {k: v for k, v in demo_env().items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update(
        {
            "AIRFLOW_HOME": str(YARN_DEMO / "airflow"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{YARN_DEMO / 'airflow' / 'airflow.db'}",
            "AIRFLOW__TFOS__RUN_DIR_BASE": HDFS_RUNS,
            "AIRFLOW_CONN_TFOS_SPARK": json.dumps(spark),
            "AIRFLOW_TFOS_LOCAL_DIR": str(YARN_DEMO / "spark-apps"),
            "TFOS_EXAMPLE_BASE": HDFS_BASE,
            "HADOOP_CONF_DIR": conf_dir,
            "SPARK_CONF_DIR": conf_dir,
        }
    )
    return env


def airflow(env: dict[str, str], *args: str, log: Path | None = None, timeout: float = 900) -> int:
    """Run an Airflow command; its output goes to ``log`` (or the terminal)."""
    command = [sys.executable, "-m", "airflow", *args]
    if log is None:
        return subprocess.run(command, env=env, cwd=REPO, timeout=timeout).returncode
    with open(log, "w") as out:
        return subprocess.run(
            command, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
        ).returncode


def day_summary(day: date, base: str = str(DEMO), runs: str = str(DEMO / "runs")) -> dict:
    """What the run of ``day`` produced, read from its run directory and the model registry (under ``base`` and
    ``runs``: folders, or ``hdfs://`` URIs)."""
    from airflow_tfos.hooks.run_dir import default_run_dir
    from airflow_tfos.shared.registry import ModelRegistry
    from airflow_tfos.shared.rundir import RunDir
    from airflow_tfos.shared.storage import join, storage_for

    key = f"{day:%Y%m%d}T000000"  # the registry version: {{ ts_nodash }} of the day's run
    logical_date = datetime(day.year, day.month, day.day, tzinfo=UTC)
    run_dir = default_run_dir(runs, DAG_ID, "train", logical_date, key)
    export = RunDir(run_dir).export_success() or {}
    registry = ModelRegistry(join(base, "models", "digits"))
    decisions = [d for d in registry.decisions() if d["version"] == key]
    predictions = join(base, "predictions", DAG_ID, day.isoformat())
    return {
        "day": day.isoformat(),
        "run_dir": run_dir,
        "metrics": export.get("metrics") or {},
        "step": export.get("step"),
        "decision": decisions[-1] if decisions else None,
        "report": join(run_dir, "report", "report.html"),
        "predictions": predictions if storage_for(predictions).exists(join(predictions, "_SUCCESS")) else None,
        "in_service": (registry.current() or {}).get("version"),
    }


def print_summary(days: list[date], seconds: float, lab: dict | None = None) -> None:
    from airflow_tfos.shared.registry import ModelRegistry
    from airflow_tfos.shared.storage import join

    base, runs = (HDFS_BASE, HDFS_RUNS) if lab else (str(DEMO), str(DEMO / "runs"))
    where = "on YARN (the Hadoop lab)" if lab else "on a local Spark cluster"
    print("\n" + "=" * 78)
    print(f"Nightly retraining, {len(days)} days, {where}, in {seconds / 60:.1f} min")
    for day in days:
        s = day_summary(day, base, runs)
        m, d = s["metrics"], s["decision"] or {}
        baseline = m.get("baseline_test_accuracy")
        start = "warm start from the model in service" if m.get("warm_start") else "from scratch"
        print(f"\n{s['day']}: trained {start}, {s['step']} steps")
        rows = [("test accuracy", f"{m.get('test_accuracy', float('nan')):.4f}")]
        if baseline is not None:
            rows.append(("model in service, same data", f"{baseline:.4f}"))
        rows += [
            ("published", f"{'yes' if d.get('published') else 'no'} ({d.get('reason', 'not judged')})"),
            ("training report", s["report"]),
            ("predictions", s["predictions"] or "none"),
        ]
        if lab:
            rows += [(f"YARN {name}", app) for name, app in lab["apps"].get(s["day"], [])]
        for label, value in rows:
            print(f"  {label:<29}{value}")
    current = ModelRegistry(join(base, "models", "digits")).current() or {}
    print(f"\nModel in service: version {current.get('version')} at {current.get('model_path')}")
    if lab:
        print(f"Everything is on the lab's HDFS ({lab['fs_default']}) under {HDFS_BASE} and {HDFS_RUNS};")
        print(f"the lab stops now; Airflow's home and the logs stay in {YARN_DEMO} (HDFS goes with the lab)")
    else:
        print(f"Everything is under {DEMO}")
        print("To open the Airflow UI on these runs: make demo-ui, then http://127.0.0.1:8080 (no login)")
    print("=" * 78)


def finished_days(env: dict[str, str]) -> set[date]:
    """The days whose run of the DAG (at the day's UTC midnight, as the demo runs them) succeeded, as Airflow
    records them; none before the DAG's first run."""
    env = {k: v for k, v in env.items() if k != "FORCE_COLOR"}  # the JSON as plain text
    done = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "list-runs", DAG_ID, "--state", "success", "-o", "json"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:  # the DAG is not in the database yet: no day has run
        return set()
    for line in done.stdout.splitlines():  # Airflow may print log lines before the JSON
        try:
            runs = json.loads(line)
        except ValueError:
            continue
        if isinstance(runs, list):
            moments = [datetime.fromisoformat(r["logical_date"]).astimezone(UTC) for r in runs if r.get("logical_date")]
            return {m.date() for m in moments if m == datetime(m.year, m.month, m.day, tzinfo=UTC)}
    return set()


def run_days(count: int, lab: dict | None = None) -> int:
    env = yarn_env(lab) if lab else demo_env()
    home = Path(env["AIRFLOW_HOME"])
    logs = home.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"Setting up Airflow (SQLite) in {home} ...", flush=True)
    if airflow(env, "db", "migrate", log=logs / "db-migrate.log", timeout=300) != 0:
        print(f"airflow db migrate failed: see {logs / 'db-migrate.log'}", file=sys.stderr)
        return 1
    days = [FIRST_DAY + timedelta(days=i) for i in range(count)]
    done = finished_days(env)
    for day in days:
        if day in done and not lab:
            print(f"\n{DAG_ID} for {day}: done already (its Airflow run succeeded), nothing submitted", flush=True)
            continue
        log = logs / f"{DAG_ID}-{day}.log"
        print(f"\nRunning {DAG_ID} for {day} (prepare, train on 2 TF workers, evaluate, publish, score) ...")
        print(f"  full log: {log}", flush=True)
        t0 = time.monotonic()
        code = airflow(env, "dags", "test", DAG_ID, day.isoformat(), log=log)
        text = log.read_text(errors="replace")
        if code != 0 or "state=failed" in text or "DagRunState.FAILED" in text:
            print(text[-4000:], file=sys.stderr)
            print(f"\nThe run for {day} failed: see {log}", file=sys.stderr)
            return 1
        s = day_summary(day, *((HDFS_BASE, HDFS_RUNS) if lab else ()))
        print(f"  done in {time.monotonic() - t0:.0f} s: test accuracy {s['metrics'].get('test_accuracy', 0):.4f}")
        if lab:
            lab["apps"][day.isoformat()] = yarn_apps(lab, day)
    print_summary(days, time.monotonic() - started, lab)
    return 0


def yarn_apps(lab: dict, day: date) -> list[tuple[str, str]]:
    """The day's YARN applications, as the ResourceManager lists them: (what, "id STATE/FINAL")."""
    import urllib.request

    with urllib.request.urlopen(f"{lab['rm_web']}/ws/v1/cluster/apps", timeout=10) as response:
        apps = (json.load(response).get("apps") or {}).get("app") or []
    stamp, found = f"{day:%Y%m%d}T", []
    for app in sorted(apps, key=lambda a: a["id"]):
        name = app["name"]
        if day.isoformat() in name:
            what = "prepare_data"
        elif stamp in name and name.startswith("tfos "):
            what = name.split()[1].split(".", 1)[-1]
        else:
            continue
        found.append((what, f"{app['id']} {app['state']}/{app['finalStatus']}"))
    return found


def run_on_yarn(count: int) -> int:
    """The nights on the Hadoop lab: up (and Spark set up on it), the nights, down, whatever happens."""
    import shutil

    spec = importlib.util.spec_from_file_location("hadoop_lab_script", REPO / "scripts" / "hadoop.py")
    hadoop = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hadoop)
    if YARN_DEMO.exists():
        shutil.rmtree(YARN_DEMO / "airflow", ignore_errors=True)  # the lab starts empty: so does Airflow
    conf_dir = YARN_DEMO / "hadoop-lab"
    conf_dir.mkdir(parents=True, exist_ok=True)
    print(f"Starting the Hadoop lab in {conf_dir} (HDFS and YARN; the first time Maven fetches Hadoop) ...", flush=True)
    try:
        described = hadoop.up(conf_dir, datanodes=2, nodemanagers=2, vcores=4, heap="1g", timeout=300)
        print(f"  up in {described['up_seconds']:.0f} s; ResourceManager {described['rm_web']}", flush=True)
        hadoop.spark_setup(conf_dir, env_mode="link")
        lab = {**described, "conf_dir": str(conf_dir.resolve()), "apps": {}}
        from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV, WebHDFSConfig

        # this process reads the runs back over WebHDFS, as the Airflow side does from HADOOP_CONF_DIR
        os.environ[WEBHDFS_ENV] = WebHDFSConfig(namenodes=(f"http://{described['namenode_http']}",)).to_json()
        logging.getLogger("hdfs").setLevel(logging.WARNING)  # not a line per file read into the summary
        return run_days(count, lab)
    except hadoop.LabError as error:
        print(f"the Hadoop lab: {error}", file=sys.stderr)
        return 1
    finally:
        hadoop.down(conf_dir)


def serve_ui() -> int:
    env = demo_env()
    if not (DEMO / "airflow" / "airflow.db").exists():
        print("Run the demo first (make demo): there are no runs to look at.", file=sys.stderr)
        return 1
    print(f"The Airflow UI on the demo's runs: http://127.0.0.1:{UI_PORT}/dags/{DAG_ID} (Ctrl-C to stop)")
    return airflow(env, "api-server", "--host", "127.0.0.1", "--port", str(UI_PORT), timeout=10**9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=2, help="how many consecutive days to run (default 2)")
    parser.add_argument("--ui", action="store_true", help="serve the Airflow UI on the demo's runs instead")
    parser.add_argument("--yarn", action="store_true", help="run the nights on Hadoop's own YARN and HDFS (the lab)")
    options = parser.parse_args(argv)
    if options.days < 1:
        parser.error("--days must be at least 1")
    if options.ui:
        return serve_ui()
    return run_on_yarn(options.days) if options.yarn else run_days(options.days)


if __name__ == "__main__":
    sys.exit(main())
