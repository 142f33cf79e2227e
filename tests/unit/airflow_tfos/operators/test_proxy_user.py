"""``proxy_user`` on the application operators: refused with Spark's own keytab login when the DAG is parsed, and
refused before anything is submitted when the ``webhdfs`` connection would not read the run directory as the proxied
user (run directories are 0700)."""

from __future__ import annotations

import json

import pytest

from airflow_tfos.hooks.errors import TFoSSubmitError
from airflow_tfos.operators import TFoSTrainOperator
from airflow_tfos.operators.application import check_proxy_user


def train(**kwargs) -> TFoSTrainOperator:
    return TFoSTrainOperator(task_id="train", train_fn="pkg.mod:train", num_workers=2, **kwargs)


@pytest.mark.parametrize("key", ["spark.kerberos.keytab", "spark.kerberos.principal", "spark.yarn.keytab"])
def test_proxy_user_with_spark_s_own_keytab_login_is_refused_when_the_dag_is_parsed(key):
    with pytest.raises(ValueError, match=rf"proxy_user='alice' together with conf {key}: Spark refuses --proxy-user"):
        train(proxy_user="alice", conf={key: "x"})
    assert train(proxy_user="alice", conf={"spark.yarn.queue": "etl"}).proxy_user == "alice"
    assert "proxy_user" in TFoSTrainOperator.template_fields


def _webhdfs(monkeypatch, **extra) -> None:
    conn = {"conn_type": "webhdfs", "host": "nn", "port": 9870, "extra": {"auth": "kerberos", **extra}}
    monkeypatch.setenv("AIRFLOW_CONN_WEBHDFS_TEAM", json.dumps(conn))


def test_a_webhdfs_connection_that_reads_as_someone_else_is_refused_naming_it(monkeypatch):
    _webhdfs(monkeypatch)
    with pytest.raises(TFoSSubmitError) as refused:
        check_proxy_user("alice", "hdfs:///runs/d/t/1", "webhdfs_team")
    assert str(refused.value).startswith("proxy_user 'alice', but connection 'webhdfs_team' reads HDFS as 'its own")
    assert "set the connection's extra doas to 'alice'" in str(refused.value)
    _webhdfs(monkeypatch, doas="bob")
    with pytest.raises(TFoSSubmitError, match="reads HDFS as 'bob'"):
        check_proxy_user("alice", "hdfs:///runs/d/t/1", "webhdfs_team")


def test_a_webhdfs_connection_of_the_proxied_user_passes(monkeypatch):
    _webhdfs(monkeypatch, doas="alice")
    check_proxy_user("alice", "hdfs:///runs/d/t/1", "webhdfs_team")
    _webhdfs(monkeypatch, proxy_user="alice")  # WebHDFSHook's name: Airflow masks its value in logs
    check_proxy_user("alice", "hdfs:///runs/d/t/1", "webhdfs_team")
    check_proxy_user("alice", "/local/runs/d/t/1", "webhdfs_team")  # a local run directory: no HDFS user
    check_proxy_user(None, "hdfs:///runs/d/t/1", "webhdfs_team")
