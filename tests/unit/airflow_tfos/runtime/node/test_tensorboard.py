"""The mirror of a remote log directory reads each byte of a growing event file once: the bytes a file grew by
come in one ranged read (WebHDFS ``OPEN`` with ``offset``), and a file is read whole only when it is new,
shrank, or no longer continues the records already mirrored."""

from __future__ import annotations

import os
import struct

import pytest

from airflow_tfos.runtime.node.tensorboard import LogDirMirror, masked_crc32c, next_record_header
from airflow_tfos.shared.storage import LocalStorage, storage_for

EVENTS = "train/events.out.tfevents.1700000000.host.1.v2"


def record(payload: bytes) -> bytes:
    """One TFRecord: length, masked CRC of the length, data, masked CRC of the data."""
    length = struct.pack("<Q", len(payload))
    return length + struct.pack("<I", masked_crc32c(length)) + payload + struct.pack("<I", masked_crc32c(payload))


class CountingStorage:
    """A storage that counts the bytes its reads return."""

    def __init__(self, storage):
        self.storage = storage
        self.read = 0

    def __getattr__(self, name):
        return getattr(self.storage, name)

    def read_bytes(self, path: str) -> bytes:
        data = self.storage.read_bytes(path)
        self.read += len(data)
        return data

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        data = self.storage.read_range(path, offset, length)
        self.read += len(data)
        return data


def test_masked_crc32c_is_tfrecords():
    assert masked_crc32c(b"") == 0xA282EAD8
    crc = 0xE3069283  # CRC-32C of b"123456789"
    assert masked_crc32c(b"123456789") == (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
    writer = pytest.importorskip("tensorboard.summary.writer.record_writer")
    import io

    out = io.BytesIO()
    writer.RecordWriter(out).write(b"an event")
    assert out.getvalue() == record(b"an event")


def test_next_record_header_checks_each_whole_header():
    data = record(b"a" * 10) + record(b"bb")
    assert next_record_header(data, 0) == len(data)
    assert next_record_header(data[:30], 0) == len(record(b"a" * 10))  # the second header cut: not checked yet
    assert next_record_header(data[len(record(b"a" * 10)) :], 26) == 26 + len(record(b"bb"))
    assert next_record_header(b"x" * 40, 0) is None


def test_a_growing_event_file_is_read_once_in_total_over_webhdfs(emu, tmp_path):
    remote = emu.uri("/logs/run")
    storage = storage_for(remote)
    counting = CountingStorage(storage)
    mirror = LogDirMirror(remote, str(tmp_path), storage=counting)
    local = tmp_path / "train" / os.path.basename(EVENTS)
    content, sizes = b"", []
    for step in range(8):
        content += record(b"event %d " % step * (50 + 20 * step))
        cut = len(content) - (7 if step % 2 else 0)  # every other round ends in the middle of a record
        storage.write_bytes(f"{remote}/{EVENTS}", content[:cut])
        emu.requests.clear()
        assert mirror.sync() == 1
        assert local.read_bytes() == content[:cut]
        sizes.append(cut)
        opens = [r.query for r in emu.requests if r.server == "datanode" and r.op == "OPEN"]
        assert len(opens) == 1
        if step:
            assert int(opens[0]["offset"]) == sizes[-2]  # only the new bytes
    inode = local.stat().st_ino
    storage.write_bytes(f"{remote}/{EVENTS}", content)
    assert mirror.sync() == 1 and local.read_bytes() == content and local.stat().st_ino == inode  # appended in place
    assert mirror.sync() == 0
    assert counting.read == mirror.fetched == len(content)  # not the sum of every round's size
    assert sum(sizes) > 3 * len(content)


def test_a_replaced_event_file_is_read_whole_even_when_it_grew(tmp_path):
    remote = tmp_path / "remote"
    events = remote / "train" / os.path.basename(EVENTS)
    events.parent.mkdir(parents=True)
    events.write_bytes(record(b"first run " * 5))
    counting = CountingStorage(LocalStorage())
    mirror = LogDirMirror(str(remote), str(tmp_path / "mirror"), storage=counting)
    local = tmp_path / "mirror" / "train" / os.path.basename(EVENTS)
    assert mirror.sync() == 1

    replaced = record(b"second run, other records " * 4) + record(b"x")
    events.write_bytes(replaced)  # longer, but not what was mirrored followed by more
    assert mirror.sync() == 1 and local.read_bytes() == replaced
    assert counting.read == len(record(b"first run " * 5)) + (len(replaced) - len(record(b"first run " * 5))) + len(
        replaced
    )  # the ranged read that showed the change, then the file whole

    events.write_bytes(replaced[:20])  # shrank: read whole
    assert mirror.sync() == 1 and local.read_bytes() == replaced[:20]

    other = remote / "projector_config.pbtxt"
    other.write_bytes(b"embeddings {}")
    assert mirror.sync() == 1
    other.write_bytes(b"embeddings {} embeddings {}")  # not an event file: read whole when it changes
    before = counting.read
    assert mirror.sync() == 1 and (tmp_path / "mirror" / "projector_config.pbtxt").read_bytes() == other.read_bytes()
    assert counting.read - before == len(other.read_bytes())
