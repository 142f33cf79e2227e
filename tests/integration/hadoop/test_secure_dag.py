"""A nightly DAG (``dags/secure_dags.py``) on the secure lab: Hadoop's own NameNode and ResourceManager in secure
mode against the session's MIT KDC, Airflow for real (``airflow dags test`` on SQLite).

Every connection logs in from alice's keytab and nobody runs ``kinit``: spark-submit gets ``--principal`` and
``--keytab`` from the ``spark`` connection (the keytab in base64, as the Spark provider has it), the train task's
trigger and the YARN sensor ask the ResourceManager through SPNEGO, the export sensor and the report read the run
directory on HDFS through SPNEGO. On YARN the driver and the TF nodes have no Kerberos login: they reach WebHDFS
with the HDFS delegation token that spark-submit obtained for the application, which the ResourceManager renews
while the run outlives the token's renew interval (12 s here) and cancels when the application ends.

Nothing secret leaves its place: neither the token nor the keytab's bytes are in the run directory, the report,
the task logs, XCom, the OpenLineage events, the containers' launch scripts or logs, or a command line seen while
the DAG ran; no keytab copy is left on this machine.
"""

from __future__ import annotations

import base64
import getpass
import json
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from airflow_tfos.shared.storage import kerberos
from airflow_tfos.shared.storage.hadoop_tokens import HDFS_TOKEN_KIND, read_token_file
from airflow_tfos.shared.storage.kerberos import KerberosLogin, negotiate_header
from tests.conftest import REPO
from tests.integration.hadoop.airflow_lab import AirflowOnLab, ended_well, tail
from tests.integration.hadoop.conftest import (
    SECURE_PROXY_USER,
    SECURE_SERVICE,
    TOKEN_RENEW_SECS,
    secure_storage,
    set_owner,
    write_parquet,
)
from tests.integration.hadoop.container_watch import ContainerWatch, nodemanager_dirs

pytestmark = [pytest.mark.real_hadoop, pytest.mark.kerberos, pytest.mark.timeout(900)]

DAG_ID, DAY = "tfos_secure_nightly", "2026-11-21"
RUNS, DATA = "/secure-runs", "/secure-data/linear"
CONNECTIONS = ("tfos_secure_spark", "tfos_secure_yarn", "tfos_secure_webhdfs")


class SecureNight:
    """The Airflow home on the secure lab, and the logins the test reads the lab with."""

    def __init__(self, airflow: AirflowOnLab, lab, alice: KerberosLogin, superuser: KerberosLogin) -> None:
        self.airflow, self.lab, self.alice, self.superuser = airflow, lab, alice, superuser

    def rm(self, path: str) -> dict:
        """The ResourceManager's REST API, through SPNEGO as alice."""
        answer = requests.get(
            f"{self.lab.description['rm_web']}{path}",
            headers={"Authorization": negotiate_header("127.0.0.1", self.alice)},
            timeout=30,
        )
        answer.raise_for_status()
        return answer.json()

    def apps(self) -> list[dict]:
        return (self.rm("/ws/v1/cluster/apps").get("apps") or {}).get("app") or []


