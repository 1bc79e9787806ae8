"""The cold tier's backends: how one kind of store is listed and read, chosen by URL scheme.

:class:`~tierload.stores.cold.source.ColdSource` is the one face of the cold tier; what differs
between stores lives behind :class:`ColdBackend`, one backend per module:

    s3, s3a      tierload.stores.cold.s3             ListObjectsV2 pages, If-Match GETs (obstore or aiobotocore)
    file, local  tierload.stores.cold.local_file     os.scandir, pread on the version-checked descriptor
    az, abfs     tierload.stores.cold.object_store   obstore: List Blobs pages, If-Match range GETs
    gs, gcs      tierload.stores.cold.object_store   obstore: XML list pages, If-Match range GETs
    http, https  tierload.stores.cold.http_store     the index page's links + HEADs, If-Match range GETs
    memory       tierload.stores.cold.memory_store   fsspec's memory store, in this process only
    (others)     tierload.stores.cold.generic        fsspec's find, HEAD + cat_file

:func:`backend_for` is the one registry (scheme -> backend, each module imported when first
needed); nothing else branches on the scheme.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import wait
from typing import TYPE_CHECKING

from tierload.stores.cold.request_rate import request_rate_for

if TYPE_CHECKING:
    from tierload.stores.cold.async_reads import RangeRequest
    from tierload.stores.cold.listing import ObjectListing
    from tierload.stores.cold.object_info import ObjectInfo
    from tierload.stores.cold.source import ColdSource

# Reads of stores without an async client (file://, ...): a few at once is all a disk needs.
READ_THREADS = 8


class ColdBackend:
    """How one kind of store is listed and read. Stateless: the client (``source.fs``), the read
    thread pool and the configuration are the :class:`ColdSource`'s, one per process.

    Attributes:
        notes_endpoint_health: Listings and HEADs count towards the endpoint's health (the outage
            budget of :mod:`tierload.stores.cold.retry`), as every S3 request does.
        checks_access: A job's right to read is the store's to say, per credentials: a node cache
            checks each job's before serving it cached blocks (:mod:`tierload.node.access`).
            False where every job of a node cache has the same rights (local files: one Unix user).
        process_local: The store lives inside one process (``memory://``): a node cache in another
            process cannot read it, so a dataset refuses it at start.
    """

    notes_endpoint_health = False
    checks_access = True
    process_local = False

    def configure(self, fs) -> None:
        """Adjust a freshly made filesystem client (e.g. one try per request: tierload retries)."""

    def needs_obstore(self, source: ColdSource) -> bool:
        """Whether ``source`` can be listed and read only through obstore, whose Rust runtime's
        threads a forked child does not have (so a process that has used obstore must not fork a
        manifest helper for it). S3 is not: a forked child reads it through aiobotocore."""
        return False

    def list_prefix(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                    spill_dir: str | None) -> ObjectListing:
        """Every object under ``root`` (the prefix without its scheme), sorted by URL.

        Raises:
            EndpointUnreachableError, BucketNotFoundError, BackendError.
        """
        raise NotImplementedError

    def list_empty(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                   listed: ObjectListing) -> ObjectListing:
        """What ``listed``, an empty listing of ``root``, means: the prefix names one object, nothing
        is there (``listed`` itself, with what it skipped), or (raised) the bucket or directory does
        not exist."""
        raise NotImplementedError

    def strip(self, source: ColdSource, url: str) -> str:
        """``url`` as this backend addresses it (fsspec's path: no scheme)."""
        return source.fs._strip_protocol(url)

    def head(self, source: ColdSource, url: str) -> ObjectInfo:
        """Current size and version of one object (one request, untranslated errors; not retried here)."""
        from tierload.stores.cold.generic import version_of
        from tierload.stores.cold.object_info import ObjectInfo

        info = source.fs.info(self.strip(source, url))
        return ObjectInfo(url, int(info.get("size") or 0), version_of(info))

    def url_of(self, source: ColdSource, path: str) -> str:
        """The URL of ``path`` (a path without scheme, as the filesystem spells it)."""
        return f"{source.protocol}://{path}"

    def read_ranges(self, source: ColdSource, requests: Sequence[RangeRequest], tally: dict) -> list[bytes]:
        """The bytes of every request, in request order; blocks until all are in.

        Raises:
            SourceChangedError, SourceNotFoundError, EndpointUnreachableError, BackendError,
            TransientBackendError: the first failure in request order.
        """
        raise NotImplementedError

    async def read_ranges_async(self, source: ColdSource, requests: Sequence[RangeRequest],
                                tally: dict) -> list[bytes]:
        """:meth:`read_ranges` awaitable from any event loop."""
        raise NotImplementedError

    def prepare(self, source: ColdSource) -> None:
        """Make this process's client now, sending no request (nothing to do for most stores)."""


class ThreadedBackend(ColdBackend):
    """A backend whose reads block (a file, a synchronous SDK): each range is read on the source's
    small thread pool, so a pack's members overlap their waits."""

    def read_one(self, source: ColdSource, url: str, version: str, offset: int, length: int, tally: dict) -> bytes:
        """``length`` bytes at ``offset`` of ``url``, only if it still has ``version``.

        Raises:
            SourceChangedError: The object's version differs from ``version``.
            SourceNotFoundError, EndpointUnreachableError, BackendError, TransientBackendError.
        """
        raise NotImplementedError

    def _read_all(self, source: ColdSource, requests: Sequence[RangeRequest], tally: dict) -> list[bytes]:
        rate = request_rate_for(source)  # cold.max_requests_per_s: each read takes a turn
        if rate is None:
            return [self.read_one(source, url, version, offset, length, tally)
                    for url, version, offset, length in requests]
        read = []
        for url, version, offset, length in requests:
            rate.wait()
            read.append(self.read_one(source, url, version, offset, length, tally))
        return read

    def read_ranges(self, source: ColdSource, requests: Sequence[RangeRequest], tally: dict) -> list[bytes]:
        if len(requests) == 1:
            return self._read_all(source, requests, tally)
        # Each thread counts into its own tally (a shared dict's += would lose counts).
        tallies: list[dict] = [{} for _ in requests]
        futures = [source.read_pool.submit(self._read_all, source, [request], own)
                   for request, own in zip(requests, tallies, strict=True)]
        try:
            return [future.result()[0] for future in futures]
        finally:
            for future in futures:
                future.cancel()
            wait(futures)
            _add_tallies(tally, tallies)

    async def read_ranges_async(self, source: ColdSource, requests: Sequence[RangeRequest],
                                tally: dict) -> list[bytes]:
        # A pack's members in a few contiguous slices, one per pool thread: the disk's waits overlap
        # (os.pread releases the GIL), and a slice costs one hand-off to the pool, not a member.
        loop, pool = asyncio.get_running_loop(), source.read_pool
        step = -(-len(requests) // READ_THREADS)
        slices = [requests[lo:lo + step] for lo in range(0, len(requests), step)]
        tallies: list[dict] = [{} for _ in slices]  # one per thread: a shared dict's += would lose counts
        try:
            parts = await asyncio.gather(*(loop.run_in_executor(pool, self._read_all, source, part, own)
                                           for part, own in zip(slices, tallies, strict=True)))
        finally:
            _add_tallies(tally, tallies)
        return [data for part in parts for data in part]


def count_read(tally: dict, data: bytes) -> None:
    """Add one GET and ``len(data)`` bytes to ``tally``'s ``cold_gets`` and ``cold_bytes``."""
    tally["cold_gets"] = tally.get("cold_gets", 0) + 1
    tally["cold_bytes"] = tally.get("cold_bytes", 0) + len(data)


def _add_tallies(total: dict, parts: list[dict]) -> None:
    for own in parts:
        for name, value in own.items():
            total[name] = total.get(name, 0) + value


def backend_for(protocol: str) -> ColdBackend:
    """The backend of a store's scheme (``s3``, ``file``, ...); fsspec's generic one for the rest."""
    if protocol in ("s3", "s3a"):
        from tierload.stores.cold.s3 import S3Backend

        return S3Backend()
    if protocol in ("file", "local"):
        from tierload.stores.cold.local_file import LocalBackend

        return LocalBackend()
    if protocol in ("az", "abfs", "abfss", "azure", "gs", "gcs"):
        from tierload.stores.cold.object_store import ObjectStoreBackend

        return ObjectStoreBackend()
    if protocol in ("http", "https"):
        from tierload.stores.cold.http_store import HttpBackend

        return HttpBackend()
    if protocol == "memory":
        from tierload.stores.cold.memory_store import MemoryBackend

        return MemoryBackend()
    from tierload.stores.cold.generic import FsspecBackend

    return FsspecBackend()
