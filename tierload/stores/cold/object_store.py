"""The cold tier on Azure Blob and Google Cloud Storage, through obstore (Rust ``object_store``).

Listing: the store's own paginated listing (Azure's List Blobs, GCS's XML list, 1,000 keys a
page), each page turned into columns as it arrives (Arrow record batches: no Python object per
object). Versions are the listed ETags (quoted, as S3's are). Reads: :class:`ObstoreRangeReader`,
range GETs with ``If-Match`` on that ETag, ``cold.max_in_flight`` of them in flight per process,
retried by tierload's one retry layer. No fsspec client (adlfs, gcsfs) is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fsspec.asyn import get_loop, sync

from tierload.errors import SourceNotFoundError
from tierload.stores.cold.backend import ColdBackend
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.obstore_reads import ObstoreRangeReader, quoted, shaped_error
from tierload.stores.cold.obstore_stores import import_obstore, split_url, store_for

if TYPE_CHECKING:
    from tierload.stores.cold.async_reads import RangeRequest
    from tierload.stores.cold.listing import ObjectListing
    from tierload.stores.cold.source import ColdSource

# Keys a listing asks for per page (the stores' own maximum).
PAGE_KEYS = 1000


def call_store(call: Any, *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` (an obstore function), its error shaped for ``translate_error``."""
    try:
        return call(*args, **kwargs)
    except Exception as exc:
        shaped = shaped_error(exc)
        if shaped is exc:
            raise
        raise shaped from exc


def head_through_obstore(source: ColdSource, url: str) -> ObjectInfo:
    """One object's size and version (its ETag quoted, as listings give it) by one obstore HEAD.

    Raises:
        The store's errors, shaped for ``translate_error`` (:func:`call_store`); not retried here.
    """
    obstore = import_obstore(source.protocol)
    store, path = store_for(source, url)
    meta = call_store(obstore.head, store, path)
    etag = meta.get("e_tag")
    version = quoted(etag) if etag else f"{meta.get('last_modified')}-{meta['size']}"
    return ObjectInfo(url, int(meta["size"]), version)


class ObjectStoreBackend(ColdBackend):
    """Azure Blob (``az://container/prefix``) and GCS (``gs://bucket/prefix``) through obstore."""

    def needs_obstore(self, source: ColdSource) -> bool:
        return True

    def strip(self, source: ColdSource, url: str) -> str:
        return url.partition("://")[2]

    def list_prefix(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                    spill_dir: str | None) -> ObjectListing:
        from tierload.stores.cold.object_store_listing import (
            list_object_store,  # loads pyarrow: a process that lists imports it, one that only reads does not
        )

        return list_object_store(source, exclude)

    def list_empty(self, source: ColdSource, root: str, exclude: tuple[str, ...],
                   listed: ObjectListing) -> ObjectListing:
        if not split_url(source.url)[2]:
            return listed
        try:  # a prefix that names one object lists as that object
            one = source.head(source.url)
        except SourceNotFoundError:
            return listed
        if one.url.rsplit("/", 1)[-1] in exclude:
            return listed
        return type(listed).of([one])

    def head(self, source: ColdSource, url: str) -> ObjectInfo:
        return head_through_obstore(source, url)

    def read_ranges(self, source: ColdSource, requests: Sequence[RangeRequest], tally: dict) -> list[bytes]:
        # obstore's futures run on its own runtime: any asyncio loop awaits them; fsspec's I/O loop
        # is one that every process already has.
        return sync(get_loop(), ObstoreRangeReader(source).read_ranges, requests, tally)

    async def read_ranges_async(self, source: ColdSource, requests: Sequence[RangeRequest],
                                tally: dict) -> list[bytes]:
        return await ObstoreRangeReader(source).read_ranges(requests, tally)

    def prepare(self, source: ColdSource) -> None:
        store_for(source, source.url)

