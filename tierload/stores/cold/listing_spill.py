"""A listing's pages written to disk as they arrive, read back as memory-mapped columns.

At a million keys a listing's columns are ~130 MB. Held in memory as pages, then copied into
one sorted listing, they cost twice that at the peak of start-up, and the allocator keeps
what the pages freed. Spilled, each page is one record batch of an Arrow IPC file as soon as
it is parsed; the sorted listing is then written page by page into one file per buffer and
memory-mapped: the page cache holds it, and a process's memory holds only the parts it reads.

Pages that are each sorted and do not overlap (S3's pages, folders listed concurrently) are
copied in order of their first URL; any other listing is read back whole and sorted in memory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

import numpy as np
import pyarrow as pa

from tierload.arrow_values import int64_array, to_numpy
from tierload.stores.dir_trust import make_private_dirs

__all__ = ["SpilledPages"]

_STRINGS = pa.large_string()
_SCHEMA = pa.schema([("url", _STRINGS), ("size", pa.int64()), ("version", _STRINGS)])


class SpilledPages:
    """Pages of one listing, on disk, in the order they arrived.

    Args:
        directory: Where the temporary files go (a new private directory inside it, removed by
            :meth:`listing` or :meth:`discard`); ``None``: the system's temporary directory.

    Raises:
        OSError: The directory cannot be created or written.
    """

    def __init__(self, directory: str | None = None) -> None:
        if directory is not None:
            make_private_dirs(directory)  # the manifest cache's, as save_manifest makes it: owner-only
        self._dir = tempfile.mkdtemp(prefix=".tierload-listing-", dir=directory)
        self._sink = pa.OSFile(os.path.join(self._dir, "pages.arrow"), "wb")
        self._writer = pa.ipc.new_file(self._sink, _SCHEMA)
        # (first URL, last URL, sorted within) of each page written, in file order
        self._pages: list[tuple[str, str, bool]] = []

    def __len__(self) -> int:
        return len(self._pages)

    def add(self, urls: pa.Array, sizes: np.ndarray, versions: pa.Array, first: str, last: str,
            in_order: bool) -> None:
        """Write one page (columns of equal length, at least one row)."""
        self._writer.write_batch(pa.record_batch([urls.cast(_STRINGS), int64_array(sizes),
                                                  versions.cast(_STRINGS)], schema=_SCHEMA))
        self._pages.append((first, last, in_order))

    def sorted_pages(self) -> list[int] | None:
        """Page numbers in URL order when the pages are each sorted and do not overlap, else None."""
        order = sorted(range(len(self._pages)), key=lambda page: self._pages[page][0])
        ranges = [self._pages[page] for page in order]
        if all(r[2] for r in ranges) and all(a[1] < b[0] for a, b in zip(ranges[:-1], ranges[1:], strict=False)):
            return order
        return None

    def columns(self, order: list[int] | None) -> tuple[pa.Array, np.ndarray, pa.Array]:
        """``(urls, sizes, versions)``: pages ``order`` copied into mapped files, or (None) every page
        read into memory in file order. Removes the files (a mapping outlives them)."""
        self._close()
        try:
            reader = pa.ipc.open_file(pa.OSFile(os.path.join(self._dir, "pages.arrow")))
            if order is None:
                table = reader.read_all().combine_chunks()
                return (table.column("url").chunk(0), to_numpy(table.column("size").chunk(0)),
                        table.column("version").chunk(0))
            return self._mapped(reader, order)
        finally:
            self.discard()

    def _mapped(self, reader: Any, order: list[int]) -> tuple[pa.Array, np.ndarray, pa.Array]:
        urls, versions = _StringFile(self._dir, "url"), _StringFile(self._dir, "version")
        with open(os.path.join(self._dir, "size"), "wb") as sizes:
            for page in order:
                batch = reader.get_batch(page)  # one page in memory at a time
                urls.append(batch.column(0))
                versions.append(batch.column(2))
                sizes.write(to_numpy(batch.column(1)).tobytes())
        mapped_sizes = np.frombuffer(_map(os.path.join(self._dir, "size")), np.int64)
        return urls.mapped(), mapped_sizes, versions.mapped()

    def discard(self) -> None:
        """Remove the files (idempotent)."""
        self._close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _close(self) -> None:
        if not self._sink.closed:
            self._writer.close()
            self._sink.close()


class _StringFile:
    """A large_string column written as its two buffers (offsets, characters), then mapped."""

    def __init__(self, directory: str, name: str) -> None:
        self._offsets_path = os.path.join(directory, f"{name}.offsets")
        self._data_path = os.path.join(directory, f"{name}.data")
        self._offsets = open(self._offsets_path, "wb")  # noqa: SIM115 - closed by mapped()
        self._data = open(self._data_path, "wb")  # noqa: SIM115 - closed by mapped()
        self._offsets.write(np.zeros(1, np.int64).tobytes())
        self._count = 0
        self._at = 0

    def append(self, chunk: pa.Array) -> None:
        bounds = np.frombuffer(chunk.buffers()[1], np.int64)[chunk.offset:chunk.offset + len(chunk) + 1]
        low, high = int(bounds[0]), int(bounds[-1])
        if chunk.null_count:
            raise ValueError(f"a listing column holds {chunk.null_count} nulls")
        self._data.write(memoryview(chunk.buffers()[2])[low:high] if high > low else b"")
        self._offsets.write((bounds[1:] - low + self._at).tobytes())
        self._at += high - low
        self._count += len(chunk)

    def mapped(self) -> pa.Array:
        self._offsets.close()
        self._data.close()
        data = _map(self._data_path) if self._at else pa.py_buffer(b"")
        return pa.Array.from_buffers(_STRINGS, self._count, [None, _map(self._offsets_path), data])


def _map(path: str) -> pa.Buffer:
    """The whole file at ``path`` as a read-only memory-mapped buffer (valid after the file is removed)."""
    with pa.memory_map(path, "r") as mapped:
        return mapped.read_buffer()
