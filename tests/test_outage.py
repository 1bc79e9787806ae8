"""S3 outages and throttling under one retry budget (issue 12 item 3; case B32).

Faults are injected for real: the fault-injecting proxy in front of moto's S3 server over
HTTP counts every request it receives, refuses connections by closing its port, answers
SlowDown or never answers. ``cold.max_attempts`` is the number of requests per read for an
object that keeps failing; ``cold.outage_budget_s`` the time a read rides out an endpoint
that fails as a whole.
"""

from __future__ import annotations

import threading
import time

import pytest
from cases_common import collect_raw, proxied
from faulty_s3 import FaultyS3
from helpers import index_of, put_indexed_objects
from test_cold_async import put_objects, source_for
from torch.utils.data import DataLoader

from tierload.errors import EndpointUnreachableError, TransientBackendError
from tierload.stores.cold.errors import error_code, translate_error
from tierload.stores.cold.obstore_reads import shaped_error
from tierload.stores.cold.retry import HEALTH, Failure, RetryBudget, classify


def _one_object(s3, bucket, proxy, **cold):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 1, 1000)
    source = source_for(f"s3://{name}/ds", proxied(s3, proxy), **cold)
    obj = source.list_objects()[0]
    return source, obj, obj.url.removeprefix(f"s3://{name}/"), payloads[obj.url.removeprefix("s3://")]


@pytest.mark.parametrize("s3_engine", ["obstore", "aiobotocore"])
@pytest.mark.parametrize("max_attempts", [1, 2, 3])
def test_b32_an_always_throttled_object_costs_max_attempts_gets(s3, bucket, max_attempts, s3_engine):
    """B32: SlowDown on every GET -> exactly max_attempts GETs at the proxy, then a transient error."""
    with FaultyS3(s3.endpoint_url) as proxy:
        source, obj, key, _ = _one_object(s3, bucket, proxy, max_attempts=max_attempts, s3_engine=s3_engine)
        proxy.faults.slow_down_always.add(key)
        tally: dict = {}
        with pytest.raises(TransientBackendError, match=f"cold.max_attempts={max_attempts}"):
            source.read(obj.url, obj.version, 0, obj.size, tally)
        assert proxy.faults.gets[key] == max_attempts == tally["cold_gets"]


@pytest.mark.parametrize("s3_engine", ["obstore", "aiobotocore"])
def test_a_get_that_never_answers_costs_max_attempts_gets(s3, bucket, s3_engine):
    """Case F03: a GET that never answers costs exactly cold.max_attempts requests at the proxy"""
    with FaultyS3(s3.endpoint_url) as proxy:
        source, obj, key, _ = _one_object(s3, bucket, proxy, max_attempts=3, read_timeout_s=0.5,
                                          s3_engine=s3_engine)
        proxy.faults.never_answer.add(key)
        with pytest.raises(TransientBackendError, match="cold.max_attempts=3"):
            source.read(obj.url, obj.version, 0, obj.size)
        assert proxy.faults.gets[key] == 3


def test_slowdown_halves_the_requests_in_flight_and_successes_restore_them(s3, bucket):
    from fsspec.asyn import sync

    from tierload.stores.cold.async_reads import _in_flight_limit  # the process's limit on s3fs's loop

    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 4, 100)
    with FaultyS3(s3.endpoint_url) as proxy:
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy), max_in_flight=8)
        objects = source.list_objects()

        async def limit_now():
            return _in_flight_limit(8).limit

        proxy.faults.slow_down_once.add(objects[0].url.removeprefix(f"s3://{name}/"))
        assert source.read(objects[0].url, objects[0].version) == payloads[objects[0].url.removeprefix("s3://")]
        assert sync(source.fs.loop, limit_now) == 5  # halved to 4 by the SlowDown, +1 by the retry's success
        for obj in objects[1:]:
            source.read(obj.url, obj.version)
        assert sync(source.fs.loop, limit_now) == 8  # one more per success, up to cold.max_in_flight


def test_a_read_during_a_short_outage_waits_for_the_endpoint(s3, bucket):
    with FaultyS3(s3.endpoint_url) as proxy:
        source, obj, key, payload = _one_object(s3, bucket, proxy, max_attempts=2)
        reopened = proxy.refuse_connections_for(5)
        assert source.read(obj.url, obj.version, 0, obj.size) == payload
        assert reopened.is_set() and proxy.faults.gets[key] == 1  # refused requests never reached it


