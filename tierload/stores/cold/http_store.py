"""The cold tier on a plain HTTP(S) server that honours ``Range`` (nginx, Apache, a CDN, ``python -m http.server``).

HTTP has no listing API: the prefix's index pages are walked with fsspec's HTTP file system
(the links of each page, folders followed), and each object found is then asked for its size
and ETag with a HEAD, :data:`HEADS_IN_FLIGHT` at once. Reads are obstore's (the same engine as
Azure and GCS: :class:`~tierload.stores.cold.obstore_reads.ObstoreRangeReader`), a range GET
with ``If-Match`` on the ETag, so a file replaced on the server is refused by the server itself
(412). A server that sends no ETag cannot pin a version: its objects are versioned
``last_modified-size`` and read unconditionally (logged once per listing).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import numpy as np
from fsspec.asyn import get_loop, sync

from tierload.stores.cold.object_store import ObjectStoreBackend
from tierload.stores.cold.obstore_exit import guard_running_loop
from tierload.stores.cold.obstore_reads import quoted, shaped_error
from tierload.stores.cold.obstore_stores import import_obstore, store_for

if TYPE_CHECKING:
    from tierload.stores.cold.listing import ObjectListing
    from tierload.stores.cold.source import ColdSource

log = logging.getLogger(__name__)

# HEADs in flight while a listing asks each object's size and ETag.
HEADS_IN_FLIGHT = 64


def _version(meta: dict) -> str:
    etag = meta.get("e_tag")
    return quoted(etag) if etag else f"{meta.get('last_modified')}-{meta['size']}"


class HttpBackend(ObjectStoreBackend):
    """``http(s)://host/prefix``: listed by its index pages and a HEAD per object, read by obstore."""

    def strip(self, source: ColdSource, url: str) -> str:
        return url  # an HTTP URL is its own path (as fsspec's HTTP file system spells it)

    def list_prefix(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                    spill_dir: str | None) -> ObjectListing:
        # loads pyarrow: imported by a process that lists, never by one that only reads
        from tierload.stores.cold.listing import ObjectListing, _Page

        found = sorted(source.fs.find(root.rstrip("/") + "/", withdirs=False))
        urls = [url for url in found if url.startswith(root.rstrip("/") + "/")]
        if not urls:
            return ObjectListing.of([])
        metas = sync(get_loop(), self._heads, source, urls)
        versions = [_version(meta) for meta in metas]
        if not any(meta.get("e_tag") for meta in metas):
            log.warning("the HTTP server of %s sends no ETag: its objects cannot be pinned to a version, and a "
                        "file replaced during an epoch would go unnoticed", source.url)
        sizes = np.array([int(meta["size"]) for meta in metas], np.int64)
        return ObjectListing.from_pages([_Page(urls, sizes.tolist(), versions)], exclude)

    async def _heads(self, source: ColdSource, urls: list[str]) -> list[dict]:
        obstore = import_obstore(source.protocol)
        gate = asyncio.Semaphore(HEADS_IN_FLIGHT)
        guard_running_loop()  # the answers are delivered before the interpreter may finalize

        async def head(url: str) -> dict:
            store, path = store_for(source, url)
            async with gate:
                try:
                    return await obstore.head_async(store, path)
                except Exception as exc:
                    shaped = shaped_error(exc)
                    if shaped is exc:
                        raise
                    raise shaped from exc

        return list(await asyncio.gather(*(head(url) for url in urls)))