@pytest.fixture(scope="module")
def secure_night(secure_spark, secure_lab, kdc, tmp_path_factory) -> SecureNight:
    secure = secure_lab.description["kerberos"]
    superuser = KerberosLogin(kdc.principal(SECURE_SERVICE), secure["keytab"])
    alice = KerberosLogin(kdc.principal("alice"), kdc.alice_keytab)
    root = secure_storage(secure_lab, superuser)
    for path in ("/user/alice", RUNS, DATA.rsplit("/", 1)[0]):  # alice's home (Spark's staging), runs, data
        root.makedirs(path)
        set_owner(secure_lab, superuser, path, "alice")
    write_parquet(secure_lab, DATA, storage=secure_storage(secure_lab, alice))
    keytab_b64 = base64.b64encode(Path(kdc.alice_keytab).read_bytes()).decode()
    login = {"auth": "kerberos", "principal": alice.principal, "keytab": kdc.alice_keytab}
    host, port = secure_lab.description["namenode_http"].rsplit(":", 1)
    rm_host, rm_port = secure_lab.description["rm_web"].split("://", 1)[1].rsplit(":", 1)
    connections = {
        "tfos_secure_spark": {
            "conn_type": "spark",
            "host": "yarn",
            "extra": {"deploy-mode": "cluster", "principal": alice.principal, "keytab": keytab_b64},
        },
        "tfos_secure_yarn": {"conn_type": "yarn", "host": rm_host, "port": int(rm_port), "extra": login},
        "tfos_secure_webhdfs": {"conn_type": "webhdfs", "host": host, "port": int(port), "extra": login},
    }
    # proxy_user: the Airflow principal (Hadoop's proxy right on the lab), and mallory (none), each for everything
    for name in (SECURE_PROXY_USER, "mallory"):
        keytab = kdc.keytab(name)
        proxy = {"auth": "kerberos", "principal": kdc.principal(name), "keytab": keytab}
        prefix = "tfos_proxy" if name == SECURE_PROXY_USER else "tfos_mallory"
        connections[f"{prefix}_spark"] = {
            "conn_type": "spark",
            "host": "yarn",
            "extra": {"deploy-mode": "cluster", "principal": proxy["principal"], "keytab": keytab},
        }
        connections[f"{prefix}_yarn"] = {"conn_type": "yarn", "host": rm_host, "port": int(rm_port), "extra": proxy}
        connections[f"{prefix}_webhdfs"] = {
            "conn_type": "webhdfs", "host": host, "port": int(port), "extra": {**proxy, "doas": "alice"},
        }  # fmt: skip
    # broken logins (test_a_wrong_login...): alice's principal with mallory's keytab; alice's without a keytab (and
    # no ticket cache); mallory's own, which may not write the runs' folder
    webhdfs = {"conn_type": "webhdfs", "host": host, "port": int(port)}
    mallory = {"principal": kdc.principal("mallory"), "keytab": kdc.keytab("mallory")}
    connections["tfos_stale_keytab_webhdfs"] = {**webhdfs, "extra": {**login, "keytab": mallory["keytab"]}}
    connections["tfos_no_ticket_webhdfs"] = {**webhdfs, "extra": {"auth": "kerberos", "principal": alice.principal}}
    connections["tfos_no_write_access_webhdfs"] = {**webhdfs, "extra": {"auth": "kerberos", **mallory}}
    home = tmp_path_factory.mktemp("airflow-secure")
    airflow = AirflowOnLab.start(
        secure_spark,
        secure_lab,
        home,
        REPO / "tests" / "integration" / "hadoop" / "dags",
        AIRFLOW__TFOS__RUN_DIR_BASE=f"hdfs://{RUNS}",
        AIRFLOW__CORE__FERNET_KEY="dGhpcy1pcy1hLXRlc3Qta2V5LW9mLTMyLWJ5dGVzISE=",
        LAB_DATA=f"hdfs://{DATA}",
        LAB_STEP_SECS="0.2",  # 40 steps: the TF nodes write checkpoints past the tokens' renew interval
        # the realm's krb5.conf for spark-submit's JVM (a site's hosts have /etc/krb5.conf)
        SPARK_SUBMIT_OPTS=f"-Djava.security.krb5.conf={secure['krb5_conf']}",
        **{f"AIRFLOW_CONN_{name.upper()}": json.dumps(conn) for name, conn in connections.items()},
    )
    return SecureNight(airflow, secure_lab, alice, superuser)


def _token_refused(night: SecureNight, token: str) -> str | None:
    """What the NameNode answers a LISTSTATUS with ``token`` (None: it served it)."""
    storage = secure_storage(night.lab, None)
    kerberos.use_delegation_token(token)
    try:
        storage.listdir(RUNS)
        return None
    except Exception as exc:  # the NameNode's refusal, as the project words it
        return str(exc)
    finally:
        kerberos.use_delegation_token(None)


