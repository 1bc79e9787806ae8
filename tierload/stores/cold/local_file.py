"""The cold tier on local files (``file://``): listed with ``os.scandir``, read with open, ``fstat``, ``pread``.

Why not fsspec: its ``info`` and ``cat_file`` cost ~60 us of Python per call, which at 1 KiB
per object was most of a node cache's epoch 1 (issue 11's profile). The version checked is
``mtime-size``, as :func:`tierload.stores.cold.listing.list_local` writes it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from tierload.errors import SourceChangedError, SourceNotFoundError, TierloadError
from tierload.stores.cold.async_reads import check_length
from tierload.stores.cold.backend import ThreadedBackend, count_read
from tierload.stores.cold.errors import translate_error

if TYPE_CHECKING:
    from tierload.stores.cold.listing import ObjectListing
    from tierload.stores.cold.source import ColdSource


def read_local_range(path: str, url: str, version: str, offset: int, length: int, tally: dict) -> bytes:
    """``length`` bytes at ``offset`` of the file at ``path``, only if it still has ``version``.

    The version is checked on the descriptor that is read (``fstat``), so a file replaced
    between the check and the read cannot go unnoticed.

    Args:
        path: The file's path (``url`` without its protocol).
        url: The object's URL, named in errors.
        version: ``mtime-size`` as listed.
        offset, length: The byte range, in bytes.
        tally: Its ``cold_gets`` and ``cold_bytes`` are increased by the read.

    Returns:
        Exactly ``length`` bytes.

    Raises:
        SourceChangedError: The file's version differs, or the range reaches past its end
            (never short bytes).
        SourceNotFoundError, BackendError: The file cannot be opened or read.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise translate_error(exc, url) from exc
    try:
        status = os.fstat(descriptor)
        if f"{status.st_mtime}-{status.st_size}" != version:
            raise SourceChangedError("the object changed since the manifest was built; refresh the manifest",
                                     tier="cold", url=url)
        chunks, start, size = [], offset, status.st_size
        remaining = max(0, min(length, size - offset))
        while remaining:  # pread may return less than asked (large ranges)
            chunk = os.pread(descriptor, remaining, offset)
            if not chunk:
                break
            chunks.append(chunk)
            offset += len(chunk)
            remaining -= len(chunk)
    except TierloadError:
        raise
    except OSError as exc:
        raise translate_error(exc, url) from exc
    finally:
        os.close(descriptor)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if len(data) != length:  # a range the listed file cannot hold: never hand back short bytes
        if start >= size:
            raise SourceChangedError(f"bytes [{start}, {start + length}) start at or past the end of the object "
                                     f"({size} bytes): refresh the manifest", tier="cold", url=url)
        check_length(url, start, start + length, data, size)
    count_read(tally, data)
    return data


class LocalBackend(ThreadedBackend):
    """Local files: a listing by ``os.scandir``, reads checked on the descriptor they read from."""

    checks_access = False  # the node cache's Unix user is every joined job's

    def list_prefix(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                    spill_dir: str | None) -> ObjectListing:
        # loads pyarrow: imported by a process that lists, never by one that only reads
        from tierload.stores.cold.listing import list_local

        return list_local(root, "file", exclude)

    def list_empty(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                   listed: ObjectListing) -> ObjectListing:
        if not os.path.exists(root):
            # unlike an S3 prefix, a directory exists or not: a typo says so, not "empty"
            raise SourceNotFoundError(f"the directory {root!r} does not exist; check the path", tier="cold",
                                      url=source.url)
        return listed

    def url_of(self, source: ColdSource, path: str) -> str:
        return f"file://{path}"

    def read_one(self, source: ColdSource, url: str, version: str, offset: int, length: int, tally: dict) -> bytes:
        return read_local_range(source.strip(url), url, version, offset, length, tally)
