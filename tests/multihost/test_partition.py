"""A partition on the multi-host cluster: 3 TF nodes on three hosts, fed from Spark, their run directory on the
emulated HDFS (namenode and datanode on two other hosts); the chief's host is cut off past step 25 and
comes back ``OUTAGE_SECS`` later, while the run goes on. The run recovers from the last checkpoint on a new
executor; the returning host's stale TF process and executor end and publish nothing."""

from __future__ import annotations

import ipaddress
import logging
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.multihost.drills import EVERY, OPTIONS, run_drill

pytestmark = pytest.mark.integration

log = logging.getLogger(__name__)


@pytest.fixture(autouse=True)
def _log_measurements(caplog):
    """Keep this module's INFO lines (what the drill measured), so that ``pytest -rA`` shows them."""
    caplog.set_level(logging.INFO, logger=__name__)


#: The goal is 60 s. Measured here with a 60 s outage (2 cores shared with other test runs, load average about
#: 20): 97-117 s, most of it waiting for the cut host to come back and starting the new executor and TF process
#: there (docs/multihost.md).
RESUME_WITHIN_SECS = 180
#: How long the chief's host stays cut off. It must outlast both ways the run learns of the cut: TF's collective
#: op on a peer times out after about 12 s (the attempt fails), and the driver declares the host's executor lost
#: once it has missed heartbeats for ``spark.network.timeout`` (30 s, checked every
#: ``spark.network.timeoutInterval``, 5 s): at most 35 s after the cut, 31 s measured. Shorter, and the old
#: executor would come back in time to serve the next attempt, so nothing would be replaced and no stale side
#: would be left to end. 40 s leaves 5 s of margin; the test checks that the executor was indeed declared lost
#: before the host came back. Spark's master is not told of the cut (its worker timeout is 60 s) and may put the
#: replacement executor on the cut host's worker (it did in every run measured here), which starts it once the
#: host is back: the recovery waits for the end of the outage, which is why a shorter one saves time.
#: ``bench/recovery.py`` keeps 60 s.
OUTAGE_SECS = 40
#: 65 steps (the bench trains 130): the new TF cluster restores step 20 and trains the other 45, long enough for
#: the host to come back while the run goes on (checked below); what is proved needs no more.
EPOCHS = 5


def least_squares(data: str) -> np.ndarray:
    table = pq.read_table(data)
    x = np.array(table.column("x").to_pylist())
    a = np.hstack([x, np.ones((len(x), 1))])
    return np.linalg.lstsq(a, np.array(table.column("y").to_pylist()), rcond=None)[0]


def test_a_partitioned_host_is_replaced_and_its_stale_side_publishes_nothing(lab, user_code, linear_data):
    seen = run_drill(lab, user_code, linear_data, "partition", partition_secs=OUTAGE_SECS, epochs=EPOCHS)
    log.info(
        "partition of %s at step %s: attempt failed +%s s, host back +%s s, new TF cluster's first step +%s s, "
        "run ended +%.1f s; timeline %s",
        seen["host"], seen["step_at_fault"], seen["failed_secs"], seen["mended_secs"], seen["resumed_secs"],
        seen["run_secs"], sorted(seen["timeline"]),
    )  # fmt: skip
    run_path = seen["run_path"]
    # TF_CONFIG named the hosts' own addresses, one node per worker host, none on loopback
    hosts = {lab.address(h) for h in lab.workers}
    for config in seen["tf_configs"]:
        addresses = [a.rsplit(":", 1)[0] for job in config["tf_config"]["cluster"].values() for a in job]
        assert len(set(addresses)) == 3 and set(addresses) <= hosts, addresses
        assert not any(ipaddress.ip_address(a).is_loopback for a in addresses)
    # the outage outlasted TF's failure detection and Spark's, and the host came back while the run went on
    assert OPTIONS["spark_conf"]["spark.network.timeout"] == "30s"  # the margin above is computed from it
    assert seen["mended_secs"] is not None and seen["failed_secs"] is not None, seen
    assert seen["failed_secs"] < seen["mended_secs"], seen["timeline"]
    assert seen["executor_lost_before_mend"], f"no executor on {seen['host']} was declared lost in {OUTAGE_SECS} s"
    assert seen["mended_secs"] < seen["run_secs"], seen
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