def test_a_nightly_dag_trains_on_secure_yarn_and_hdfs_with_keytab_logins_and_leaves_no_secret(secure_night, kdc):
    night, lab = secure_night, secure_night.lab
    known = {a["id"] for a in night.apps()}
    started = time.monotonic()
    with ContainerWatch(nodemanager_dirs(lab.conf_dir, "local")) as watch:
        done = night.airflow.airflow("dags", "test", DAG_ID, DAY, timeout=600)
    lab.timings["secure_dag_s"] = round(time.monotonic() - started, 1)
    output = done.stdout + done.stderr
    assert ended_well(done), tail(done)

    # one application, alice's (the keytab's principal, as auth_to_local maps it), which succeeded
    (app,) = [a for a in night.apps() if a["id"] not in known]
    assert (app["user"], app["state"], app["finalStatus"]) == ("alice", "FINISHED", "SUCCEEDED"), app["diagnostics"]
    # the train task deferred: its trigger, then the YARN sensor asked the RM through SPNEGO
    assert "Pausing task as DEFERRED" in output
    # (the ticket cache of the Airflow commands' environment stayed empty: every login came from a keytab)
    assert not Path(night.airflow.env["KRB5CCNAME"].removeprefix("FILE:")).exists()
    assert any("--principal" in c and alice_in(c) for c in watch.cmdlines.values() if "SparkSubmit" in c)

    # the driver's HDFS delegation token (in its container's token file: the application master's, container 1):
    # spark-submit's, owned by alice, renewed by the ResourceManager
    am = re.compile(r"container_[\d_]+_000001/")
    token_files = {p: d for p, d in watch.named("container_tokens").items() if am.search(p)}
    tokens = {
        t.url_string(): t for data in token_files.values() for t in read_token_file(data) if t.kind == HDFS_TOKEN_KIND
    }
    assert len(tokens) == 1, [repr(t) for t in tokens.values()]
    ((token, hdfs_token),) = tokens.items()
    fields = hdfs_token.fields()
    # its renewer: the ResourceManager's principal as auth_to_local maps it (the lab's daemons run as this user)
    assert (fields["owner"], fields["renewer"]) == (night.alice.principal, getpass.getuser()), fields

    # the driver used it (its log in the NodeManager's log directory says so); the TF nodes wrote the checkpoints
    # with it past its renew interval: renewed meanwhile (the ResourceManager's), else refused at issue + 12 s
    logs = {str(p): p.read_text(errors="replace") for d in nodemanager_dirs(lab.conf_dir, "log") for p in d.rglob("*")
            if p.is_file() and app["id"] in str(p)}  # fmt: skip
    used = (
        f"HDFS delegation token from YARN (owner {night.alice.principal}, renewer {fields['renewer']}, sequence "
        f"number {fields['sequence']})"
    )
    assert any(used in text for text in logs.values()), sorted(logs)
    run_dir = _xcom(night, "train", "return_value")["run_dir"]
    run_path = run_dir.split("hdfs://", 1)[1]
    found = {e["path"]: e for e in lab.inspect(run_path)[run_path]}
    assert f"{run_path}/export/_SUCCESS" in found and f"{run_path}/report/report.html" in found, sorted(found)
    checkpoints = [e for p, e in found.items() if "/checkpoints/" in p and p.endswith(".index")]
    last_write_ms = max(e["modificationTime"] for e in checkpoints)
    assert last_write_ms - fields["issue_ms"] > TOKEN_RENEW_SECS * 1000, (last_write_ms, fields)
    assert (found[run_path]["owner"], found[run_path]["permission"]) == ("alice", "700")

    # the report tab reads the run directory on secure HDFS with the webhdfs connection's keytab
    page = _report_page(night, run_dir)
    assert page.startswith(b"<!DOCTYPE html") or b"<html" in page[:200], page[:200]

    # no secret left its place
    keytab = Path(kdc.alice_keytab).read_bytes()
    secrets = {"token": token.encode(), "token password": hdfs_token.password, "keytab": keytab,
               "keytab base64": base64.b64encode(keytab)}  # fmt: skip
    home = Path(night.airflow.env["AIRFLOW_HOME"])
    texts: dict[str, bytes] = {"dags test output": output.encode()}
    texts.update({p: d for p, d in watch.files.items() if Path(p).name != "container_tokens" and ".tokens" not in p})
    texts.update({f"log {p}": t.encode() for p, t in logs.items()})
    texts.update({f"cmdline of {pid}": c.encode() for pid, c in watch.cmdlines.items()})
    texts.update({str(p): p.read_bytes() for p in home.rglob("*") if p.is_file()})  # task logs, XCom, lineage
    storage = secure_storage(lab, night.alice)
    texts.update({p: storage.read_bytes(p) for p in found if found[p]["type"] == "FILE"})  # run dir, report
    launch_scripts = [p for p in texts if p.endswith("launch_container.sh")]
    assert launch_scripts, sorted(watch.files)  # the watch saw the containers' launch scripts
    assert any(p.endswith("status.json") for p in texts) and any(p.endswith("lineage.jsonl") for p in texts)
    leaks = [f"{what} in {name}" for name, data in texts.items() for what, secret in secrets.items() if secret in data]
    assert leaks == []
    # spark-submit's copy of the keytab (private, for the submit only) is gone; none in the machine's temp folder
    local = Path(night.airflow.env["AIRFLOW_TFOS_LOCAL_DIR"])
    assert [p for p in local.rglob("*") if p.suffix in (".keytab", ".properties")] == []
    assert not list(Path("/tmp").glob(f"airflow_keytab-{night.alice.principal}"))

    # the ResourceManager cancelled the token once the application ended (and its logs were kept: 20 s on the
    # lab): the NameNode no longer knows it (an expired one it would still know, and say so)
    deadline, refusal = time.monotonic() + 90, None
    while refusal is None and time.monotonic() < deadline:
        refusal = _token_refused(night, token)
        time.sleep(1)
    assert refusal is not None and "can't be found in cache" in refusal, refusal
    lab.timings["token_gone_after_app_end_s"] = round(time.time() - app["finishedTime"] / 1000, 1)


