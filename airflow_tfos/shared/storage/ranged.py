"""A read-only, seekable file over a storage's ranged reads (:meth:`Storage.read_range`).

Parquet readers open a file at its end (the footer), then jump to the column chunks they need, in many
small reads. Over WebHDFS each read would be an HTTP request (and a redirect to a datanode), so reads go
through a buffer: a read that misses it fetches at least ``readahead`` bytes from where it starts (never
past the file's end), and the reads that follow are answered from memory. No byte outside the ranges the
reader asked for (and their readahead) is transferred: the file is never copied whole.
"""

from __future__ import annotations

import io

from airflow_tfos.shared.storage.base import Storage

#: Bytes fetched at least per request. pyarrow reads a footer (64 KiB from the end), then each column chunk
#: of a row group in one read of its exact size: small reads around them (page and footer headers) are
#: served from the buffer, large ones cost one request each and fetch nothing more.
READAHEAD = 16 * 2**10


class RangedFile(io.RawIOBase):
    """The file ``path`` of ``storage``, ``size`` bytes long, read in ranges through a readahead buffer.

    :param storage: where the file is (anything with ``read_range``).
    :param path: its path or URI.
    :param size: its length in bytes (from the listing: no request is made to learn it).
    :param readahead: the least a request fetches.
    """

    def __init__(self, storage: Storage, path: str, size: int, readahead: int = READAHEAD):
        super().__init__()
        self.storage, self.path, self.size, self.readahead = storage, path, size, readahead
        self._pos = 0
        self._buffer = b""
        self._buffer_at = 0
        #: requests made and bytes they transferred
        self.requests = 0
        self.fetched = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        position = base + offset
        if position < 0:
            raise ValueError(f"cannot seek to {position} in {self.path}")
        self._pos = position
        return position

    def read(self, size: int = -1) -> bytes:
        if self._pos >= self.size:
            return b""
        end = self.size if size is None or size < 0 else min(self.size, self._pos + size)
        buffered_end = self._buffer_at + len(self._buffer)
        if not (self._buffer_at <= self._pos and end <= buffered_end):
            length = min(max(end - self._pos, self.readahead), self.size - self._pos)
            self._buffer = self.storage.read_range(self.path, self._pos, length)
            self._buffer_at = self._pos
            self.requests += 1
            self.fetched += len(self._buffer)
            end = min(end, self._pos + len(self._buffer))
        start = self._pos - self._buffer_at
        data = self._buffer[start : start + end - self._pos]
        self._pos += len(data)
        return data

    def readinto(self, target) -> int:
        data = self.read(len(target))
        target[: len(data)] = data
        return len(data)

    def readall(self) -> bytes:
        return self.read(-1)
