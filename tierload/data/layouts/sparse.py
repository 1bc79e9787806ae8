"""A read-only file object over a few byte ranges of a larger file.

pyarrow can decode one Parquet row group from just the footer and that row group's
column chunks; this object presents those ranges at their original offsets, so a block
(a row group) decodes without fetching the rest of the file. Reading a byte outside the
ranges raises, so a wrong range is caught instead of decoded as zeros.
"""

from __future__ import annotations

import io


class SparseFile(io.RawIOBase):
    """A seekable, read-only view of ``size`` bytes of which only ``ranges`` are present.

    Args:
        size: Size of the whole original file in bytes.
        ranges: ``{offset: bytes}`` of the parts that are present.
    """

    def __init__(self, size: int, ranges: dict[int, bytes]) -> None:
        super().__init__()
        self._size = size
        self._ranges = sorted((offset, memoryview(data)) for offset, data in ranges.items())
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def size(self) -> int:
        return self._size

    def readinto(self, buffer) -> int:
        want = min(len(buffer), self._size - self._pos)
        if want <= 0:
            return 0
        for start, data in self._ranges:
            if start <= self._pos < start + len(data):
                take = min(want, start + len(data) - self._pos)
                buffer[:take] = data[self._pos - start:self._pos - start + take]
                self._pos += take
                return take
        raise OSError(f"byte {self._pos} of the file is not in the fetched ranges")
