"""TensorBoard beside the chief, for log directories on local disk and on HDFS.

TensorBoard reads its log directory through TensorFlow's file systems, and TensorFlow 2.21 has none for
``hdfs://`` or ``webhdfs://`` ("File system scheme 'hdfs' not implemented"): pointed at such a URI,
TensorBoard serves an empty page. For a remote log directory, the node therefore runs this module
instead (``python -m airflow_tfos.runtime.node.tensorboard``): it mirrors the remote tree into a local
temporary directory through :mod:`airflow_tfos.shared.storage` every ``--sync-secs`` seconds while
TensorBoard, in the same process, reads the mirror. Event files only grow, so of an event file that grew
only the new bytes are read (one ranged read from the length already mirrored: WebHDFS ``OPEN`` with
``offset``) and appended (TensorBoard keeps reading the file it has open): over a run, each byte is
downloaded once. The new bytes must continue the file's chain of TFRecord headers (each record's length
and its checksum); an event file whose new bytes do not, that shrank, or any other file that changed, is
downloaded whole and written anew. On a Kerberized HDFS the node hands this process the run's WebHDFS
delegation token on its stdin (``--token-on-stdin``), as it hands its TF process: executors hold no
Kerberos ticket.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import posixpath
import shutil
import signal
import struct
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_tfos.runtime.node.process import ChildProcess
from airflow_tfos.runtime.program.saved_models import is_remote, list_tree
from airflow_tfos.shared.rundir import RunDir
from airflow_tfos.shared.storage import Storage, storage_for
from airflow_tfos.shared.storage.kerberos import use_delegation_token

if TYPE_CHECKING:  # the mirror runs as a process of its own: it need not import the node's job
    from airflow_tfos.runtime.node.job import NodeJob

log = logging.getLogger(__name__)

#: seconds between two syncs of a remote log directory (and between two reloads of TensorBoard)
SYNC_SECS = 2.0


def tensorboard_argv(
    log_dir: str,
    host: str,
    port: int,
    python: str = sys.executable,
    *,
    token_on_stdin: bool = False,
    reuse_port: bool = False,
) -> list[str]:
    """The command line of TensorBoard serving ``log_dir`` at ``host:port``: TensorBoard itself for a local
    directory, this module (a mirror, then TensorBoard) for a remote one (``token_on_stdin``: it reads its
    WebHDFS delegation token from its stdin first). ``reuse_port``: bind with ``SO_REUSEPORT``, beside the
    socket that holds the port for it (:class:`~airflow_tfos.runtime.node.ports.PortReservation`)."""
    serve = ["--host", host, "--port", str(port)]
    if is_remote(log_dir):
        token = ["--token-on-stdin"] if token_on_stdin else []
        reuse = ["--reuse-port"] if reuse_port else []
        return [python, "-m", "airflow_tfos.runtime.node.tensorboard", "--logdir", log_dir, *serve, *token, *reuse]
    reuse = ["--reuse_port", "true"] if reuse_port else []
    return [python, "-m", "tensorboard.main", "--logdir", log_dir.removeprefix("file://"), *serve, *reuse]


class LogDirMirror:
    """Keep ``local`` a copy of the files under the remote directory ``remote``.

    :param remote: the log directory's URI.
    :param local: an existing local directory to mirror into.
    :param storage: the storage of ``remote`` (default: :func:`~airflow_tfos.shared.storage.storage_for`).
    """

    def __init__(self, remote: str, local: str, storage: Storage | None = None):
        self.remote = remote.rstrip("/")
        self.local = local
        self.storage = storage or storage_for(remote)
        #: bytes read from the remote directory so far
        self.fetched = 0
        self._next_header: dict[str, int] = {}  # event file -> offset of its first record header not checked yet

    def sync(self) -> int:
        """Copy what is new or changed; return how many files were written. A missing directory is empty."""
        if not self.storage.exists(self.remote):
            return 0
        written = 0
        for rel, size in list_tree(self.storage, self.remote):
            target = os.path.join(self.local, *rel.split("/"))
            have = os.path.getsize(target) if os.path.isfile(target) else -1
            if have == size:
                continue
            source = posixpath.join(self.remote, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            written += 1
            if 0 <= have < size and rel in self._next_header and self._append(rel, source, target, have, size):
                continue
            data = self.storage.read_bytes(source)
            self.fetched += len(data)
            tmp = f"{target}.airflow-tfos-tmp"
            with open(tmp, "wb") as out:
                out.write(data)
            os.replace(tmp, target)
            self._next_header.pop(rel, None)
            if is_event_file(rel):
                following = next_record_header(data, 0)
                if following is not None:
                    self._next_header[rel] = following
        return written

    def _append(self, rel: str, source: str, target: str, have: int, size: int) -> bool:
        """Read the bytes ``source`` grew by and append them to ``target``; False (nothing written) if they do
        not continue its records: the file was replaced."""
        data = self.storage.read_range(source, have, size - have)
        self.fetched += len(data)
        start = self._next_header[rel]
        tail = b""
        if start < have:  # a header cut by the last sync: its first bytes are local
            with open(target, "rb") as f:
                f.seek(start)
                tail = f.read(have - start)
        following = next_record_header(tail + data[max(0, start - have) :], start)
        if following is None:
            log.info("%s no longer continues the mirrored records: fetching it whole", source)
            return False
        with open(target, "ab") as out:  # TensorBoard reads on from where it was
            out.write(data)
        self._next_header[rel] = following
        return True

    def run(self, stop: threading.Event, every: float = SYNC_SECS) -> None:
        """Sync every ``every`` seconds until ``stop`` is set; failures are logged and retried at the next round."""
        while not stop.is_set():
            try:
                self.sync()
            except Exception as exc:  # a namenode away for a while must not end TensorBoard
                log.warning("cannot mirror %s: %s", self.remote, exc)
            stop.wait(every)


def is_event_file(rel: str) -> bool:
    """Whether ``rel`` names a TensorBoard event file (a TFRecord file that only grows)."""
    return "tfevents" in posixpath.basename(rel)


#: a TFRecord header: the record's length (uint64) and the masked CRC-32C of those 8 bytes (uint32)
_HEADER = struct.Struct("<QI")


def next_record_header(chunk: bytes, start: int) -> int | None:
    """The offset of the first TFRecord header after ``chunk`` (the bytes of a file from the offset ``start``
    of one of its record headers on), having checked every header it holds whole; None if one is wrong."""
    position = 0
    while position + _HEADER.size <= len(chunk):
        header = chunk[position : position + _HEADER.size]
        length, crc = _HEADER.unpack(header)
        if masked_crc32c(header[:8]) != crc:
            return None
        position += _HEADER.size + length + 4  # the data, then its own masked CRC
    return start + position


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C (Castagnoli) of ``data``, as TensorBoard's own record writer computes it."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as tensorboards

    return tensorboards(data)


def main(argv: list[str] | None = None) -> int:
    """Mirror a remote log directory and serve it with TensorBoard until SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m airflow_tfos.runtime.node.tensorboard", description=main.__doc__)
    parser.add_argument("--logdir", required=True, help="the remote log directory (hdfs://, webhdfs://)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--sync-secs", type=float, default=SYNC_SECS)
    parser.add_argument(
        "--token-on-stdin",
        action="store_true",
        help="read the WebHDFS delegation token to authenticate with from stdin (Kerberized HDFS)",
    )
    parser.add_argument(
        "--reuse-port", action="store_true", help="bind with SO_REUSEPORT (the parent holds the port meanwhile)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.token_on_stdin:
        token = sys.stdin.read().strip()
        if not token:
            log.error("no WebHDFS delegation token came on stdin: the node that started TensorBoard went away")
            return 1
        use_delegation_token(token)  # in this process's memory only

    from tensorboard import program

    local = tempfile.mkdtemp(prefix="airflow-tfos-tensorboard-")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    mirror = LogDirMirror(args.logdir, local)
    try:
        board = program.TensorBoard()
        board.configure(
            argv=[
                "tensorboard",
                "--logdir",
                local,
                "--host",
                args.host,
                "--port",
                str(args.port),
                "--reload_interval",
                str(args.sync_secs),
                *(["--reuse_port", "true"] if args.reuse_port else []),
            ]
        )
        url = board.launch()
        log.info("TensorBoard at %s serves %s (mirrored into %s every %.0f s)", url, args.logdir, local, args.sync_secs)
        mirror.run(stop, args.sync_secs)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())


