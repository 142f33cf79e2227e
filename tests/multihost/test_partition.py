"""A partition on the multi-host cluster: 3 TF nodes on three hosts, fed from Spark, their run directory on the
emulated HDFS (namenode and datanode on two other hosts); the chief's host is cut off past step 25 and
comes back 60 s later. The run recovers on the reachable hosts and the spare one, from the last checkpoint;
the returning host's stale TF process and executor end and publish nothing."""

from __future__ import annotations

import ipaddress
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.multihost.drills import EVERY, run_drill

pytestmark = pytest.mark.integration

#: The goal is 60 s. Measured here (2 cores shared with other test runs, load average about 20): 115-117 s,
#: most of it starting the new executor and TF process on the spare host (docs/multihost.md).
RESUME_WITHIN_SECS = 180


def least_squares(data: str) -> np.ndarray:
    table = pq.read_table(data)
    x = np.array(table.column("x").to_pylist())
    a = np.hstack([x, np.ones((len(x), 1))])
    return np.linalg.lstsq(a, np.array(table.column("y").to_pylist()), rcond=None)[0]


def test_a_partitioned_host_is_replaced_and_its_stale_side_publishes_nothing(lab, user_code, linear_data):
    seen = run_drill(lab, user_code, linear_data, "partition")
    run_path = seen["run_path"]
    # TF_CONFIG named the hosts' own addresses, one node per worker host, none on loopback
    hosts = {lab.address(h) for h in lab.workers}
    for config in seen["tf_configs"]:
        addresses = [a.rsplit(":", 1)[0] for job in config["tf_config"]["cluster"].values() for a in job]
        assert len(set(addresses)) == 3 and set(addresses) <= hosts, addresses
        assert not any(ipaddress.ip_address(a).is_loopback for a in addresses)
    # recovered from the last checkpoint, redoing at most one checkpoint interval
    result = seen["result"]
    assert result["attempt"] >= 1 and seen["restored"] is not None
    assert 0 <= seen["redone"] <= EVERY, seen
    assert seen["resumed_secs"] is not None and seen["resumed_secs"] < RESUME_WITHIN_SECS, seen
    # a correct model: the least-squares fit of the data, computed here with NumPy
    assert np.allclose(result["weights"], least_squares(linear_data), atol=0.2), result
    # checkpoints, export and report on HDFS; after the cut only the new attempt published
    assert all(attempt >= 1 for _, attempt in seen["checkpoints_after_fault"]), seen["checkpoints_after_fault"]
    assert max(step for step, _ in seen["checkpoints_after_fault"]) == result["step"]
    assert os.path.isfile(lab.hdfs.local_path(f"{run_path}/export/_SUCCESS"))
    assert os.path.isfile(lab.hdfs.local_path(f"{run_path}/report/report.html"))
    assert [e["attempt"] for e in seen["exports"]] == [result["attempt"]]
    # the returning host's stale TF process and executor ended
    assert not seen["left_on_host"], seen
