"""``cold.max_requests_per_s`` (issue 24, item 4): the requests a process sends to one store stay
under the limit, counted where they arrive (the fault-injecting proxy in front of moto), never
by timing the test itself.

Bound checked: over the span between the first and the last request that arrived, at most
``2 + rate * span`` requests (the limit's guarantee, :mod:`tierload.stores.cold.request_rate`)
plus one for the jitter between a request's send and its arrival.
"""

from __future__ import annotations

import pytest
from cases_common import indices, proxied
from faulty_s3 import FaultyS3
from helpers import put_indexed_objects

from tierload.config.loading import load_config
from tierload.errors import ConfigError
from tierload.stores.cold.request_rate import RequestRate
from tierload.stores.cold.source import ColdSource


def within_limit(times: list[float], rate: float) -> tuple[int, float]:
    """``(requests, their bound)`` over the span ``times`` covers."""
    span = max(times) - min(times)
    return len(times), 2 + rate * span + 1


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_turns_are_one_interval_apart_and_an_idle_spell_saves_none():
    clock = FakeClock()
    rate = RequestRate(50.0, clock=clock)
    assert [rate.reserve() for _ in range(4)] == pytest.approx([0.0, 0.02, 0.04, 0.06])
    clock.now += 0.05  # half-way through the waits: the next turn is after the last one taken
    assert rate.reserve() == pytest.approx(0.03)
    clock.now += 10.0  # an idle spell: one request at once, then the interval again (no burst)
    assert [rate.reserve() for _ in range(3)] == pytest.approx([0.0, 0.02, 0.04])
    with pytest.raises(ValueError, match="rate_per_s=0"):
        RequestRate(0)


def test_a_request_that_wakes_late_takes_a_new_turn_instead_of_leaving_with_the_others():
    clock = FakeClock()
    rate = RequestRate(10.0, clock=clock)
    rate.reserve()  # the turn at 100.0 is taken
    turn = clock.now + rate.reserve()  # 100.1
    clock.now = turn + 0.05  # woke within an interval of its turn: it sends
    assert not rate._missed(turn)
    clock.now = turn + 0.5  # held up past the next turns: it must not leave with those due now
    assert rate._missed(turn) and rate.reserve() == 0.0 and rate.reserve() == pytest.approx(0.1)


@pytest.mark.parametrize("value", [0, -3, "fast"])
def test_a_rate_that_is_not_a_positive_number_is_refused_naming_the_setting(value):
    with pytest.raises(ConfigError, match="cold.max_requests_per_s"):
        load_config({"cold": {"max_requests_per_s": value}})
    assert load_config({"cold": {"max_requests_per_s": "12.5"}}).cold.max_requests_per_s == 12.5
    assert load_config({}).cold.max_requests_per_s is None


def test_range_reads_and_heads_of_one_process_stay_under_the_limit(s3, bucket):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 30, size=100)
    rate = 40.0
    with FaultyS3(s3.endpoint_url) as proxy:
        config = load_config({"cold": {"max_requests_per_s": rate, "storage_options": proxied(s3, proxy)}}).cold
        source = ColdSource(f"s3://{name}/ds", config)
        listing = source.list_objects()
        urls, versions = listing.urls.to_pylist(), listing.versions.to_pylist()
        heads = [source.head(url) for url in urls[:5]]
        first = len(proxy.faults.request_times)
        data = source.read_ranges([(url, version, 0, 8) for url, version in zip(urls, versions, strict=True)])
        assert [int(item) for item in data] == list(range(30)) and len(heads) == 5
        assert len(proxy.faults.request_times) - first == 30  # one GET a range, all in flight at once
        count, bound = within_limit(proxy.faults.request_times, rate)  # the listing, HEADs and GETs
        assert count <= bound


def test_a_real_epoch_through_the_node_cache_stays_under_the_limit(s3, bucket, tier_config, make_dataset):
    name, fs = bucket
    objects, rate = 40, 20.0
    put_indexed_objects(fs, f"{name}/ds", objects, size=200)
    with FaultyS3(s3.endpoint_url) as proxy:
        config = tier_config(warm=None, cold={"max_requests_per_s": rate})
        dataset = make_dataset(f"s3://{name}/ds", config, layout="files", storage_options=proxied(s3, proxy))
        first = len(proxy.faults.request_times)
        assert sorted(indices(dataset, num_workers=2)) == list(range(objects))
        epoch = proxy.faults.request_times[first:]
        assert sum(proxy.faults.gets.values()) == objects  # each block once, from the node cache
        count, bound = within_limit(epoch, rate)
        assert objects <= count <= bound


def test_each_page_of_a_listing_takes_a_turn(s3, bucket):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 24, size=10, classes=12)  # 12 folders: 13 ListObjectsV2 requests
    rate = 10.0
    with FaultyS3(s3.endpoint_url) as proxy:
        config = load_config({"cold": {"max_requests_per_s": rate, "storage_options": proxied(s3, proxy)}}).cold
        assert len(ColdSource(f"s3://{name}/ds", config).list_objects()) == 24
        count, bound = within_limit(proxy.faults.request_times, rate)
        assert count == 13 and count <= bound  # 13 folders' pages, all at once without the limit
