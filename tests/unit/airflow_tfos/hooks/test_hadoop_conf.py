"""Hadoop's configuration files (HADOOP_CONF_DIR, YARN_CONF_DIR) as the YARN and WebHDFS settings, their precedence
under connections and AIRFLOW_TFOS_WEBHDFS, and the connection tests, against the emulators (no Spark)."""

from __future__ import annotations

import getpass
import json
from pathlib import Path

import pytest

from airflow_tfos.hooks.errors import HadoopConfError
from airflow_tfos.hooks.hadoop_conf import HadoopConf, read_site_file
from airflow_tfos.hooks.webhdfs_connection import WebHDFSAccessHook, webhdfs_config_from_connection
from airflow_tfos.hooks.yarn import YarnHook
from airflow_tfos.shared.errors import WebHDFSConfigError
from airflow_tfos.shared.storage.webhdfs_config import WEBHDFS_ENV, WebHDFSConfig
from airflow_tfos.testing.tls import self_signed
from airflow_tfos.testing.webhdfs import WebHDFSEmulator
from airflow_tfos.testing.yarn import ResourceManagerEmulator
from tests.support.hadoop_site import ha_cluster_conf, write_site


@pytest.fixture(autouse=True)
def _no_outside_settings(monkeypatch):
    for name in ("HADOOP_CONF_DIR", "YARN_CONF_DIR", WEBHDFS_ENV, "HADOOP_USER_NAME"):
        monkeypatch.delenv(name, raising=False)


def use_conf_dir(monkeypatch, folder: Path) -> None:
    monkeypatch.setenv("HADOOP_CONF_DIR", str(folder))


# --- reading the files ----------------------------------------------------------------------------------


def test_ha_nameservice_and_resourcemanagers_as_a_cluster_ships_them(tmp_path):
    folder = ha_cluster_conf(
        tmp_path,
        nameservice="prod",
        namenodes=["nn-a.example:9870", "nn-b.example:9870"],
        rms=["rm-a:8088", "rm-b:8088"],
    )
    conf = HadoopConf.load(folder)
    config = conf.webhdfs_config(user="etl")
    assert config.namenodes == ("http://nn-a.example:9870", "http://nn-b.example:9870")
    assert (config.nameservice, config.auth, config.user) == ("prod", "simple", "etl")
    assert conf.rm_addresses() == ("http://rm-a:8088", "http://rm-b:8088")


def test_https_policies_pick_the_https_addresses(tmp_path):
    folder = ha_cluster_conf(
        tmp_path, nameservice="ns", namenodes=["nn1:9871", "nn2:9871"], rms=["rm1:8090"], https=True
    )
    conf = HadoopConf.load(folder)
    assert conf.webhdfs_config().namenodes == ("https://nn1:9871", "https://nn2:9871")
    assert conf.rm_addresses() == ("https://rm1:8090",)


def test_without_ha_the_defaults_follow_fs_default_fs_and_the_rm_hostname(tmp_path):
    write_site(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://nn.example:8020"})
    write_site(tmp_path, "hdfs-site.xml", {"dfs.namenode.http-address": "0.0.0.0:50070"})
    write_site(tmp_path, "yarn-site.xml", {"yarn.resourcemanager.hostname": "rm.example"})
    conf = HadoopConf.load(tmp_path)
    config = conf.webhdfs_config()
    assert config.namenodes == ("http://nn.example:50070",)  # the bind-all host is the one of fs.defaultFS
    assert config.nameservice is None
    assert conf.rm_addresses() == ("http://rm.example:8088",)
    write_site(tmp_path, "hdfs-site.xml", {"dfs.http.policy": "HTTPS_ONLY"})
    assert HadoopConf.load(tmp_path).webhdfs_config().namenodes == ("https://nn.example:9871",)


def test_variables_final_properties_and_yarn_conf_dir(tmp_path, monkeypatch):
    core = write_site(
        tmp_path / "hadoop",
        "core-site.xml",
        {"cluster.ns": "analytics", "fs.defaultFS": "hdfs://${cluster.ns}", "dfs.nameservices": "base"},
        final=("dfs.nameservices",),
    )
    write_site(
        tmp_path / "hadoop",
        "hdfs-site.xml",
        {
            "dfs.nameservices": "overridden-but-final-wins",
            "nn.host": "${env.NN_HOST}",
            "dfs.ha.namenodes.analytics": "a",
            "dfs.namenode.http-address.analytics.a": "${nn.host}:9870",
        },
    )
    write_site(tmp_path / "yarn", "yarn-site.xml", {"yarn.resourcemanager.webapp.address": "rm-from-yarn-dir:8088"})
    write_site(tmp_path / "hadoop", "yarn-site.xml", {"yarn.resourcemanager.webapp.address": "ignored:8088"})
    monkeypatch.setenv("NN_HOST", "nn-env.example")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path / "hadoop"))
    monkeypatch.setenv("YARN_CONF_DIR", str(tmp_path / "yarn"))
    conf = HadoopConf.from_env()
    assert conf.get("dfs.nameservices") == "base" and conf.source("dfs.nameservices") == str(core)
    assert conf.webhdfs_config().namenodes == ("http://nn-env.example:9870",)
    assert conf.rm_addresses() == ("http://rm-from-yarn-dir:8088",)
    write_site(tmp_path / "x", "core-site.xml", {"user.dir": "/home/${user.name}", "loop": "${loop}"})
    monkeypatch.setenv("HADOOP_USER_NAME", "etl")  # changes the HDFS user, not Java's user.name
    looped = HadoopConf.load(tmp_path / "x")
    assert looped.get("user.dir") == f"/home/{getpass.getuser()}"
    with pytest.raises(HadoopConfError, match=r"core-site.xml: property loop .* refers to itself"):
        looped.get("loop")


