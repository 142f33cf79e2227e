"""Datanodes that do not answer, and the namenode asked to redirect elsewhere.

WebHDFS's OPEN, CREATE and APPEND go to a namenode, which redirects them to a datanode. A datanode that stopped
stays live in the namenode's eyes until its heartbeats have been missing for about ten minutes
(``dfs.namenode.heartbeat.recheck-interval``), and for a read the namenode names the same replica's datanode
again and again: every retry meets the same refused connection (seen on Hadoop 3.5 with one of two DataNodes
stopped: every read of a file with a replica there failed). The namenode takes ``excludedatanodes`` on those
operations, a comma-separated list of datanodes by their data-transfer address (``host:port``), which a
redirect does not show: it names the datanode's HTTP address. :class:`DatanodeExclusions` keeps the datanodes
that refused or timed out, by their transfer address (found in the namenode's ``NameNodeInfo`` JMX bean, which
lists every datanode's HTTP and transfer addresses), for ``EXCLUDE_SECS``; the storage's session adds them to
the namenode's requests of those operations.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

#: How long a datanode that did not answer is left out of the namenode's redirects.
EXCLUDE_SECS = 600.0
#: The operations the namenode redirects to a datanode.
REDIRECTED_OPS = frozenset({"OPEN", "CREATE", "APPEND"})
#: The namenode's JMX bean that lists its datanodes.
NAMENODE_INFO = "/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo"


def transfer_addresses(namenode_info: Mapping[str, Any]) -> dict[str, str]:
    """``{HTTP address: transfer address}`` of every datanode the namenode lists (its ``NameNodeInfo`` JMX bean,
    whose ``LiveNodes`` is a JSON text of ``{name: {"infoAddr": ..., "xferaddr": ...}}``)."""
    found: dict[str, str] = {}
    for bean in namenode_info.get("beans") or []:
        for listing in ("LiveNodes", "DeadNodes"):
            nodes = bean.get(listing)
            nodes = json.loads(nodes) if isinstance(nodes, str) else nodes or {}
            for name, node in nodes.items():
                transfer = node.get("xferaddr") or name
                for http in (node.get("infoAddr"), node.get("infoSecureAddr")):
                    if http and not http.endswith(":0"):
                        found[http] = transfer
    return found


class DatanodeExclusions:
    """The datanodes left out of the namenode's redirects, by transfer address, each until its time runs out.

    :param lookup: returns ``{HTTP address: transfer address}`` of the cluster's datanodes (asked when a datanode
        fails whose transfer address is not known yet; an error leaves the datanode out by its host alone).
    """

    def __init__(self, lookup: Callable[[], Mapping[str, str]], *, secs: float = EXCLUDE_SECS, clock=time.monotonic):
        self.lookup, self.secs, self.clock = lookup, secs, clock
        self._until: dict[str, float] = {}
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def failed(self, http_address: str) -> str:
        """The datanode at ``http_address`` (``host:port`` of a redirect) did not answer: leave it out; return how
        it is named to the namenode."""
        with self._lock:
            known = self._known.get(http_address)
        if known is None:
            try:
                known = dict(self.lookup()).get(http_address)
            except Exception as exc:  # a namenode without JMX, or one that refuses: the host alone then
                log.debug("cannot list the datanodes' transfer addresses: %s", exc)
            known = known or http_address.rsplit(":", 1)[0]
        with self._lock:
            self._known[http_address] = known
            self._until[known] = self.clock() + self.secs
        return known

    def excluded(self) -> str | None:
        """The ``excludedatanodes`` value for the namenode now, or None when no datanode is left out."""
        now = self.clock()
        with self._lock:
            for name in [n for n, until in self._until.items() if until <= now]:
                del self._until[name]
            return ",".join(sorted(self._until)) or None


def failed_datanode(exc: BaseException, namenodes: list[str]) -> str | None:
    """The ``host:port`` of the datanode that ``exc`` (a refused or timed-out request) was sent to, or None when it
    was sent to a namenode (or says nothing of where it went)."""
    request = getattr(exc, "request", None)
    url = getattr(request, "url", None)
    if not url:
        return None
    address = urlsplit(url).netloc.rsplit("@", 1)[-1]
    if address in {urlsplit(n).netloc for n in namenodes}:
        return None
    return address


def with_exclusions(params: Any, exclusions: DatanodeExclusions | None) -> Any:
    """``params`` of a namenode request with ``excludedatanodes`` added when it is redirected to a datanode and some
    are left out; else ``params`` unchanged."""
    if exclusions is None or not isinstance(params, dict) or str(params.get("op", "")).upper() not in REDIRECTED_OPS:
        return params
    excluded = exclusions.excluded()
    return {**params, "excludedatanodes": excluded} if excluded else params
