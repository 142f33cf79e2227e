"""Which executors of a failed attempt the driver drops: those still running one of its tasks once the others
ended theirs (cut off, or hanging), never the node that reported the failure, never one Spark already lost."""

from __future__ import annotations

from types import SimpleNamespace

from airflow_tfos.runtime.driver.eviction import AttemptTask, drop_executors, executors_to_drop, is_local

HOST = {"1": "10.231.77.15", "2": "10.231.77.16", "3": "10.231.77.17"}


def tasks(*states: tuple[str, str, str], active: tuple[str, ...] = ("1", "2", "3")) -> list[AttemptTask]:
    return [AttemptTask(node, ex, HOST[ex], status, ex in active) for node, ex, status in states]


def test_a_partitioned_chief_whose_peer_reported_the_collective_timeout_is_dropped():
    seen = tasks(("chief:0", "1", "RUNNING"), ("worker:0", "2", "FAILED"), ("worker:1", "3", "KILLED"))
    drops = executors_to_drop(seen, failed_node="worker:0", last_steps={"chief:0": 27, "worker:0": 27}, waited=10)
    assert [(d.executor_id, d.host) for d in drops] == [("1", "10.231.77.15")]
    assert drops[0].message() == (
        "dropping executor 1 on 10.231.77.15: its TF node chief:0 (last step 27) is cut off or hangs; "
        "its task did not end within 10 s of the attempt's failure"
    )


def test_a_stalled_node_that_does_not_answer_is_named_with_its_step():
    seen = tasks(("chief:0", "1", "RUNNING"), ("worker:0", "2", "KILLED"), ("worker:1", "3", "KILLED"))
    drops = executors_to_drop(seen, stalled={"chief:0": 27, "worker:0": 27})
    assert [d.message().split(";")[0] for d in drops] == [
        "dropping executor 1 on 10.231.77.15: its TF node chief:0 stalled at step 27"
    ]


def test_executors_that_ended_their_tasks_or_are_already_lost_are_kept():
    # a frozen TF process: its executor killed the task (and the process) when the stage was cancelled
    ended = tasks(("chief:0", "1", "KILLED"), ("worker:0", "2", "FAILED"), ("worker:1", "3", "KILLED"))
    assert executors_to_drop(ended, stalled={"chief:0": 27}) == []
    # a dead host: Spark lost its executor and replaces it itself
    lost = tasks(("chief:0", "1", "RUNNING"), ("worker:0", "2", "KILLED"), active=("2", "3"))
    assert executors_to_drop(lost) == []
    # the node that reported the failure answered, even if Spark has not seen its task end yet
    assert executors_to_drop(tasks(("worker:0", "2", "RUNNING")), failed_node="worker:0") == []
    assert executors_to_drop([]) == []


def test_an_executor_is_dropped_once_whatever_number_of_its_tasks_hang():
    seen = tasks(("ps:0", "3", "RUNNING"), ("worker:1", "3", "RUNNING"), ("worker:0", "2", "RUNNING"))
    assert [d.executor_id for d in executors_to_drop(seen)] == ["2", "3"]


def test_nothing_is_dropped_in_local_mode():
    assert is_local("local") and is_local("local[4]")
    assert not is_local("local-cluster[2,1,1024]") and not is_local("spark://10.231.77.11:7077")
    (drop,) = executors_to_drop(tasks(("chief:0", "1", "RUNNING")))
    assert drop_executors(SimpleNamespace(master="local[2]"), [drop]) == []  # never reaches the JVM


def test_a_node_that_ended_while_its_executor_hangs_is_named_so():
    seen = tasks(("chief:0", "1", "KILLED"), ("worker:0", "2", "RUNNING"))
    (drop,) = executors_to_drop(seen, ended=["chief:0", "worker:0"], last_steps={"worker:0": 60}, waited=5)
    assert drop.message() == (
        "dropping executor 2 on 10.231.77.16: its TF node worker:0 ended, but the executor does not answer; "
        "its task did not end within 5 s of the attempt's failure"
    )
