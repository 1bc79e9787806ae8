"""``cold.max_requests_per_s`` (issue 24, item 4): the requests a process sends to one store stay
under the limit, counted where they arrive (the fault-injecting proxy in front of moto), never
by timing the test itself.

Bound checked: over the span between the first and the last request that arrived, at most
``burst + rate * span`` requests (the GCRA's guarantee, :mod:`tierload.stores.cold.request_rate`)
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
    return len(times), RequestRate(rate).burst + rate * span + 1


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_turns_leave_a_burst_at_once_then_one_per_interval():
    clock = FakeClock()
    rate = RequestRate(50.0, clock=clock)  # burst: 5 (a tenth of a second's worth)
    delays = [rate.reserve() for _ in range(8)]
    assert rate.burst == 5
    assert delays[:5] == [0.0] * 5 and delays[5:] == pytest.approx([0.02, 0.04, 0.06])
    clock.now += 10.0  # an idle spell refills the burst, no more
    assert [rate.reserve() for _ in range(6)] == pytest.approx([0.0] * 5 + [0.02])
    assert RequestRate(0.5, clock=clock).burst == 1


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
