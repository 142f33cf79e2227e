"""The WebHDFS emulator's namespace (:mod:`airflow_tfos.testing.webhdfs`): who owns a path, who may reach it,
and HDFS's rules for what a path holds.

Owners and the permissions that clients give (MKDIRS and CREATE with ``permission``, SETPERMISSION) are kept
here by path, with the read-only switches of :meth:`~airflow_tfos.testing.webhdfs.WebHDFSEmulator.make_read_only`;
so are the rules that go with them: the access check (``AccessControlException`` as Hadoop words it), the
``FileStatus`` and ``ContentSummary`` of a path, the parents HDFS creates on the way, and the two semantics of
RENAME. The emulator answers requests and keeps its servers, switches and tokens; this is apart so that each
module stays short and HDFS's rules read in one place. Not thread-safe: the emulator calls it holding its lock.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

from airflow_tfos.testing.webhdfs_http import RemoteError

SUPERGROUP = "supergroup"
BLOCK_SIZE = 134217728


def requested_mode(query: dict[str, str]) -> int | None:
    """The ``permission`` parameter (octal, 0-1777), or None when absent."""
    value = query.get("permission")
    if value is None or value == "":
        return None
    try:
        mode = int(value, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o1777:
        raise RemoteError(
            "IllegalArgumentException", f'Invalid value for webhdfs parameter "permission": "{value}" is not octal'
        )
    return mode


#: What a namenode request checks before it answers (see :attr:`Namespace.ACCESS`); others check ``write``.
NAMENODE_ACCESS = {
    "GETFILESTATUS": "traverse",
    "LISTSTATUS": "list",
    "GETCONTENTSUMMARY": "list",
    "OPEN": "read",
    "MKDIRS": "create",
    "DELETE": "delete",
    "SETPERMISSION": "traverse",  # and the owner's, checked by the op
    "GETHOMEDIRECTORY": "traverse",
    "GETDELEGATIONTOKEN": "traverse",
    "RENEWDELEGATIONTOKEN": "traverse",
    "CANCELDELEGATIONTOKEN": "traverse",
}


class Namespace:
    """The owners, permissions and read-only switches of an emulator's paths, and the rules that use them.

    :param emulator: the :class:`~airflow_tfos.testing.webhdfs.WebHDFSEmulator` it belongs to, whose
        ``local_path``, ``superuser`` and ``rename_options`` it goes by (not imported here: that module imports
        this one).
    """

    def __init__(self, emulator: Any):
        self.emulator = emulator
        self.owners: dict[str, str] = {}
        self.modes: dict[str, int] = {}  # permissions given by clients (MKDIRS, CREATE, SETPERMISSION)
        self.read_only: list[tuple[str, str | None, bool]] = []

    #: What each kind of request needs, as Hadoop's FSPermissionChecker asks it: ``x`` on every directory
    #: above the path, then the bits on one inode: the path itself, its parent, or its nearest existing
    #: ancestor (what MKDIRS and CREATE make a folder in).
    ACCESS = {
        "traverse": (None, "", 0),
        "read": ("self", "READ", 0o4),
        "list": ("self", "READ_EXECUTE", 0o5),
        "write": ("self", "WRITE", 0o2),
        "create": ("ancestor", "WRITE", 0o2),
        "delete": ("parent", "WRITE", 0o2),
    }

    def check_access(self, path: str, user: str, action: str) -> None:
        """Raise ``AccessControlException`` unless ``user`` may do ``action`` (a key of :attr:`ACCESS`) at ``path``,
        as HDFS decides where a permission was given, and no read-only switch covers it."""
        where, access, bits = self.ACCESS[action]
        if user != self.emulator.superuser:
            parts = [p for p in path.split("/") if p]
            inodes = ["/" + "/".join(parts[:i]) for i in range(len(parts) + 1)]
            existing = [i for i in inodes if os.path.exists(self.emulator.local_path(i))]
            # x on each directory above the path (those that exist; a missing one ends the walk)
            for inode in existing:
                if inode != inodes[-1] and os.path.isdir(self.emulator.local_path(inode)):
                    self._require_bits(inode, user, "EXECUTE", 0o1)
            checked = {
                "self": inodes[-1] if inodes[-1] in existing else None,
                "parent": inodes[-2] if len(inodes) > 1 and inodes[-2] in existing else None,
                "ancestor": next((i for i in reversed(existing) if i != inodes[-1]), None),
            }.get(where)
            if where == "ancestor" and inodes[-1] in existing:
                checked = None  # MKDIRS of a folder that is there; CREATE over a file checks the file
            if action == "list" and checked is not None and not os.path.isdir(self.emulator.local_path(checked)):
                checked = None  # a file lists as itself, as its status
            if checked is not None:
                self._require_bits(checked, user, access, bits)
        write = action in ("write", "create", "delete")
        for prefix, who, unreadable in self.read_only:
            inside = path == prefix or path.startswith(prefix.rstrip("/") + "/")
            if inside and who in (None, user) and (write or unreadable):
                access = "WRITE" if write else "READ"
                raise RemoteError(
                    "AccessControlException",
                    f'Permission denied: user={user}, access={access}, inode="{prefix}":'
                    f"{self.emulator.superuser}:{SUPERGROUP}:drwxr-xr-x",
                )

    def _require_bits(self, inode: str, user: str, access: str, bits: int) -> None:
        """``AccessControlException`` as Hadoop words it unless ``user`` has ``bits`` on ``inode`` (only where a
        permission was given; an owner's bits are not checked: the owner of such a path may do anything)."""
        mode = self.modes.get(inode)
        owner = self.owners.get(inode, self.emulator.superuser)
        if mode is None or owner == user or mode & bits == bits:
            return
        kind = "d" if os.path.isdir(self.emulator.local_path(inode)) else "-"
        rwx = "".join(c if mode & (1 << (8 - j)) else "-" for j, c in enumerate("rwxrwxrwx"))
        raise RemoteError(
            "AccessControlException",
            f'Permission denied: user={user}, access={access}, inode="{inode}":{owner}:{SUPERGROUP}:{kind}{rwx}',
        )

    def status(self, path: str, suffix: str = "") -> dict[str, Any]:
        """The ``FileStatus`` of ``path``, with ``suffix`` as its ``pathSuffix`` (its name in a listing)."""
        local = self.emulator.local_path(path)
        st = os.stat(local)
        is_dir = os.path.isdir(local)
        return {
            "accessTime": 0 if is_dir else int(st.st_atime * 1000),
            "blockSize": 0 if is_dir else BLOCK_SIZE,
            "childrenNum": len(os.listdir(local)) if is_dir else 0,
            "fileId": st.st_ino,
            "group": SUPERGROUP,
            "length": 0 if is_dir else st.st_size,
            "modificationTime": int(st.st_mtime * 1000),
            "owner": self.owners.get(path, self.emulator.superuser),
            "pathSuffix": suffix,
            "permission": format(self.modes[path], "o") if path in self.modes else "755" if is_dir else "644",
            "replication": 0 if is_dir else 1,
            "storagePolicy": 0,
            "type": "DIRECTORY" if is_dir else "FILE",
        }

    def require(self, path: str, message: str) -> str:
        """Where ``path`` lies on this machine; ``FileNotFoundException`` saying ``message`` when it is not there."""
        local = self.emulator.local_path(path)
        if not os.path.exists(local):
            raise RemoteError("FileNotFoundException", message)
        return local

    def parent_dirs(self, path: str, user: str, mode: int | None = None) -> None:
        """Create the parents of ``path`` as HDFS does on CREATE and MKDIRS; a file on the way is an error.

        With ``mode`` (MKDIRS with a permission), the last one created gets it, the others ``mode | u+wx``.
        """
        parts = [p for p in path.split("/") if p]
        current = ""
        for i, part in enumerate(parts[:-1]):
            current = f"{current}/{part}"
            local = self.emulator.local_path(current)
            if os.path.isfile(local):
                raise RemoteError("ParentNotDirectoryException", f"{current} (is not a directory)")
            if not os.path.isdir(local):
                os.mkdir(local)
                self.owners.setdefault(current, user)
                if mode is not None:
                    self.modes[current] = mode if i == len(parts) - 2 else mode | 0o300

    def move_owners(self, src: str, dst: str) -> None:
        """Carry the owners and permissions of ``src`` and of what is under it over to ``dst`` (it was renamed)."""
        for table in (self.owners, self.modes):
            for key in [k for k in table if k == src or k.startswith(src + "/")]:
                table[dst + key[len(src) :]] = table.pop(key)

    def forget(self, path: str) -> None:
        """Drop the owners and permissions of ``path`` and of what was under it (it was deleted)."""
        for table in (self.owners, self.modes):
            for key in [k for k in table if k == path or k.startswith(path + "/")]:
                del table[key]

    def rename(self, src: str, dst: str, options: set[str]) -> dict[str, Any] | None:
        """RENAME ``src`` to ``dst``: without ``options`` (or when the emulator ignores them) the plain rename's
        ``{"boolean": ...}``, else rename2's None or its error."""
        src_local, dst_local = self.emulator.local_path(src), self.emulator.local_path(dst)
        dst_parent = self.emulator.local_path(posixpath.dirname(dst))
        if not options or not self.emulator.rename_options:  # the plain (deprecated) rename: a boolean
            if not os.path.exists(src_local) or not os.path.isdir(dst_parent) or src == "/":
                return {"boolean": False}
            if os.path.isdir(dst_local):  # into the directory
                dst = posixpath.join(dst, posixpath.basename(src))
                dst_local = self.emulator.local_path(dst)
            if os.path.exists(dst_local) or dst == src or dst.startswith(src + "/"):
                return {"boolean": False}
            os.rename(src_local, dst_local)
            self.move_owners(src, dst)
            return {"boolean": True}
        if not os.path.exists(src_local):
            raise RemoteError("FileNotFoundException", f"rename source {src} is not found.")
        if not os.path.isdir(dst_parent):
            raise RemoteError("FileNotFoundException", f"rename destination parent {posixpath.dirname(dst)} not found.")
        if dst == src or dst.startswith(src + "/"):
            raise RemoteError("IOException", f"rename destination {dst} is a directory or file under source {src}")
        if os.path.exists(dst_local):
            if "OVERWRITE" not in options:
                raise RemoteError("FileAlreadyExistsException", f"rename destination {dst} already exists")
            if os.path.isdir(src_local) != os.path.isdir(dst_local):
                raise RemoteError("IOException", f"Source {src} and destination {dst} must both be directories")
            if os.path.isdir(dst_local) and os.listdir(dst_local):
                raise RemoteError("IOException", f"rename destination directory is not empty: {dst}")
        if os.path.isdir(dst_local):
            os.rmdir(dst_local)  # empty, checked above
        os.replace(src_local, dst_local)
        self.move_owners(src, dst)
        return None

    def summary(self, path: str) -> dict[str, Any]:
        """The ``ContentSummary`` of ``path``."""
        local = self.require(path, f"File does not exist: {path}")
        if os.path.isfile(local):
            dirs, files, length = 0, 1, os.path.getsize(local)
        else:
            dirs, files, length = 0, 0, 0
            for folder, _, names in os.walk(local):
                dirs += 1
                files += len(names)
                length += sum(os.path.getsize(os.path.join(folder, n)) for n in names)
        summary = {"directoryCount": dirs, "ecPolicy": "", "fileCount": files, "length": length, "quota": -1}
        snapshots = {f"snapshot{k}": 0 for k in ("DirectoryCount", "FileCount", "Length", "SpaceConsumed")}
        # one replica of each block here: the space consumed is the length
        return {"ContentSummary": {**summary, **snapshots, "spaceConsumed": length, "spaceQuota": -1, "typeQuota": {}}}
