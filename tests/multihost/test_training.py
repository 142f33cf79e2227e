"""Training across hosts: a 3-node MWMS run fed from Spark on a Spark standalone cluster of network-namespace
hosts (tests/multihost/conftest.py), its run directory on the WebHDFS emulator whose namenode and datanode
are two other hosts."""

from __future__ import annotations

import ipaddress

import numpy as np
import pyarrow.parquet as pq
import pytest

from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage.webhdfs_client import clear_cached_storages
from tests.multihost.conftest import start_training, training_result, wait_no_node_processes

pytestmark = pytest.mark.integration


def least_squares(data: str) -> np.ndarray:
    table = pq.read_table(data)
    x = np.array(table.column("x").to_pylist())
    a = np.hstack([x, np.ones((len(x), 1))])
    return np.linalg.lstsq(a, np.array(table.column("y").to_pylist()), rcond=None)[0]


def test_three_nodes_on_three_hosts_train_with_the_run_directory_on_hdfs(lab, user_code, linear_data):
    run_dir = lab.hdfs.uri("/runs/three-hosts")
    result = training_result(lab, start_training(lab, user_code, run_dir, linear_data, {"epochs": 8, "every": 10}))

    def look():
        clear_cached_storages()
        rundir = RunDir(run_dir)
        return {
            "tf_config": rundir.events("tf_config"),
            "checkpoint": rundir.latest_checkpoint(),
            "export": rundir.export_success(),
            "report": rundir.storage.exists(rundir.path("report", "report.html")),
        }

    seen = lab.hosts.call_in("driver", look)
    # TF_CONFIG names the hosts' own addresses: one node per worker host, none on loopback
    hosts = {lab.address(h) for h in lab.workers}
    configs = seen["tf_config"]
    assert len(configs) == 3, configs
    for config in configs:
        addresses = [a.rsplit(":", 1)[0] for job in config["tf_config"]["cluster"].values() for a in job]
        assert len(set(addresses)) == 3 and set(addresses) <= hosts, addresses
        assert not any(ipaddress.ip_address(a).is_loopback for a in addresses)
    # checkpoints and export on HDFS; the writes went to the datanode on another host than the namenode
    assert seen["checkpoint"].step == result["step"] > 0
    assert seen["export"]["step"] == result["step"]
    assert seen["report"]
    assert lab.hdfs.url.split("//")[1].split(":")[0] != lab.hdfs.datanode_url.split("//")[1].split(":")[0]
    assert {r.server for r in lab.hdfs.requests if r.op == "CREATE"} >= {"namenode0", "datanode"}
    # a correct model: the learned line is the least-squares fit of the data, computed here with NumPy
    assert np.allclose(result["weights"], least_squares(linear_data), atol=0.2), result
    wait_no_node_processes(lab, lab.workers)
