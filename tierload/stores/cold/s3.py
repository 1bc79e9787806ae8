"""The cold tier on S3 (and S3-compatible endpoints): listed with ListObjectsV2 pages through
s3fs (folders concurrently), read by range GETs in flight on s3fs's event loop, each sent by
obstore's client (``cold.s3_engine: obstore``, the default: :mod:`tierload.stores.cold.obstore_reads`)
or by s3fs's aiobotocore client (``cold.s3_engine: aiobotocore``, or options obstore cannot
carry: :mod:`tierload.stores.cold.s3_obstore_config`). docs/cold-engines.md has the measurement
that chose obstore."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fsspec.asyn import get_loop, sync

from tierload.stores.cold.async_reads import RangeRequest, S3RangeReader
from tierload.stores.cold.backend import ColdBackend
from tierload.stores.cold.generic import list_empty_prefix, version_of
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.object_store import head_through_obstore
from tierload.stores.cold.obstore_reads import ObstoreRangeReader, obstore_addresses
from tierload.stores.cold.obstore_stores import forked_after_clients, split_url
from tierload.stores.cold.request_rate import request_rate_for
from tierload.stores.cold.s3_obstore_config import aiobotocore_reason

if TYPE_CHECKING:
    from tierload.stores.cold.listing import ObjectListing
    from tierload.stores.cold.source import ColdSource

log = logging.getLogger(__name__)


def reads_through_obstore(source: ColdSource) -> bool:
    """Whether ``source``'s range GETs go through obstore: ``cold.s3_engine: obstore``, options it
    carries, and a process obstore can run in (not one forked after its parent had used it).
    Otherwise through aiobotocore, logged once per process and source: the same bytes, more CPU."""
    if source.config.s3_engine != "obstore":
        return False
    why = aiobotocore_reason(source.storage_options)
    why = f"obstore does not carry {why}" if why else None
    if why is None and forked_after_clients():
        why = "a process forked after its parent had used obstore (its runtime's threads are not here)"
    if why is not None:
        if source.url not in _told:
            _told.add(source.url)
            log.info("S3 GETs of %s go through aiobotocore, not obstore: %s", source.url, why)
        return False
    return True


_told: set[str] = set()


def reader_for(source: ColdSource) -> S3RangeReader:
    """The engine of ``source``'s range GETs (:func:`reads_through_obstore`)."""
    if reads_through_obstore(source):
        return ObstoreRangeReader(source)
    return S3RangeReader(source)


class S3Backend(ColdBackend):
    """S3: listed through s3fs's client, read and HEADed through obstore's or s3fs's
    (:func:`reader_for`); one try per request (:mod:`tierload.stores.cold.retry` retries)."""

    notes_endpoint_health = True

    def configure(self, fs) -> None:
        fs.retries = 1  # one try: tierload.stores.cold.retry is the only retry layer

    def list_prefix(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                    spill_dir: str | None) -> ObjectListing:
        # loads pyarrow: imported by a process that lists, never by one that only reads
        from tierload.stores.cold.listing import list_fsspec, list_s3

        fs = source.fs
        if getattr(fs, "version_aware", False):
            return list_fsspec(fs, root, source.protocol, version_of, exclude)
        return sync(fs.loop, list_s3, fs, source.protocol, root, exclude, spill_dir=spill_dir,
                    rate=request_rate_for(source))

    def list_empty(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                   listed: ObjectListing) -> ObjectListing:
        return list_empty_prefix(source, root, exclude)

    def head(self, source: ColdSource, url: str) -> ObjectInfo:
        # Through obstore where the reads go: a node cache that only checks a job's access (one
        # HEAD per job) then makes no s3fs client. Importing s3fs, aiobotocore and aiohttp and making
        # the client cost each node cache ~0.35 CPU-s (measured 2026-12-02).
        if reads_through_obstore(source) and obstore_addresses(split_url(url)[2]):
            return head_through_obstore(source, url)
        return super().head(source, url)

    def read_ranges(self, source: ColdSource, requests: Sequence[RangeRequest], tally: dict) -> list[bytes]:
        return sync(_loop_of(source), reader_for(source).read_ranges, requests, tally)

    async def read_ranges_async(self, source: ColdSource, requests: Sequence[RangeRequest],
                                tally: dict) -> list[bytes]:
        # Awaited directly when the caller runs on the reads' loop, else handed to it.
        loop = _loop_of(source)
        coroutine = reader_for(source).read_ranges(requests, tally)
        if asyncio.get_running_loop() is loop:
            return await coroutine
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))

    def prepare(self, source: ColdSource) -> None:
        try:
            bucket = split_url(source.url)[1]
            sync(_loop_of(source), reader_for(source).prepare, bucket)
        except Exception as exc:  # noqa: BLE001 - the first read meets the same failure and raises it typed
            log.debug("cold tier %s: client not prepared ahead (%s: %s)", source.url, type(exc).__name__, exc)


def _loop_of(source: ColdSource) -> asyncio.AbstractEventLoop:
    """The event loop ``source``'s reads run on: fsspec's I/O loop, which is s3fs's too (one loop per
    process). Through obstore no s3fs client is made for it (a reading process that never lists
    holds no aiobotocore client)."""
    if reads_through_obstore(source):
        return get_loop()
    return source.fs.loop
