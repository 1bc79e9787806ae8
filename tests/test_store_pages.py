"""Listings that span many pages, against the real emulators (issue 24 item 1: paginated listing).

A test that lists a handful of objects sees one page; a store's real page holds 1,000 (GCS) or
5,000 (Azure) keys. tests/paging_proxy.py makes the pages small instead of the listings big:
Azurite pages its own answer at the ``maxresults`` the proxy adds (the client follows Azurite's
``NextMarker``); fake-gcs-server ignores ``max-keys`` and answers in one page, so the proxy cuts
its answer into pages with ``NextContinuationToken`` as GCS's XML API does. An HTTP prefix is
"paged" by its folders: one index page per folder, three levels deep. Each listing must give
every object exactly once, with its store URL and its size.
"""

from __future__ import annotations

import datetime
import os
import uuid

from paging_proxy import PagingProxy
from store_servers import AZURITE_ACCOUNT, AZURITE_KEY

from tierload.config.loading import load_config
from tierload.stores.cold.source import ColdSource

OBJECTS = 23
PAGE_KEYS = 5  # 23 objects: 5 pages, the last one short
PAGES = -(-OBJECTS // PAGE_KEYS)


def _objects(base: str) -> dict[str, bytes]:
    """``{URL: payload}`` of the test's objects under ``base``, in two folders, each size its own."""
    return {f"{base}/ds/{index % 2}/obj-{index:03d}.bin": bytes([index]) * (10 + index) for index in range(OBJECTS)}


def _listed(url: str, storage_options: dict) -> list[tuple[str, int]]:
    source = ColdSource(url, load_config({"cold": {"storage_options": storage_options}}).cold)
    return [(obj.url, obj.size) for obj in source.list_objects()]


def test_a_gcs_listing_over_many_pages_gives_every_object_once(gcs_store):
    bucket = uuid.uuid4().hex[:10]
    gcs_store.create_bucket(bucket)
    written = _objects(f"gs://{bucket}")
    for url, data in written.items():
        gcs_store.put(bucket, url.removeprefix(f"gs://{bucket}/"), data)
    with PagingProxy(gcs_store.url, "gcs", PAGE_KEYS) as proxy:
        listed = _listed(f"gs://{bucket}/ds", {"base_url": proxy.url, "skip_signature": True})
    assert listed == sorted((url, len(data)) for url, data in written.items())
    assert proxy.listings == PAGES
    assert proxy.tokens == [None] + [str(PAGE_KEYS * page) for page in range(1, PAGES)]  # each page asked once


def test_an_azure_listing_over_many_pages_gives_every_object_once(azure_store):
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    container = uuid.uuid4().hex[:10]
    azure_store.create_container(container)
    written = _objects(f"az://{container}")
    for url, data in written.items():
        azure_store.put(container, url.removeprefix(f"az://{container}/"), data)
    sas = generate_container_sas(AZURITE_ACCOUNT, container, account_key=AZURITE_KEY,
                                 permission=ContainerSasPermissions(read=True, list=True),
                                 expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1))
    upstream = azure_store.endpoint.removesuffix(f"/{AZURITE_ACCOUNT}")
    with PagingProxy(upstream, "azure", PAGE_KEYS) as proxy:
        options = {"account_name": AZURITE_ACCOUNT, "sas_key": sas, "endpoint": f"{proxy.url}/{AZURITE_ACCOUNT}"}
        listed = _listed(f"az://{container}/ds", options)
    assert listed == sorted((url, len(data)) for url, data in written.items())
    assert proxy.listings == PAGES
    markers = proxy.tokens[1:]
    assert proxy.tokens[0] is None and len(set(markers)) == PAGES - 1 and None not in markers  # Azurite's own


def test_an_http_listing_over_many_index_pages_gives_every_object_once(http_store):
    root = uuid.uuid4().hex[:10]
    written = {}
    for index in range(OBJECTS + 13):  # 36 objects in 12 folders under 4: 17 index pages
        key = f"ds/{'abcd'[index % 4]}/{'xyz'[index // 4 % 3]}/obj-{index:03d}.bin"
        path = os.path.join(http_store.root, root, key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(bytes([index]) * (5 + index))
        written[f"{http_store.url}/{root}/{key}"] = 5 + index
    listed = _listed(f"{http_store.url}/{root}/ds", {})
    assert listed == sorted(written.items())
