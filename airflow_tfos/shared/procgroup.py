"""Signal a process group only while its id still stands for the group that was started.

A process group's id is its leader's pid. Once the leader has been reaped and the group's last member
has gone, the kernel may give that number to a new process, which may lead a new, unrelated group;
``killpg`` on the old id would then signal strangers. While the leader is unreaped (running, or a
zombie not yet waited for) or any member is left, the id cannot be reused. Pure Python plus psutil,
used by both halves (the TF node's child processes and the local backend).
"""

from __future__ import annotations

import logging
import os

import psutil

log = logging.getLogger(__name__)


def group_members(pgid: int) -> list[int]:
    """The pids of every process in process group ``pgid``, zombies included (they still hold the id)."""
    found = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid:
                found.append(pid)
        except OSError:  # gone meanwhile, or not ours to look at
            continue
    return found


def signal_group(pgid: int, sig: int, *, leader_unreaped: bool) -> bool:
    """Send ``sig`` to process group ``pgid`` unless its id may have been reused; return whether it was sent.

    :param pgid: the group's id (its leader's pid).
    :param sig: the signal.
    :param leader_unreaped: whether the caller knows the leader has not been reaped yet. If it has been,
        the group is signalled only while members are left.
    """
    if not leader_unreaped and not group_members(pgid):
        log.debug("process group %d has no member left: not signalled (its id may belong to others now)", pgid)
        return False
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
