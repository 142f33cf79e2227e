"""Datanodes that do not answer are left out of the namenode's redirects by their transfer address (the namenode's
``excludedatanodes``), which the namenode's JMX maps from the HTTP address a redirect names, for a while only.
On Hadoop's own HDFS: tests/integration/hadoop/test_drills_yarn.py (a DataNode stopped while a run reads and
writes)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import requests

from airflow_tfos.shared.storage.webhdfs_calls import session_class
from airflow_tfos.shared.storage.webhdfs_datanodes import (
    DatanodeExclusions,
    failed_datanode,
    transfer_addresses,
    with_exclusions,
)

#: What Hadoop 3.5's NameNodeInfo bean says of two datanodes (trimmed): LiveNodes is JSON inside JSON.
NAMENODE_INFO = {
    "beans": [
        {
            "name": "Hadoop:service=NameNode,name=NameNodeInfo",
            "LiveNodes": json.dumps(
                {
                    "127.0.0.1:40689": {"infoAddr": "127.0.0.1:40701", "infoSecureAddr": "127.0.0.1:0",
                                        "xferaddr": "127.0.0.1:40689"},
                    "127.0.0.1:40623": {"infoAddr": "127.0.0.1:40633", "xferaddr": "127.0.0.1:40623"},
                }
            ),
            "DeadNodes": "{}",
        }
    ]
}  # fmt: skip


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_jmx_listing_maps_each_http_address_to_its_transfer_address():
    assert transfer_addresses(NAMENODE_INFO) == {
        "127.0.0.1:40701": "127.0.0.1:40689",
        "127.0.0.1:40633": "127.0.0.1:40623",
    }
    assert transfer_addresses({}) == {}


def test_a_failed_datanode_is_left_out_by_transfer_address_until_its_time_runs_out():
    clock, asked = Clock(), []

    def lookup():
        asked.append(1)
        return transfer_addresses(NAMENODE_INFO)

    exclusions = DatanodeExclusions(lookup, secs=600, clock=clock)
    assert exclusions.excluded() is None
    assert exclusions.failed("127.0.0.1:40633") == "127.0.0.1:40623"
    assert exclusions.failed("127.0.0.1:40633") == "127.0.0.1:40623" and len(asked) == 1  # asked once
    clock.now += 300
    assert exclusions.failed("127.0.0.1:40701") == "127.0.0.1:40689"
    assert exclusions.excluded() == "127.0.0.1:40623,127.0.0.1:40689"
    clock.now += 300  # the first one's 600 s are over: the namenode may name it again
    assert exclusions.excluded() == "127.0.0.1:40689"


def test_without_the_jmx_listing_the_host_alone_is_left_out():
    def lookup():
        raise OSError("403 Forbidden")

    exclusions = DatanodeExclusions(lookup)
    assert exclusions.failed("10.231.77.16:9864") == "10.231.77.16"
    assert exclusions.excluded() == "10.231.77.16"


def test_only_requests_the_namenode_redirects_carry_the_exclusions():
    exclusions = DatanodeExclusions(lambda: {"127.0.0.1:40633": "127.0.0.1:40623"})
    assert with_exclusions({"op": "OPEN"}, exclusions) == {"op": "OPEN"}  # none left out yet
    exclusions.failed("127.0.0.1:40633")
    for op in ("OPEN", "CREATE", "APPEND"):
        assert with_exclusions({"op": op, "offset": 5}, exclusions) == {
            "op": op,
            "offset": 5,
            "excludedatanodes": "127.0.0.1:40623",
        }
    assert with_exclusions({"op": "LISTSTATUS"}, exclusions) == {"op": "LISTSTATUS"}
    assert with_exclusions(None, exclusions) is None


def test_a_refused_redirect_names_its_datanode_and_a_refused_namenode_does_not():
    namenodes = ["http://127.0.0.1:38451"]
    to_datanode = requests.ConnectionError(
        "refused", request=SimpleNamespace(url="http://127.0.0.1:40633/webhdfs/v1/a?op=OPEN&namenoderpcaddress=x")
    )
    to_namenode = requests.ConnectionError(
        "refused", request=SimpleNamespace(url="http://127.0.0.1:38451/webhdfs/v1/a")
    )
    assert failed_datanode(to_datanode, namenodes) == "127.0.0.1:40633"
    assert failed_datanode(to_namenode, namenodes) is None
    assert failed_datanode(OSError("no request"), namenodes) is None


def test_the_session_adds_the_exclusions_to_the_namenodes_request(monkeypatch):
    sent = []
    session = session_class()()
    session.exclusions = DatanodeExclusions(lambda: {"127.0.0.1:40633": "127.0.0.1:40623"})
    session.exclusions.failed("127.0.0.1:40633")
    monkeypatch.setattr(requests.Session, "request", lambda self, method, url, **kw: sent.append(kw["params"]))
    session.request("GET", "http://127.0.0.1:38451/webhdfs/v1/a", params={"op": "OPEN", "user.name": "u"})
    assert sent == [{"op": "OPEN", "user.name": "u", "excludedatanodes": "127.0.0.1:40623"}]
