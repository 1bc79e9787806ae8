"""GCS's version-pinned read, verified against a server that enforces it (issue 24 item 1).

fake-gcs-server ignores read preconditions; tests/gcs_preconditions.py puts a proxy in front of
it that answers 412 as real GCS's XML API does when ``If-Match`` no longer holds for the version
the emulator serves. Through it: a read at the listed version passes on every range GET (no false
412), and an object overwritten in the emulator after tierload's listing fails the next read
with a SourceChangedError naming its ``gs://`` URL, serves no bytes and leaves no copy in any
tier; the proxy's record shows the condition rode on every range GET, with no second request.
"""

from __future__ import annotations

import uuid

import pytest
from torch.utils.data import DataLoader

from tierload.config.loading import load_config
from tierload.errors import SourceChangedError
from tierload.stores.cold.source import ColdSource
from tierload.wire.endpoint import ENDPOINT_FILE

SIZE = 5000
REQUEST_BYTES = 2048  # three range GETs per object


def _bucket(store, count: int) -> tuple[str, dict[str, bytes]]:
    """A fresh bucket with ``count`` objects of SIZE bytes under ``ds/``: ``(bucket, {name: data})``."""
    bucket = uuid.uuid4().hex[:10]
    store.create_bucket(bucket)
    written = {f"ds/0/obj-{index:06d}.bin": f"{index:08d}".encode() * (SIZE // 8) for index in range(count)}
    for name, data in written.items():
        store.put(bucket, name, data)
    return bucket, written


def _only_listings_and_reads(store, bucket: str) -> None:
    """Nothing but listings and recorded object reads reached the bucket (no JSON-API metadata GET)."""
    reads = len(store.proxy.reads_of(bucket))
    requests = store.proxy.requests_to(bucket)
    listings = [path for _method, path in requests if "list-type=" in path]
    assert len(requests) == len(listings) + reads


def _block_files(tier_dir) -> list:
    return [path for path in tier_dir.rglob("*") if path.is_file() and ".tmp" not in path.parts
            and path.name != ENDPOINT_FILE and not path.name.startswith(".tierload")]


def test_a_read_at_the_listed_version_passes_the_condition_on_every_range_get(gcs_checked_store):
    bucket, written = _bucket(gcs_checked_store, 3)
    config = load_config({"cold": {"storage_options": gcs_checked_store.storage_options,
                                   "max_request_bytes": REQUEST_BYTES}})
    source = ColdSource(f"gs://{bucket}/ds", config.cold)
    listed = source.list_objects()
    got = source.read_ranges([(obj.url, obj.version, 0, obj.size) for obj in listed], {})
    assert got == [written[name] for name in sorted(written)]
    pinned = {obj.url.removeprefix(f"gs://{bucket}/"): obj.version for obj in listed}
    reads = gcs_checked_store.proxy.reads_of(bucket)
    assert len(reads) == 3 * -(-SIZE // REQUEST_BYTES)  # one GET per range, nothing else
    assert all(read.method == "GET" and read.if_match == pinned[read.name] and read.range and read.status == 206
               for read in reads)
    _only_listings_and_reads(gcs_checked_store, bucket)


def test_an_object_overwritten_after_the_listing_fails_its_read_serves_nothing_and_leaves_no_copy(
        gcs_checked_store, tier_config, make_dataset, tmp_path):
    bucket, written = _bucket(gcs_checked_store, 1)
    options = gcs_checked_store.storage_options
    config = tier_config(hot="1MiB", warm="1MiB", cold={"storage_options": options, "max_request_bytes": REQUEST_BYTES})
    dataset = make_dataset(f"gs://{bucket}/ds", config, layout="files", storage_options=options)  # lists: pinned
    (name,) = written
    pinned = dataset.manifest.blocks[0].version
    gcs_checked_store.put(bucket, name, b"changed!" * (SIZE // 8))  # a new generation, after the listing
    served = []
    loader = DataLoader(dataset, batch_size=1, num_workers=0, collate_fn=lambda batch: [item[0] for item in batch])
    with pytest.raises(SourceChangedError) as raised:
        for batch in loader:
            served.extend(batch)
    assert served == []
    assert raised.value.url == f"gs://{bucket}/{name}"
    assert "127.0.0.1" not in str(raised.value)
    assert _block_files(tmp_path / "hot") == [] and _block_files(tmp_path / "warm") == []
    reads = gcs_checked_store.proxy.reads_of(bucket)
    # One HEAD at most, before any GET: the node cache's check of the job's right to read the
    # dataset at registration (tierload/node/access.py), not a check of the version before a read.
    heads = [read for read in reads if read.method == "HEAD"]
    gets = [read for read in reads if read.method == "GET"]
    assert len(heads) <= 1 and reads[:len(heads)] == heads
    assert gets, "the read never reached the store"
    assert all(read.if_match == pinned and read.range and read.status == 412 for read in gets), gets
    _only_listings_and_reads(gcs_checked_store, bucket)


def test_the_proxy_answers_each_precondition_as_gcs_does(gcs_checked_store):
    """The proxy itself: a wrong ETag or generation is 412 with no bytes, the right one or ``*`` is
    served, a weak tag never matches, a missing object stays 404 (the emulator's own answer)."""
    import urllib.error
    import urllib.request

    bucket, written = _bucket(gcs_checked_store, 1)
    (name,) = written
    url = f"{gcs_checked_store.url}/{bucket}/{name}"

    def status(headers: dict, path: str = url) -> int:
        """The status of a 10-byte range GET; the body checked: the bytes, or none of them."""
        try:
            with urllib.request.urlopen(urllib.request.Request(path, headers={"Range": "bytes=0-9", **headers})) as got:
                assert got.read() == written[name][:10]
                return got.status
        except urllib.error.HTTPError as refused:
            body = refused.read()
            assert written[name][:10] not in body
            if refused.code == 412:
                assert b"<Code>PreconditionFailed</Code>" in body
            return refused.code

    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD")) as head:
        etag, generation = head.headers["ETag"], head.headers["x-goog-generation"]
    assert status({"If-Match": etag}) == 206
    assert status({"If-Match": f'"other", {etag}'}) == 206
    assert status({"If-Match": "*"}) == 206
    assert status({"x-goog-if-generation-match": generation}) == 206
    assert status({"If-Match": '"other"'}) == 412
    assert status({"If-Match": f"W/{etag}"}) == 412
    assert status({"x-goog-if-generation-match": str(int(generation) + 1)}) == 412
    assert status({"If-Match": etag}, f"{gcs_checked_store.url}/{bucket}/ds/none.bin") == 404
