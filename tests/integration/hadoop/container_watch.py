"""What a run shows to others while it runs on the Hadoop lab: every process's command line (as ``ps`` shows it),
and the containers' launch scripts and token files in the NodeManagers' local directories, which YARN deletes
when the application ends (so they are read while it runs). For the tests that look for secrets there."""

from __future__ import annotations

import threading
from pathlib import Path

#: What YARN writes for each container, under a NodeManager's local directory (the application's user's copy,
#: and the NodeManager's private one).
CONTAINER_FILES = (
    "usercache/*/appcache/*/container_*/launch_container.sh",
    "usercache/*/appcache/*/container_*/container_tokens",
    "nmPrivate/*/container_*/*",
)


def nodemanager_dirs(conf_dir: Path, kind: str) -> list[Path]:
    """The lab's NodeManagers' ``local`` or ``log`` directories (MiniYARNCluster's, under the lab's folder)."""
    return sorted((conf_dir / "data" / "yarn").glob(f"*/*/*-{kind}Dir-nm-*"))


class ContainerWatch:
    """Read, every ``interval`` seconds until the ``with`` block ends, the command line of every process and the
    files :data:`CONTAINER_FILES` names under ``local_dirs`` (the last content seen of each)."""

    def __init__(self, local_dirs: list[Path], interval: float = 0.3) -> None:
        self.local_dirs = local_dirs
        self.interval = interval
        self.cmdlines: dict[int, str] = {}
        self.files: dict[str, bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            for entry in Path("/proc").iterdir():
                if entry.name.isdigit():
                    try:
                        raw = (entry / "cmdline").read_bytes()
                    except OSError:
                        continue
                    self.cmdlines[int(entry.name)] = raw.replace(b"\0", b" ").decode(errors="replace")
            for root in self.local_dirs:
                for pattern in CONTAINER_FILES:
                    for path in root.glob(pattern):
                        try:
                            if path.is_file():
                                self.files[str(path)] = path.read_bytes()
                        except OSError:  # deleted under us
                            continue

    def named(self, name: str) -> dict[str, bytes]:
        """The files seen whose name is ``name``."""
        return {path: data for path, data in self.files.items() if Path(path).name == name}

    def __enter__(self) -> ContainerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