def test_a_missing_namenode_address_names_the_file_and_property(tmp_path):
    folder = ha_cluster_conf(tmp_path, nameservice="ns", namenodes=["nn1:9870", "nn2:9870"], rms=["rm1:8088"])
    text = (folder / "hdfs-site.xml").read_text().replace("dfs.namenode.http-address.ns.nn2", "dfs.unrelated")
    (folder / "hdfs-site.xml").write_text(text)
    with pytest.raises(HadoopConfError) as failed:
        HadoopConf.load(folder).webhdfs_config()
    assert str(folder / "hdfs-site.xml") in str(failed.value)
    assert "dfs.namenode.http-address.ns.nn2 is missing" in str(failed.value)


def test_contradictory_properties_name_the_files_and_properties(tmp_path):
    write_site(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://prod"})
    write_site(tmp_path, "hdfs-site.xml", {"dfs.nameservices": "staging"})
    with pytest.raises(HadoopConfError, match=r"core-site.xml: property fs.defaultFS names 'prod'.*dfs.nameservices"):
        HadoopConf.load(tmp_path).webhdfs_config()
    write_site(tmp_path, "hdfs-site.xml", {"dfs.nameservices": "prod"})
    with pytest.raises(HadoopConfError, match=r"property dfs.ha.namenodes.prod is missing"):
        HadoopConf.load(tmp_path).webhdfs_config()
    write_site(tmp_path, "hdfs-site.xml", {"dfs.http.policy": "HTTPS_PLEASE"})
    write_site(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://nn:8020"})
    with pytest.raises(HadoopConfError, match=r"hdfs-site.xml: property dfs.http.policy is 'HTTPS_PLEASE'"):
        HadoopConf.load(tmp_path).webhdfs_config()
    write_site(tmp_path, "yarn-site.xml", {"yarn.resourcemanager.ha.enabled": "true"})
    with pytest.raises(HadoopConfError, match=r"yarn-site.xml: property yarn.resourcemanager.ha.rm-ids is missing"):
        HadoopConf.load(tmp_path).rm_addresses()
    write_site(
        tmp_path,
        "yarn-site.xml",
        {
            "yarn.resourcemanager.ha.enabled": "true",
            "yarn.resourcemanager.ha.rm-ids": "rm1,rm2",
            "yarn.resourcemanager.hostname.rm1": "a",
        },
    )
    with pytest.raises(HadoopConfError, match=r"property yarn.resourcemanager.webapp.address.rm2 is missing"):
        HadoopConf.load(tmp_path).rm_addresses()
    write_site(tmp_path, "core-site.xml", {"hadoop.security.authentication": "ldap", "fs.defaultFS": "hdfs://nn:8020"})
    with pytest.raises(HadoopConfError, match=r"core-site.xml: property hadoop.security.authentication is 'ldap'"):
        HadoopConf.load(tmp_path).auth()
    (tmp_path / "core-site.xml").write_text("<configuration><property><name>x</name>")
    with pytest.raises(HadoopConfError, match=r"core-site.xml is not valid XML"):
        read_site_file(tmp_path / "core-site.xml")


def test_a_local_default_fs_gives_no_hdfs_settings(tmp_path):
    write_site(tmp_path, "core-site.xml", {"fs.defaultFS": "file:///"})
    assert HadoopConf.load(tmp_path).webhdfs_config() is None
    assert HadoopConf.load(tmp_path).rm_addresses() == ()


# --- precedence: connection fields > AIRFLOW_TFOS_WEBHDFS > files ---------------------------------------


def conn(monkeypatch, conn_id: str, conn_type: str, **fields) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": conn_type, **fields}))


def test_webhdfs_settings_precedence(tmp_path, monkeypatch):
    use_conf_dir(monkeypatch, ha_cluster_conf(tmp_path, nameservice="ns", namenodes=["f1:9870", "f2:9870"], rms=[]))
    config = webhdfs_config_from_connection("webhdfs_absent")  # no connection: the files
    assert (config.namenodes, config.nameservice) == (("http://f1:9870", "http://f2:9870"), "ns")
    conn(monkeypatch, "webhdfs_nohost", "webhdfs", login="etl")  # a connection without host: its login, their nodes
    config = webhdfs_config_from_connection("webhdfs_nohost")
    assert (config.namenodes, config.user) == (("http://f1:9870", "http://f2:9870"), "etl")
    monkeypatch.setenv(WEBHDFS_ENV, WebHDFSConfig(namenodes=("http://env:9870",), nameservice="ns").to_json())
    assert webhdfs_config_from_connection("webhdfs_absent").namenodes == ("http://env:9870",)  # the variable wins
    conn(monkeypatch, "webhdfs_full", "webhdfs", host="conn-nn", port=9870)
    assert webhdfs_config_from_connection("webhdfs_full").namenodes == ("http://conn-nn:9870",)  # the connection wins
    monkeypatch.delenv(WEBHDFS_ENV)
    monkeypatch.delenv("HADOOP_CONF_DIR")
    with pytest.raises(WebHDFSConfigError, match=r"no connection 'webhdfs_absent'.*HADOOP_CONF_DIR"):
        webhdfs_config_from_connection("webhdfs_absent")


def test_yarn_settings_precedence(tmp_path, monkeypatch):
    use_conf_dir(
        monkeypatch, ha_cluster_conf(tmp_path, nameservice="ns", namenodes=["f:9870"], rms=["r1:8088", "r2:8088"])
    )
    assert YarnHook("yarn_absent").settings.addresses == ("http://r1:8088", "http://r2:8088")
    conn(monkeypatch, "yarn_login_only", "yarn", login="etl")
    settings = YarnHook("yarn_login_only").settings
    assert (settings.addresses, settings.user) == (("http://r1:8088", "http://r2:8088"), "etl")
    conn(monkeypatch, "yarn_full", "yarn", host="conn-rm:8088")
    assert YarnHook("yarn_full").settings.addresses == ("http://conn-rm:8088",)
    monkeypatch.delenv("HADOOP_CONF_DIR")
    ok, message = YarnHook("yarn_absent").test_connection()
    assert not ok and "connection 'yarn_absent' does not exist" in message and "HADOOP_CONF_DIR" in message


# --- connection tests against the emulators ---------------------------------------------------------------


def test_yarn_connection_test_names_the_active_rm_through_the_files(tmp_path, monkeypatch):
    with ResourceManagerEmulator(ha=True) as rm:
        rm.failover()  # the second RM is active: the test must not just take the first
        use_conf_dir(monkeypatch, ha_cluster_conf(tmp_path, nameservice="ns", namenodes=["f:9870"], rms=rm.addresses))
        ok, message = YarnHook("yarn_absent").test_connection()
        assert ok, message
        assert message.startswith(f"active ResourceManager {rm.url(1)} (cluster {rm.cluster_timestamp}")
        assert f"{rm.url(0)}: standby" in message
        rm.stop_rm(1)  # the active one is down: only a standby answers
        ok, message = YarnHook("yarn_absent").test_connection()
        assert not ok and "standby" in message and "connection refused" in message
        conn(monkeypatch, "yarn_standby", "yarn", host=rm.addresses[0])
        ok, message = YarnHook("yarn_standby").test_connection()
        assert (ok, message) == (False, f"standby only: no active ResourceManager among {rm.url(0)}")


def test_yarn_connection_test_refused_and_401(monkeypatch):
    with ResourceManagerEmulator(anonymous_allowed=False) as rm:
        conn(monkeypatch, "yarn_anon", "yarn", host=rm.addresses[0])
        ok, message = YarnHook("yarn_anon").test_connection()
        assert not ok and f"{rm.url()}: HTTP 401 (authentication refused" in message
        conn(monkeypatch, "yarn_user", "yarn", host=rm.addresses[0], login="etl")
        assert YarnHook("yarn_user").test_connection()[0]
        address = rm.addresses[0]
    ok, message = YarnHook("yarn_user").test_connection()
    assert (ok, message) == (False, f"no ResourceManager answered: http://{address}: connection refused")


def test_webhdfs_connection_test_outcomes(tmp_path, monkeypatch):
    with WebHDFSEmulator(namenodes=2) as hdfs:
        hdfs.fail_over()  # the second namenode is active
        conn(monkeypatch, "webhdfs_both", "webhdfs", host=",".join(u.split("://")[1] for u in hdfs.urls), login="etl")
        ok, message = WebHDFSAccessHook("webhdfs_both").test_connection()
        assert ok, message
        assert message.startswith(f"active namenode {hdfs.urls[1]}: / lists 0 entries as user etl")
        assert f"{hdfs.urls[0]}: standby" in message
        conn(monkeypatch, "webhdfs_standby", "webhdfs", host=hdfs.urls[0].split("://")[1], login="etl")
        ok, message = WebHDFSAccessHook("webhdfs_standby").test_connection()
        assert (ok, message) == (False, f"standby only: no active namenode among {hdfs.urls[0]}")
        hdfs.make_read_only("/", unreadable=True)
        ok, message = WebHDFSAccessHook("webhdfs_both").test_connection()
        assert not ok and "AccessControlException" in message and "etl" in message
        urls = hdfs.urls
    ok, message = WebHDFSAccessHook("webhdfs_both").test_connection()
    assert (ok, message) == (
        False,
        f"no namenode answered: {urls[0]}: connection refused; {urls[1]}: connection refused",
    )
    ok, message = WebHDFSAccessHook("webhdfs_absent").test_connection()
    assert not ok and "no connection 'webhdfs_absent'" in message


def test_connection_tests_name_a_tls_failure(tmp_path, monkeypatch):
    context, bundle = self_signed(tmp_path)
    with ResourceManagerEmulator(ssl_context=context) as rm, WebHDFSEmulator(ssl_context=context) as hdfs:
        conn(monkeypatch, "yarn_tls", "yarn", host=rm.addresses[0], schema="https", login="etl")
        ok, message = YarnHook("yarn_tls").test_connection()
        assert not ok and f"https://{rm.addresses[0]}: TLS error (CERTIFICATE_VERIFY_FAILED" in message, message
        nn = hdfs.url.split("://")[1]
        conn(monkeypatch, "webhdfs_tls", "webhdfs", host=nn, login="etl", extra={"use_ssl": True})
        ok, message = WebHDFSAccessHook("webhdfs_tls").test_connection()
        assert not ok and f"https://{nn}: TLS error (CERTIFICATE_VERIFY_FAILED" in message, message
        # with the certificate as the CA bundle, both answer
        conn(
            monkeypatch, "yarn_ca", "yarn", host=rm.addresses[0], schema="https", login="etl", extra={"verify": bundle}
        )
        ok, message = YarnHook("yarn_ca").test_connection()
        assert ok, message
        conn(monkeypatch, "webhdfs_ca", "webhdfs", host=nn, login="etl", extra={"use_ssl": True, "verify": bundle})
        ok, message = WebHDFSAccessHook("webhdfs_ca").test_connection()
        assert ok, message


def test_triggers_find_the_rms_in_the_files_too(tmp_path, monkeypatch):
    """The async path (triggers) reads the files like the sync one, and follows the standby listed first."""
    import asyncio

    with ResourceManagerEmulator(ha=True) as rm:
        app_id = rm.add_application("train", tags=["tfos-x"])
        rms = [rm.addresses[1], rm.addresses[0]]  # the standby first
        use_conf_dir(monkeypatch, ha_cluster_conf(tmp_path, nameservice="ns", namenodes=["f:9870"], rms=rms))
        state = asyncio.run(YarnHook("yarn_absent").aget_application(app_id))
        assert (state.app_id, state.state) == (app_id, "RUNNING")
        assert [r.rm for r in rm.requests] == [1, 0]  # redirected by the standby to the active RM


def test_a_yarn_submission_from_the_files_alone(tmp_path, monkeypatch):
    """TFoSHook with only a spark connection: the RM from yarn-site.xml, the driver's HDFS settings from
    core-site/hdfs-site.xml (in the private properties file), HADOOP_CONF_DIR handed to spark-submit unchanged."""
    from airflow_tfos.hooks.tfos import TFoSHook
    from tests.support.tfos_hook_fakes import SubmissionBroker, read_records, write_fake_spark_submit

    with ResourceManagerEmulator(ha=True) as rm, SubmissionBroker(rm) as broker:
        conf_dir = ha_cluster_conf(
            tmp_path / "conf", nameservice="prod", namenodes=["nn-a:9870", "nn-b:9870"], rms=rm.addresses[::-1]
        )
        use_conf_dir(monkeypatch, conf_dir)
        conn(monkeypatch, "spark_files", "spark", host="yarn")
        monkeypatch.setenv("FAKE_YARN_BROKER", broker.url)
        monkeypatch.setenv("FAKE_SPARK_SUBMIT_RECORDS", str(tmp_path / "records"))
        fake = write_fake_spark_submit(tmp_path / "bin")
        wrapper = tmp_path / "bin" / "spark-submit-wrapper"  # notes the HADOOP_CONF_DIR spark-submit was given
        wrapper.write_text(f'#!/bin/sh\nprintf %s "$HADOOP_CONF_DIR" > {tmp_path}/conf-dir-seen\nexec {fake} "$@"\n')
        wrapper.chmod(0o755)
        hook = TFoSHook(
            spark_conn_id="spark_files", yarn_conn_id="yarn_absent", spark_binary=str(wrapper),
            tracker_dir=str(tmp_path / "tracker"),
        )  # fmt: skip
        app_id = hook.submit("hdfs://prod/runs/r1", tag="tfos-files", name="from files", num_nodes=2)
        assert rm.application(app_id)["applicationTags"] == "tfos-files"
    assert (tmp_path / "conf-dir-seen").read_text() == str(conf_dir)
    (record,) = read_records(tmp_path / "records")
    lines = dict(line.split("=", 1) for line in record["properties"].splitlines() if line)
    handed = WebHDFSConfig.from_env({WEBHDFS_ENV: lines["spark.yarn.appMasterEnv.AIRFLOW_TFOS_WEBHDFS"]})
    assert handed == HadoopConf.load(conf_dir).webhdfs_config()
    assert (handed.namenodes, handed.nameservice) == (("http://nn-a:9870", "http://nn-b:9870"), "prod")


def test_a_resourcemanager_the_files_name_that_does_not_answer_is_named_with_its_file(tmp_path, monkeypatch):
    from airflow_tfos.hooks.errors import YarnUnavailableError
    from airflow_tfos.testing.ports import free_port

    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    (tmp_path / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.webapp.address</name>"
        f"<value>{address}</value></property></configuration>"
    )
    use_conf_dir(monkeypatch, tmp_path)
    with pytest.raises(YarnUnavailableError) as refused:
        YarnHook(yarn_conn_id="yarn_absent").get_max_allocation()
    message = str(refused.value)
    assert message.startswith(f"no ResourceManager that {tmp_path / 'yarn-site.xml'} ")
    assert f"http://{address}: connection refused" in message


@pytest.mark.parametrize("ha", [False, True])
def test_namenodes_the_files_name_that_do_not_answer_are_named_with_their_file(tmp_path, monkeypatch, ha):
    import time

    from airflow_tfos.hooks.webhdfs_connection import config_without_connection
    from airflow_tfos.shared.errors import WebHDFSUnavailableError
    from airflow_tfos.shared.storage.webhdfs_client import WebHDFSStorage
    from airflow_tfos.testing.ports import free_port

    addresses = [f"127.0.0.1:{free_port()}" for _ in range(2 if ha else 1)]  # nothing listens there
    if ha:
        folder = ha_cluster_conf(tmp_path, nameservice="prod", namenodes=addresses, rms=["127.0.0.1:1"])
        key = "dfs.ha.namenodes.prod"
    else:
        write_site(tmp_path, "core-site.xml", {"fs.defaultFS": "hdfs://127.0.0.1:8020"})
        write_site(tmp_path, "hdfs-site.xml", {"dfs.namenode.http-address": addresses[0]})
        folder, key = tmp_path, "dfs.namenode.http-address"
    use_conf_dir(monkeypatch, folder)
    config = config_without_connection(user="etl")
    started = time.monotonic()
    with pytest.raises(WebHDFSUnavailableError) as refused:
        WebHDFSStorage(config).exists("/runs/nightly")
    assert time.monotonic() - started < config.deadline
    message = str(refused.value)
    assert all(f"http://{address}: connection refused" in message for address in addresses), message
    assert f"(addresses from {folder / 'hdfs-site.xml'} ({key}" in message, message
    assert f"check the namenodes' WebHDFS addresses ({folder / 'hdfs-site.xml'} ({key}" in message, message
