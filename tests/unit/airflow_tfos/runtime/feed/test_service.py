"""The tf.data service under parameter servers, without Spark: which dispatcher a node uses, and the jobs
its datasets make (a dispatcher and one tf.data worker in one process)."""

from __future__ import annotations

import json
import subprocess
import sys

from airflow_tfos.runtime.feed.service import DataService
from airflow_tfos.runtime.node.cluster import decider_ids, plan_roles
from airflow_tfos.runtime.node.job import NodeJob
from airflow_tfos.runtime.node.task import _data_service
from tests.conftest import REPO


def test_every_node_is_given_the_chiefs_dispatcher_and_jobs_named_by_run_and_attempt():
    roles = tuple(plan_roles(4, num_ps=1))
    job = NodeJob(cluster_id="r1", roles=roles, deciders=decider_ids(roles), payload=b"", attempt=2)
    infos = [{"executor_id": 0}, {"executor_id": 1, "dispatcher": "10.0.0.2:4321"}, {"executor_id": 2}]
    service = _data_service(job, infos)
    assert service == DataService("10.0.0.2:4321", job="r1-2")
    assert service.address == "grpc://10.0.0.2:4321" and service.max_outstanding_requests == 1
    # Without parameter servers no task reserves a dispatcher: no service.
    assert _data_service(job, [{"executor_id": 0}, {"executor_id": 1}]) is None


SCRIPT = """
import json, socket
import tensorflow as tf
from airflow_tfos.runtime.feed import service
probe = socket.socket(); probe.bind(("127.0.0.1", 0)); port = probe.getsockname()[1]; probe.close()
service.start_dispatcher(port)
service.start_worker(f"127.0.0.1:{port}", "127.0.0.1")
data = service.DataService(f"127.0.0.1:{port}", job="run-0")
one_pass = tf.function(data.passes(lambda: tf.data.Dataset.range(6), "train", repeat=False)).get_concrete_function()
other = tf.function(data.passes(lambda: tf.data.Dataset.range(3), "train", repeat=False)).get_concrete_function()
endless = tf.function(data.passes(lambda: tf.data.Dataset.range(4), "validation", repeat=True)).get_concrete_function()
print(json.dumps({
    "passes": [sorted(int(x) for x in one_pass()) for _ in range(3)],
    "other": [sorted(int(x) for x in other()) for _ in range(2)],
    "endless": [int(x) for x in endless().take(10)],
}))
"""


def test_each_iterator_is_a_new_job_and_an_endless_dataset_makes_pass_after_pass():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Each run of a dataset function (what iter() on a per-worker dataset does on every worker) starts a new
    # job, instead of joining the finished one: a whole pass each time, for each of two datasets of a split.
    assert result["passes"] == [list(range(6))] * 3
    assert result["other"] == [list(range(3))] * 2
    # repeat=True: one job per pass, one after the other.
    assert result["endless"] == [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
