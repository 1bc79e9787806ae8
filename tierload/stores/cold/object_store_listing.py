"""Listing Azure Blob and GCS prefixes through obstore, as columns (Arrow record batches).

The store's own paginated listing (Azure's List Blobs, GCS's XML list, :data:`PAGE_KEYS` keys a
page); each page becomes columns as it arrives, with no Python object per object. Versions are
the listed ETags, quoted as S3's are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tierload.stores.cold.listing import ObjectListing, _Page
from tierload.stores.cold.object_store import PAGE_KEYS, call_store
from tierload.stores.cold.obstore_stores import import_obstore, split_url, store_for

if TYPE_CHECKING:
    from tierload.stores.cold.source import ColdSource


def quoted_versions(etags: pa.Array, sizes: np.ndarray, modified: pa.Array | None) -> pa.Array:
    """Versions of a listing's page: each ETag quoted (``"..."``), or ``mtime-size`` where a store gives none."""
    etags = etags.cast(pa.large_string())
    bare = pc.invert(pc.starts_with(pc.fill_null(etags, '"'), '"'))
    quote, nothing = pa.scalar('"', pa.large_string()), pa.scalar("", pa.large_string())
    etags = pc.if_else(bare, pc.binary_join_element_wise(quote, etags, quote, nothing), etags)
    if etags.null_count and modified is not None:
        fallback = pc.binary_join_element_wise(pc.cast(modified, pa.large_string()),
                                               pc.cast(pa.array(sizes), pa.large_string()),
                                               pa.scalar("-", pa.large_string()))
        etags = pc.if_else(pc.is_null(etags), fallback, etags)
    return pc.fill_null(etags, "")


def list_object_store(source: ColdSource, exclude: tuple[str, ...]) -> ObjectListing:
    """Every object under ``source``'s prefix, sorted by URL, without the ``exclude`` base names.

    Raises:
        BackendError (and its kinds): the listing failed (see :func:`~tierload.stores.cold.object_store.call_store`).
    """
    obstore = import_obstore(source.protocol)
    store, prefix = store_for(source, source.url)
    url_base = pa.scalar(f"{source.protocol}://{split_url(source.url)[1]}/", pa.large_string())
    pages = []
    stream = call_store(obstore.list, store, prefix or None, chunk_size=PAGE_KEYS, return_arrow=True)
    while True:
        try:
            batch = call_store(next, stream)
        except StopIteration:
            break
        table = pa.record_batch(batch)
        if not table.num_rows:
            continue
        sizes = np.asarray(table.column("size").to_numpy(zero_copy_only=False), np.int64)
        names = table.schema.names
        urls = pc.binary_join_element_wise(url_base, table.column("path").cast(pa.large_string()),
                                       pa.scalar("", pa.large_string()))
        versions = quoted_versions(table.column("e_tag"), sizes,
                                   table.column("last_modified") if "last_modified" in names else None)
        pages.append(_Page.of(urls.cast(pa.large_string()), sizes, versions.cast(pa.large_string())))
    return ObjectListing.from_pages(pages, exclude)
