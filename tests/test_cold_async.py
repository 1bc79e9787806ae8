"""ColdSource.read_ranges: many reads in flight at once, on moto's S3 server over HTTP.

Behind the fault-injecting proxy where a test needs to see the requests themselves.
"""

from __future__ import annotations

import asyncio
import random

import pytest
from faulty_s3 import FaultyS3

from tierload.config.loading import load_config
from tierload.errors import SourceChangedError, SourceNotFoundError
from tierload.stores.cold.source import ColdSource


def proxied(s3, proxy):
    return {**s3.storage_options, "client_kwargs": {"endpoint_url": proxy.endpoint_url, "region_name": "us-east-1"}}


def put_objects(fs, prefix, count, size):
    rng = random.Random(count * size)
    payloads = {f"{prefix}/obj-{i:03d}": bytes(rng.getrandbits(8) for _ in range(size)) for i in range(count)}
    fs.pipe(payloads)
    fs.invalidate_cache()
    return payloads


def source_for(url, storage_options, **cold):
    config = load_config({"cold": {"storage_options": storage_options, **cold}})
    return ColdSource(url, config.cold)


def requests_over(source, payloads, rng, count):
    versions = {obj.url: obj.version for obj in source.list_objects()}
    urls = sorted(versions)
    wanted = []
    for _ in range(count):
        url = rng.choice(urls)
        size = len(payloads[url.removeprefix("s3://")])
        offset = rng.randrange(size)
        wanted.append((url, versions[url], offset, rng.randrange(1, size - offset + 1)))
    return wanted


def test_read_ranges_returns_exact_bytes_in_request_order_and_counts_gets(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 6, 5000)
    # 1,000-byte requests: a range of up to 5,000 bytes costs several GETs, read concurrently.
    source = source_for(f"s3://{name}/ds", s3.storage_options, max_request_bytes=1000, max_in_flight=8)
    rng = random.Random(7)
    wanted = requests_over(source, payloads, rng, 120)
    tally: dict = {}
    got = source.read_ranges(wanted, tally)
    expected = [payloads[url.removeprefix("s3://")][offset:offset + length] for url, _, offset, length in wanted]
    assert got == expected
    gets = sum(max(1, -(-length // 1000)) for _, _, _, length in wanted)
    assert tally == {"cold_gets": gets, "cold_bytes": sum(map(len, expected))}
    assert source.read_ranges([]) == []
    # read() is the same engine, one range at a time.
    url, version, offset, length = wanted[0]
    assert source.read(url, version, offset, length) == expected[0]


def test_read_ranges_from_a_coroutine_on_another_loop(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 3, 300)
    source = source_for(f"s3://{name}/ds", s3.storage_options)
    wanted = requests_over(source, payloads, random.Random(3), 20)
    tally: dict = {}
    got = asyncio.run(source.read_ranges_async(wanted, tally))
    assert got == [payloads[url.removeprefix("s3://")][offset:offset + length] for url, _, offset, length in wanted]
    assert tally["cold_gets"] == 20


def test_a_changed_object_is_source_changed_and_a_missing_one_not_found(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 4, 100)
    source = source_for(f"s3://{name}/ds", s3.storage_options)
    wanted = requests_over(source, payloads, random.Random(1), 10)
    changed = f"s3://{name}/ds/obj-002"
    old_version = next(obj.version for obj in source.list_objects() if obj.url == changed)
    fs.pipe({changed.removeprefix("s3://"): b"new content"})
    with pytest.raises(SourceChangedError) as raised:
        source.read_ranges(wanted + [(changed, old_version, 0, 5)])
    assert raised.value.url == changed
    with pytest.raises(SourceNotFoundError):
        source.read_ranges([(f"s3://{name}/ds/none", '"x"', 0, 1)])


def test_requests_really_overlap_and_stay_under_max_in_flight(s3, bucket):
    """200 reads with max_in_flight 64: the proxy sees more than 16 (the old thread count)
    GETs open at once, and never more than 64."""
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 200, 64)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.first_byte_s = 0.05  # each GET stays open long enough to overlap others
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy), max_in_flight=64)
        objects = source.list_objects()
        tally: dict = {}
        got = source.read_ranges([(obj.url, obj.version, 0, obj.size) for obj in objects], tally)
        assert got == [payloads[obj.url.removeprefix("s3://")] for obj in objects]
        assert tally["cold_gets"] == 200 and sum(proxy.faults.gets.values()) == 200
        assert 16 < proxy.faults.max_open_gets <= 64


def test_read_ranges_on_a_local_directory(tmp_path):
    payloads = {f"f{i}": bytes([i]) * (100 + i) for i in range(20)}
    for name, data in payloads.items():
        (tmp_path / name).write_bytes(data)
    source = source_for(f"file://{tmp_path}", {})
    objects = source.list_objects()
    tally: dict = {}
    got = source.read_ranges([(obj.url, obj.version, 10, 50) for obj in objects], tally)
    assert got == [payloads[obj.url.rsplit("/", 1)[-1]][10:60] for obj in objects]
    assert tally == {"cold_gets": 20, "cold_bytes": 20 * 50}
    (tmp_path / "f3").write_bytes(b"changed, and longer than before: " * 10)
    with pytest.raises(SourceChangedError):
        source.read_ranges([(obj.url, obj.version, 0, 1) for obj in objects])
    assert asyncio.run(source.read_async(objects[0].url, objects[0].version, 0, 5)) == payloads["f0"][:5]
