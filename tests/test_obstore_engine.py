"""The obstore engine (``cold.s3_engine: obstore``, the default) behind the range reader's interface, on moto's
S3 server over HTTP: exact bytes, If-Match on the recorded ETag, one retry layer with a budget.

Faults are injected for real by the fault-injecting proxy in front of moto.
"""

from __future__ import annotations

import random

import pytest
from cases_common import proxied
from faulty_s3 import FaultyS3
from test_cold_async import put_objects, source_for

from tierload.errors import SourceChangedError, SourceNotFoundError, TransientBackendError


def test_obstore_reads_exact_ranges_in_request_order_and_counts_gets(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/obs", 6, 5000)
    source = source_for(f"s3://{name}/obs", s3.storage_options, s3_engine="obstore", max_request_bytes=1000,
                        max_in_flight=8)
    listed = {obj.url: obj for obj in source.list_objects()}
    rng = random.Random(3)
    wanted = []
    for _ in range(60):
        obj = listed[rng.choice(sorted(listed))]
        offset = rng.randrange(obj.size)
        wanted.append((obj.url, obj.version, offset, rng.randrange(1, obj.size - offset + 1)))
    tally: dict = {}
    got = source.read_ranges(wanted, tally)
    assert got == [payloads[url.removeprefix("s3://")][offset:offset + length] for url, _, offset, length in wanted]
    assert tally["cold_gets"] == sum(-(-length // 1000) for *_, length in wanted)
    assert tally["cold_bytes"] == sum(length for *_, length in wanted)


def test_obstore_refuses_a_changed_object_by_if_match_and_names_the_s3_url(s3, bucket):
    name, fs = bucket
    put_objects(fs, f"{name}/obs-changed", 1, 300)
    source = source_for(f"s3://{name}/obs-changed", s3.storage_options, s3_engine="obstore")
    obj = source.list_objects()[0]
    fs.pipe(obj.url.removeprefix("s3://"), b"x" * 300)
    with pytest.raises(SourceChangedError) as raised:
        source.read(obj.url, obj.version, 0, obj.size)
    assert raised.value.url == obj.url
    fs.rm(obj.url.removeprefix("s3://"))
    with pytest.raises(SourceNotFoundError):
        source.read(obj.url, obj.version, 0, obj.size)


@pytest.mark.parametrize("max_attempts", [1, 3])
def test_obstore_an_always_throttled_object_costs_max_attempts_gets(s3, bucket, max_attempts):
    name, fs = bucket
    put_objects(fs, f"{name}/obs-slow", 1, 1000)
    with FaultyS3(s3.endpoint_url) as proxy:
        source = source_for(f"s3://{name}/obs-slow", proxied(s3, proxy), s3_engine="obstore",
                            max_attempts=max_attempts)
        obj = source.list_objects()[0]
        key = obj.url.removeprefix(f"s3://{name}/")
        proxy.faults.slow_down_always.add(key)
        tally: dict = {}
        with pytest.raises(TransientBackendError, match=f"cold.max_attempts={max_attempts}") as raised:
            source.read(obj.url, obj.version, 0, obj.size, tally)
        assert proxy.faults.gets[key] == max_attempts == tally["cold_gets"]
        assert raised.value.url == obj.url


def test_small_bodies_read_in_place_wait_for_a_held_back_body_and_a_cut_one_is_retried(s3, bucket):
    """A body of at most ``IN_PLACE_BODY_MAX_BYTES`` is read once its headers are in, in place (not through
    a second future). The proxy sends each answer's headers, then holds the body back 0.3 s: the small
    objects' bytes are still exact, as are the larger ones' (the other branch). A small body cut off
    halfway is a failed attempt, read again."""
    from tierload.stores.cold.obstore_reads import IN_PLACE_BODY_MAX_BYTES

    name, fs = bucket
    small = put_objects(fs, f"{name}/in-place/small", 3, 4000)
    large = put_objects(fs, f"{name}/in-place/large", 2, 20000)
    assert 4000 <= IN_PLACE_BODY_MAX_BYTES < 20000  # both branches below
    with FaultyS3(s3.endpoint_url) as proxy:
        source = source_for(f"s3://{name}/in-place", proxied(s3, proxy), s3_engine="obstore")
        objects = sorted(source.list_objects(), key=lambda obj: obj.url)
        wanted = [(obj.url, obj.version, 0, obj.size) for obj in objects]
        proxy.faults.slow_chunk_s = 0.3
        assert source.read_ranges(wanted) == [{**small, **large}[obj.url.removeprefix("s3://")] for obj in objects]
        proxy.faults.slow_chunk_s = 0.0
        cut = sorted(small)[0]
        key = cut.removeprefix(f"{name}/")
        proxy.faults.truncate_once.add(key)
        before = proxy.faults.gets[key]
        url, version = next((obj.url, obj.version) for obj in objects if obj.url == f"s3://{cut}")
        assert source.read(url, version, 0, 4000) == small[cut]
        assert proxy.faults.gets[key] - before == 2  # the cut attempt and the read that followed