def start_tensorboard(job: NodeJob, env: dict[str, str], host: str, port: int) -> ChildProcess | None:
    if importlib.util.find_spec("tensorboard") is None:
        log.warning("tensorboard=True but the tensorboard package is not installed on this executor")
        return None

    log_dir = job.spec.log_dir or str(Path(job.working_dir) / "tensorboard")
    token = job.webhdfs_token if is_remote(log_dir) else None
    argv = tensorboard_argv(log_dir, host, port, token_on_stdin=bool(token), reuse_port=True)
    board = ChildProcess(argv, env=env, name="TensorBoard", takes_input=bool(token)).start()
    if token and not board.send(token.encode()):  # on its stdin only, as the nodes get it
        log.warning("TensorBoard exited before it got the run's WebHDFS delegation token")
    return board


def record_tensorboard(job: NodeJob, url: str | None) -> bool:
    """Write where TensorBoard serves the run to its run directory (tensorboard.json, the link the task shows)."""
    if not job.run_dir or not url:
        return False
    try:
        RunDir(job.run_dir).write_tensorboard(url, attempt=job.attempt, run_id=job.cluster_id, log_dir=job.spec.log_dir)
    except Exception as exc:  # the link is a convenience: never a reason to fail the node
        log.warning("cannot record TensorBoard's address %s in %s: %s", url, job.run_dir, exc)
        return False
    return True


def forget_tensorboard(job: NodeJob) -> None:
    try:
        RunDir(job.run_dir).clear_tensorboard()
    except Exception as exc:
        log.warning("cannot remove tensorboard.json from %s: %s", job.run_dir, exc)