def test_an_outage_past_the_budget_is_one_clear_error(s3, bucket):
    with FaultyS3(s3.endpoint_url) as proxy:
        source, obj, key, _ = _one_object(s3, bucket, proxy, outage_budget_s=3)
        reopened = proxy.refuse_connections_for(10)  # over 3x the budget: giving up at the budget is told apart
        with pytest.raises(EndpointUnreachableError, match=r"outage budget \(cold.outage_budget_s=3\)"):
            source.read(obj.url, obj.version, 0, obj.size)
        assert not reopened.is_set()  # given up within the budget, not when the endpoint came back
        reopened.wait(30)


def test_error_sending_request_is_the_endpoints_failure():
    """reqwest's "error sending request" (a request that could not go out on a connection: refused, or a
    kept-alive one closed under it) names no other cause in obstore's text. A full suite run on
    2026-12-02 lost F03's epoch to it (``EndpointUnreachableError: ... HTTP error: error sending request;
    gave up after 3 requests``): it was one object's failure (max_attempts), not the endpoint's."""
    from obstore.exceptions import GenericError

    shaped = shaped_error(GenericError("Generic S3 error: Error performing GET  in 235.302µs - HTTP error: "
                                       "error sending request"))
    assert isinstance(shaped, ConnectionResetError)
    error = translate_error(shaped, "s3://bucket/key")
    assert classify(error, error_code(shaped), [type(shaped).__name__]) is Failure.DOWN


def test_an_answer_to_a_request_sent_before_the_first_failure_does_not_end_the_outage_ride():
    """CI on 2026-12-03 lost F03's epoch (``gave up after 3 requests (cold.max_attempts=3)`` 3 ms into
    the outage): an answer that arrived after the port closed, to a request sent before, counted as
    the endpoint being alive. Only a request sent after a read's first failure can show that."""
    endpoint = "http://127.0.0.1:9/answered-around-an-outage"  # this test's own entry in the process's HEALTH
    sent_before_the_outage = time.monotonic()
    budget = RetryBudget(max_attempts=2, outage_budget_s=30, endpoint=endpoint)
    assert budget.after_failure(Failure.DOWN) is not None
    HEALTH.answered(endpoint, sent_before_the_outage)  # its answer arrives only now
    assert budget.after_failure(Failure.DOWN) is not None  # past max_attempts: riding the outage
    HEALTH.answered(endpoint, time.monotonic())  # sent after the first failure, and answered
    assert budget.after_failure(Failure.DOWN) is None  # the endpoint is up: this object's own failure
    final = budget.final_error(EndpointUnreachableError("refused", tier="cold", url="s3://b/k"), Failure.DOWN)
    assert "gave up after 3 requests (cold.max_attempts=2)" in final.message


def test_reads_on_kept_alive_connections_wait_out_a_short_outage(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 1, 1000)
    with FaultyS3(s3.endpoint_url) as proxy:
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy), max_attempts=2, s3_engine="obstore")
        obj = source.list_objects()[0]
        payload = payloads[obj.url.removeprefix("s3://")]
        for _ in range(4):  # connections in obstore's pool, kept alive by the proxy
            assert source.read(obj.url, obj.version, 0, obj.size) == payload
        reopened = proxy.refuse_connections_for(4)
        assert source.read(obj.url, obj.version, 0, obj.size) == payload
        assert reopened.is_set()  # it was answered only once the endpoint was back


def _epoch_through_an_outage(s3, bucket, tier_config, make_dataset, outage_s):
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 40, size=200_000)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.first_byte_s = 0.1  # fetches still to do when the outage starts
        config = tier_config(warm=None, prefetch={"concurrency": 2})
        dataset = make_dataset(f"s3://{name}/ds", config, layout="files", storage_options=proxied(s3, proxy))
        loader = DataLoader(dataset, batch_size=1, collate_fn=collect_raw)
        seen: list[tuple[int, bytes]] = []
        reopened: threading.Event | None = None
        gets_before_outage = 0
        for samples, _ in loader:
            seen.extend((index_of(s), bytes(s)) for s in samples)
            if reopened is None:
                gets_before_outage = sum(proxy.faults.gets.values())
                reopened = proxy.refuse_connections_for(outage_s)
        assert reopened is not None and reopened.is_set()
        assert gets_before_outage < 40  # blocks were still to fetch when the port closed
        assert sorted(i for i, _ in seen) == list(range(40))  # every sample exactly once
        assert dict(seen) == dict(enumerate(payloads))          # with exact bytes


def test_an_epoch_survives_a_10s_outage(s3, bucket, tier_config, make_dataset):
    """Case F03: a 10 s S3 outage mid-epoch costs time, not the epoch: every sample once, exact bytes"""
    _epoch_through_an_outage(s3, bucket, tier_config, make_dataset, 10)


@pytest.mark.slow
def test_an_epoch_survives_a_30s_outage(s3, bucket, tier_config, make_dataset):
    _epoch_through_an_outage(s3, bucket, tier_config, make_dataset, 30)
