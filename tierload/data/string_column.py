"""A column of strings as two flat arrays, Arrow's large_string layout, read without pyarrow.

A mapped manifest's keys, URLs and versions are Arrow ``large_string`` columns: an int64 offsets
buffer (n + 1,) and a UTF-8 data buffer. :class:`StringColumn` reads a string out of those two
buffers with numpy alone, so a training process that maps a manifest (its block keys are all it
reads) never imports pyarrow (~25 MB of its RSS, measured at 1.28 M keys: issue 25). A process
that needs Arrow's operations on the column (a pack's members gathered for a fetch, a listing
filtered by the planner) asks for :meth:`StringColumn.to_arrow`, the same buffers without a copy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa


class StringColumn:
    """Strings ``i`` = ``data[offsets[i]:offsets[i + 1]]`` decoded as UTF-8 (Arrow's large_string).

    Args:
        offsets: int64 (n + 1,), non-decreasing: where each string starts in ``data``, and the end.
        data: uint8 (bytes,): every string's UTF-8 bytes, end to end.

    Both are usually read-only views of a memory-mapped file, so processes that map (or fork
    from) it share the pages. Nothing is copied until a string is read.

    Raises:
        ValueError: ``offsets`` is empty, not int64, or ends past ``data``.
    """

    def __init__(self, offsets: np.ndarray, data: np.ndarray) -> None:
        if offsets.dtype != np.int64 or offsets.ndim != 1 or len(offsets) == 0:
            raise ValueError(f"string offsets must be a non-empty 1-D int64 array, not {offsets.dtype} "
                             f"of shape {offsets.shape}")
        if int(offsets[-1]) > len(data):
            raise ValueError(f"string offsets end at byte {int(offsets[-1])}, past the {len(data)} bytes of data")
        self.offsets = offsets
        self.data = data

    @classmethod
    def of_arrow(cls, array: Any) -> "StringColumn":
        """The column over a pyarrow ``large_string`` array's own buffers (no copy).

        Raises:
            ValueError: ``array`` is not large_string or holds nulls.
        """
        if str(array.type) != "large_string" or array.null_count:
            raise ValueError(f"a string column must be large_string without nulls, not {array.type} "
                             f"with {array.null_count} nulls")
        _, offsets, data = array.buffers()
        count = len(array)
        offsets = np.frombuffer(offsets, np.int64)[array.offset:array.offset + count + 1]
        if data is None:  # an empty or all-empty array has no data buffer
            return cls(offsets, np.zeros(0, np.uint8))
        return cls(offsets, np.frombuffer(data, np.uint8))

    @classmethod
    def of(cls, values: list[str]) -> "StringColumn":
        """A column holding ``values`` (in memory; for tests and small columns)."""
        encoded = [value.encode() for value in values]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(value) for value in encoded], out=offsets[1:])
        return cls(offsets, np.frombuffer(b"".join(encoded), np.uint8))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> str:
        """String ``index`` (negative counts from the end).

        Raises:
            IndexError: ``index`` is outside the column.
        """
        count = len(self)
        at = int(index)
        if at < 0:
            at += count
        if not 0 <= at < count:
            raise IndexError(f"string index {index} outside 0..{count - 1}")
        return self.data[int(self.offsets[at]):int(self.offsets[at + 1])].tobytes().decode()

    def window(self, lo: int, hi: int) -> list[str]:
        """Strings ``lo:hi`` as Python strings (one decode of their bytes, then a split)."""
        hi = min(hi, len(self))
        if lo >= hi:
            return []
        bounds = self.offsets[lo:hi + 1]
        text = self.data[int(bounds[0]):int(bounds[-1])].tobytes()
        edges = (bounds - bounds[0]).tolist()
        return [text[a:b].decode() for a, b in zip(edges[:-1], edges[1:], strict=True)]

    def __iter__(self) -> Iterator[str]:
        for lo in range(0, len(self), _ITER_WINDOW):
            yield from self.window(lo, lo + _ITER_WINDOW)

    def to_list(self) -> list[str]:
        """Every string, as a Python list."""
        return self.window(0, len(self))

    def joined_bytes(self) -> memoryview:
        """Every string's bytes end to end (a view, no copy): what a streaming hash of the
        concatenated strings reads."""
        return self.data[int(self.offsets[0]):int(self.offsets[-1])].data

    def to_arrow(self) -> pa.Array:
        """The column as a pyarrow ``large_string`` array over the same memory (no copy).

        Imports pyarrow: only a process that runs Arrow operations on the strings calls it.
        """
        import pyarrow as pa

        return pa.Array.from_buffers(pa.large_string(), len(self),
                                     [None, pa.py_buffer(self.offsets), pa.py_buffer(self.data)])


# Strings decoded at once when iterating (bounds the transient Python strings of one window).
_ITER_WINDOW = 4096