def alice_in(cmdline: str) -> bool:
    return bool(re.search(r"--principal\s+alice@", cmdline))


def _xcom(night: SecureNight, task_id: str, key: str):
    database = night.airflow.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
    with sqlite3.connect(database) as db:
        (value,) = db.execute(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = ?", (DAG_ID, task_id, key)
        ).fetchone()
    return json.loads(value)


def _report_page(night: SecureNight, run_dir: str) -> bytes:
    """The report page as the api-server reads it: the train task's report token (from its XCom), then the
    page through the token's webhdfs connection (the authorization by Dag is tested elsewhere: allowed here)."""
    code = (
        "import sys\n"
        "from airflow_tfos.plugins import reports\n"
        "reports.may_read_dag = lambda user, dag_id: True\n"
        "(token,) = [t for task, _, t in reports.task_report_tokens(sys.argv[1], sys.argv[2]) if task == 'train']\n"
        "data, _ = reports.read_report_file(token, 'report.html')\n"
        "sys.stdout.buffer.write(data)\n"
    )
    database = night.airflow.env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///")
    with sqlite3.connect(database) as db:
        (run_id,) = db.execute("SELECT run_id FROM dag_run WHERE dag_id = ?", (DAG_ID,)).fetchone()
    done = subprocess.run(
        [sys.executable, "-c", code, DAG_ID, run_id],
        env=night.airflow.env,
        cwd=REPO,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_proxy_user_runs_the_training_as_the_team_user_and_a_principal_without_the_right_is_refused_by_hadoop(
    secure_night,
):
    night, lab = secure_night, secure_night.lab
    known = {a["id"] for a in night.apps()}
    done = night.airflow.airflow("tasks", "test", "tfos_secure_proxy", "train", DAY, timeout=600)
    assert ended_well(done), tail(done)
    # airflow's principal, logged in from its keytab into a private ticket cache, impersonated alice: spark-submit
    # had --proxy-user (the DAG's templated param) and neither --principal nor --keytab
    (submit,) = [line for line in done.stdout.splitlines() if "Spark-Submit cmd:" in line]
    assert "--proxy-user alice" in submit and "--principal" not in submit and "--keytab" not in submit, submit
    (app,) = [a for a in night.apps() if a["id"] not in known]
    assert (app["user"], app["finalStatus"]) == ("alice", "SUCCEEDED"), app["diagnostics"]
    run_path = f"{RUNS}/tfos_secure_proxy/train/20261121T000000.000000"
    found = lab.inspect(run_path)[run_path]
    assert found and {e["owner"] for e in found} == {"alice"}, {e["path"]: e["owner"] for e in found}
    paths = [e["path"] for e in found]
    assert any("/checkpoints/" in p for p in paths) and any(p.endswith("/export/_SUCCESS") for p in paths), paths

    # mallory has no proxy right: Hadoop refuses the impersonation, and its words start the task's error
    before = {a["id"] for a in night.apps()}
    refused = night.airflow.airflow("tasks", "test", "tfos_secure_proxy_refused", "train", DAY, timeout=300)
    assert not ended_well(refused)
    errors = [line for line in refused.stdout.splitlines() if re.match(r"^[\w.]+(Error|Exception): ", line)]
    assert errors, tail(refused)
    cause = errors[-1].split(": ", 1)[1]
    assert cause.startswith("User: mallory is not allowed to impersonate alice"), cause
    assert {a["id"] for a in night.apps()} == before  # nothing was submitted


def _task_errors(output: str) -> dict[str, str]:
    """The last error line of each task of an ``airflow dags test`` output (its part after the exception's name)."""
    errors, task = {}, None
    for line in output.splitlines():
        started = re.search(r"\[DAG TEST\] running task <TaskInstance: [\w.]+?\.(\w+) ", line)
        if started:
            task = started.group(1)
        elif task and re.match(r"^[\w.]+(Error|Exception): ", line):
            errors[task] = line.split(": ", 1)[1]
    return errors


def test_a_wrong_login_fails_the_task_with_its_cause_first_naming_the_principal_and_the_keytab(secure_night, kdc):
    night = secure_night
    before = {a["id"] for a in night.apps()}
    done = night.airflow.airflow("dags", "test", "tfos_secure_failures", DAY, timeout=300)
    errors = _task_errors(done.stdout + done.stderr)
    assert set(errors) == {"stale_keytab", "no_ticket", "no_write_access"}, tail(done)
    alice, keytab = kdc.principal("alice"), kdc.keytab("mallory")
    assert errors["stale_keytab"].startswith(f"the keytab does not hold the current key of {alice} (keytab {keytab})")
    assert errors["no_ticket"].startswith(f"no Kerberos ticket for {alice} (ticket cache FILE:"), errors["no_ticket"]
    assert f"run kinit {alice}, or give a principal and keytab" in errors["no_ticket"]
    # the NameNode maps mallory to a user who may not write there: its own words first
    assert errors["no_write_access"].startswith("Permission denied: user=mallory, access=WRITE"), errors
    assert {a["id"] for a in night.apps()} == before  # nothing was submitted


def test_a_token_cancelled_while_the_run_trains_fails_the_task_with_the_token_s_refusal_not_a_hang(secure_night):
    night, lab = secure_night, secure_night.lab
    am = re.compile(r"container_[\d_]+_000001/")
    run_path = f"{RUNS}/tfos_secure_token_cancelled/train/20261121T000000.000000"
    with ContainerWatch(nodemanager_dirs(lab.conf_dir, "local")) as watch:
        task = subprocess.Popen(
            [sys.executable, "-m", "airflow", "tasks", "test", "tfos_secure_token_cancelled", "train", DAY],
            env=night.airflow.env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        try:
            # once the TF nodes published a first checkpoint, the ResourceManager's user (the token's renewer: here
            # HDFS's superuser) cancels the driver's token, as an administrator would
            deadline, token, admin = time.monotonic() + 300, None, secure_storage(lab, night.superuser)
            while time.monotonic() < deadline and task.poll() is None:
                files = {p: d for p, d in watch.named("container_tokens").items() if am.search(p)}
                found = [t for d in files.values() for t in read_token_file(d) if t.kind == HDFS_TOKEN_KIND]
                folder = f"{run_path}/checkpoints"
                listed = admin.listdir(folder) if found and admin.exists(folder) else []
                if "manifest.json" in listed:  # a checkpoint published: the next try would resume from it
                    token = found[0]
                    break
                time.sleep(1)
            assert token is not None, "the run wrote no checkpoint in 300 s"
            cancelled_at = time.monotonic()
            admin.cancel_delegation_token(token.url_string())
            output, _ = task.communicate(timeout=300)
        finally:
            if task.poll() is None:
                task.kill()
    failed_after = time.monotonic() - cancelled_at
    # the driver could not record its error (its token is the one refused): its exit status says what happened
    errors = [line for line in output.splitlines() if re.match(r"^[\w.]+(Error|Exception): ", line)]
    assert errors, output[-6000:]
    cause = errors[-1].split(": ", 1)[1]
    assert cause.startswith("the run directory's HDFS refused the delegation token of application "), cause
    assert "exited with status 3" in cause and "resumes from checkpoint step" in cause, cause
    assert failed_after < 240  # the task ended on its own, not by the test's timeout
    lab.timings["token_cancelled_task_failed_after_s"] = round(failed_after, 1)
