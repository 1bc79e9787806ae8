"""The cold tier on S3 (and S3-compatible endpoints): listed with ListObjectsV2 pages (folders
concurrently), read by range GETs in flight on s3fs's event loop (:mod:`tierload.stores.cold.async_reads`,
the fast path in :mod:`tierload.stores.cold.s3fast`, or obstore's client with ``cold.s3_engine: obstore``:
:mod:`tierload.stores.cold.obstore_reads`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fsspec.asyn import sync

from tierload.stores.cold.async_reads import RangeRequest, S3RangeReader
from tierload.stores.cold.backend import ColdBackend
from tierload.stores.cold.generic import list_empty_prefix, version_of
from tierload.stores.cold.listing import ObjectListing, list_fsspec, list_s3
from tierload.stores.cold.request_rate import request_rate_for

if TYPE_CHECKING:
    from tierload.stores.cold.source import ColdSource

log = logging.getLogger(__name__)


def reader_for(source: ColdSource) -> S3RangeReader:
    """The engine of ``source``'s range GETs, as ``cold.s3_engine`` says: the fast path or obstore."""
    if source.config.s3_engine == "obstore":
        from tierload.stores.cold.obstore_reads import ObstoreRangeReader

        return ObstoreRangeReader(source)
    return S3RangeReader(source)


class S3Backend(ColdBackend):
    """S3 through s3fs's client, one try per request (:mod:`tierload.stores.cold.retry` retries)."""

    notes_endpoint_health = True

    def configure(self, fs) -> None:
        fs.retries = 1  # one try: tierload.stores.cold.retry is the only retry layer

    def reads_through_obstore(self, source: ColdSource) -> bool:
        return source.config.s3_engine == "obstore"  # listings are s3fs's either way

    def list_prefix(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                    spill_dir: str | None) -> ObjectListing:
        fs = source.fs
        if getattr(fs, "version_aware", False):
            return list_fsspec(fs, root, source.protocol, version_of, exclude)
        return sync(fs.loop, list_s3, fs, source.protocol, root, exclude, spill_dir=spill_dir,
                    rate=request_rate_for(source))

    def list_empty(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                   listed: ObjectListing) -> ObjectListing:
        return list_empty_prefix(source, root, exclude)

    def read_ranges(self, source: ColdSource, requests: Sequence[RangeRequest], tally: dict) -> list[bytes]:
        fs = source.fs
        return sync(fs.loop, reader_for(source).read_ranges, requests, tally)

    async def read_ranges_async(self, source: ColdSource, requests: Sequence[RangeRequest],
                                tally: dict) -> list[bytes]:
        # Awaited directly when the caller runs on s3fs's loop, else handed to it.
        loop = source.fs.loop
        coroutine = reader_for(source).read_ranges(requests, tally)
        if asyncio.get_running_loop() is loop:
            return await coroutine
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))

    def prepare(self, source: ColdSource) -> None:
        try:
            fs = source.fs
            bucket = source.strip(source.url).split("/", 1)[0]
            sync(fs.loop, reader_for(source).prepare, fs, bucket)
        except Exception as exc:  # noqa: BLE001 - the first read meets the same failure and raises it typed
            log.debug("cold tier %s: client not prepared ahead (%s: %s)", source.url, type(exc).__name__, exc)
