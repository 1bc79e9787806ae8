"""S3's range GETs through both engines (``cold.s3_engine``: obstore, the default, and
aiobotocore), on moto's server over HTTP.

Every test goes through the fault-injecting proxy, which records each GET's client (the first
word of its User-Agent: ``object_store`` for obstore's Rust client, ``aiobotocore`` for s3fs's)
and whether it was signed, and checks each SigV4 signature against the secret, so a test can
tell which engine answered and that it signed right.
"""

from __future__ import annotations

import multiprocessing
import random

import pytest
import rotating_credentials
from faulty_s3 import FaultyS3
from store_servers import refused_port
from test_cold_async import proxied, put_objects, requests_over, source_for

from tierload.errors import (
    BackendError,
    CredentialsExpiredError,
    EndpointUnreachableError,
    SourceChangedError,
    SourceNotFoundError,
)

OBSTORE = ("object_store", True)  # obstore's User-Agent, signed
AIOBOTOCORE = ("aiobotocore", True)


def only_obstore(proxy) -> bool:
    return set(proxy.faults.clients) == {OBSTORE}


def test_many_ranges_are_exact_and_go_through_obstore(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 8, 3000)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.verify_secret = s3.storage_options["secret"]  # moto itself does not check signatures
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy), max_request_bytes=700, max_in_flight=16)
        wanted = requests_over(source, payloads, random.Random(11), 300)
        tally: dict = {}
        got = source.read_ranges(wanted, tally)
        assert got == [payloads[url.removeprefix("s3://")][offset:offset + length] for url, _, offset, length in wanted]
        gets = sum(max(1, -(-length // 700)) for _, _, _, length in wanted)
        assert tally["cold_gets"] == gets == sum(proxy.faults.gets.values())
        assert only_obstore(proxy), proxy.faults.clients
        assert proxy.faults.bad_signatures == 0


def test_a_wrong_secret_is_refused_by_the_signature_check(s3, bucket):
    """The proxy's signature check can fail: obstore signs with the secret it is given."""
    name, fs = bucket
    put_objects(fs, f"{name}/ds", 1, 100)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.verify_secret = s3.storage_options["secret"]
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy))
        obj = source.list_objects()[0]
        wrong = source_for(f"s3://{name}/ds", {**proxied(s3, proxy), "secret": "not-the-secret"})
        with pytest.raises(BackendError, match="SignatureDoesNotMatch"):
            wrong.read(obj.url, obj.version, 0, obj.size)
        assert proxy.faults.bad_signatures == 1 and only_obstore(proxy)


def test_the_aiobotocore_engine_sends_every_get_through_aiobotocore(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 3, 100)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.verify_secret = s3.storage_options["secret"]  # botocore's own signatures pass the check
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy), s3_engine="aiobotocore")
        wanted = requests_over(source, payloads, random.Random(2), 10)
        assert source.read_ranges(wanted) == [payloads[u.removeprefix("s3://")][o:o + n] for u, _, o, n in wanted]
        assert proxy.faults.clients == {AIOBOTOCORE: 10}
        assert proxy.faults.bad_signatures == 0


def test_options_obstore_cannot_carry_go_through_aiobotocore(s3, bucket):
    """An option that changes every GET in a way obstore does not reproduce (here
    ``ExpectedBucketOwner``) sends that source's GETs through aiobotocore, which sends it."""
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 2, 100)
    with FaultyS3(s3.endpoint_url) as proxy:
        options = {**proxied(s3, proxy), "s3_additional_kwargs": {"ExpectedBucketOwner": "123456789012"}}
        source = source_for(f"s3://{name}/ds", options)
        obj = source.list_objects()[0]
        assert source.read(obj.url, obj.version, 0, obj.size) == payloads[obj.url.removeprefix("s3://")]
        assert proxy.faults.clients == {AIOBOTOCORE: 1}


def test_requester_pays_is_sent_by_obstore_on_every_get(s3, bucket):
    """``requester_pays`` (s3fs's option) becomes obstore's ``request_payer``: each GET carries
    ``x-amz-request-payer: requester`` and is still signed right."""
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 2, 100)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.verify_secret = s3.storage_options["secret"]
        source = source_for(f"s3://{name}/ds", {**proxied(s3, proxy), "requester_pays": True})
        objects = source.list_objects()
        got = source.read_ranges([(obj.url, obj.version, 0, obj.size) for obj in objects])
        assert got == [payloads[obj.url.removeprefix("s3://")] for obj in objects]
        assert only_obstore(proxy) and proxy.faults.bad_signatures == 0
        assert proxy.faults.request_payers == ["requester"] * len(objects)


def test_a_changed_object_and_a_missing_one_through_obstore(s3, bucket):
    name, fs = bucket
    put_objects(fs, f"{name}/ds", 2, 100)
    with FaultyS3(s3.endpoint_url) as proxy:
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy))
        obj = source.list_objects()[0]
        fs.pipe({obj.url.removeprefix("s3://"): b"changed"})
        with pytest.raises(SourceChangedError) as raised:
            source.read(obj.url, obj.version, 0, 5)
        assert raised.value.url == obj.url
        with pytest.raises(SourceNotFoundError):
            source.read(f"s3://{name}/ds/none", '"x"', 0, 1)
        assert only_obstore(proxy), proxy.faults.clients


def test_slow_down_is_retried_and_each_attempt_counted(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 2, 100)
    with FaultyS3(s3.endpoint_url) as proxy:
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy))
        obj = source.list_objects()[0]
        key = obj.url.removeprefix(f"s3://{name}/")
        proxy.faults.slow_down_once.add(key)
        tally: dict = {}
        assert source.read(obj.url, obj.version, 0, obj.size, tally) == payloads[obj.url.removeprefix("s3://")]
        assert proxy.faults.gets[key] == 2 and tally["cold_gets"] == 2 and not proxy.faults.slow_down_once
        assert only_obstore(proxy), proxy.faults.clients


def test_expired_token_refreshes_the_credentials_once_and_retries(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 2, 100)
    rotating_credentials._calls = 0  # this process's next call returns the expired key
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.expired_access_keys.add(rotating_credentials.EXPIRED)
        proxy.faults.verify_secret = "secret"  # the secret the credential providers hand out
        options = {"client_kwargs": {"endpoint_url": proxy.endpoint_url, "region_name": "us-east-1"}}
        source = source_for(f"s3://{name}/ds", options, credential_provider="rotating_credentials:rotating")
        obj = source.list_objects()[0]  # lists with the expired key: only GETs are refused
        key = obj.url.removeprefix(f"s3://{name}/")
        # The GETs' client (obstore's) takes the listing's credentials: the provider is asked once per refresh.
        tally: dict = {}
        assert source.read(obj.url, obj.version, 0, obj.size, tally) == payloads[obj.url.removeprefix("s3://")]
        assert source.credentials_generation == 1 and proxy.faults.gets[key] == 2 and tally["cold_gets"] == 2
        assert only_obstore(proxy), proxy.faults.clients

        always = source_for(f"s3://{name}/ds", options, credential_provider="rotating_credentials:always_expired")
        with pytest.raises(CredentialsExpiredError):
            always.read(obj.url, obj.version, 0, obj.size)
        assert always.credentials_generation == 1  # refreshed once, then the error reaches the caller


def test_anonymous_access_sends_unsigned_gets(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 2, 100)
    for path in payloads:
        fs.chmod(path, "public-read")
    with FaultyS3(s3.endpoint_url) as proxy:
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy), anon=True)
        versions = {obj.url: obj.version for obj in source.list_objects()}
        got = source.read_ranges([(url, version, 1, 50) for url, version in versions.items()])
        assert got == [payloads[url.removeprefix("s3://")][1:51] for url in versions]
        assert proxy.faults.clients == {("object_store", False): 2}


def _read_in_child(source, request, results) -> None:
    results.put(source.read(*request))


def test_a_child_forked_after_obstore_was_used_reads_through_aiobotocore(s3, bucket):
    """obstore's runtime threads are not in a forked child (tokio-rs/tokio#4301): a request
    there would wait forever. The child reads the same bytes through aiobotocore instead."""
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 2, 100)
    with FaultyS3(s3.endpoint_url) as proxy:
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy))
        obj = source.list_objects()[0]
        request = (obj.url, obj.version, 0, obj.size)
        assert source.read(*request) == payloads[obj.url.removeprefix("s3://")]  # the parent's session exists
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        child = context.Process(target=_read_in_child, args=(source, request, results))
        child.start()
        try:
            assert results.get(timeout=60) == payloads[obj.url.removeprefix("s3://")]
        finally:
            child.join(30)
        assert child.exitcode == 0 and proxy.faults.clients == {OBSTORE: 1, AIOBOTOCORE: 1}


def test_a_session_token_is_sent_and_signed(s3, bucket):
    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 1, 100)
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.verify_secret = s3.storage_options["secret"]
        source = source_for(f"s3://{name}/ds", {**proxied(s3, proxy), "token": "session-token"})
        obj = source.list_objects()[0]
        assert source.read(obj.url, obj.version, 0, obj.size) == payloads[obj.url.removeprefix("s3://")]
        assert proxy.faults.signed_headers == [("host", "if-match", "range", "x-amz-content-sha256", "x-amz-date",
                                                "x-amz-security-token")]
        assert proxy.faults.bad_signatures == 0 and only_obstore(proxy)


def test_an_endpoint_that_refuses_connections_is_retried_then_unreachable(s3):
    with refused_port() as port:
        options = {**s3.storage_options, "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}",
                                                           "region_name": "us-east-1"}}
        source = source_for("s3://nowhere/ds", options, max_attempts=2, outage_budget_s=0)  # no outage budget
        tally: dict = {}
        with pytest.raises(EndpointUnreachableError, match="outage_budget_s=0"):
            source.read("s3://nowhere/ds/a", '"x"', 0, 10, tally)
    assert tally["cold_gets"] == 2  # both attempts counted


def test_keys_that_need_percent_encoding_are_found_and_correctly_signed(s3, bucket):
    name, fs = bucket
    payloads = {f"{name}/odd/{key}": key.encode() * 10 for key in ("a b+c.bin", "ü/ñ=1&x;y.bin", "t~(1)!*'.bin")}
    fs.pipe(payloads)
    fs.invalidate_cache()
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.verify_secret = s3.storage_options["secret"]
        source = source_for(f"s3://{name}/odd", proxied(s3, proxy))
        objects = source.list_objects()
        assert len(objects) == 3
        got = source.read_ranges([(obj.url, obj.version, 0, obj.size) for obj in objects])
        assert got == [payloads[obj.url.removeprefix("s3://")] for obj in objects]
        assert proxy.faults.bad_signatures == 0 and only_obstore(proxy)


def test_prepare_makes_the_client_and_sends_nothing(s3, bucket):
    """ColdSource.prepare() (the node cache calls it when a dataset registers) makes the
    bucket's obstore client ahead of the first read, without a request; the read uses it."""
    from tierload.stores.cold import obstore_stores

    name, fs = bucket
    payloads = put_objects(fs, f"{name}/ds", 2, 1000)
    with FaultyS3(s3.endpoint_url) as proxy:
        source = source_for(f"s3://{name}/ds", proxied(s3, proxy))
        before = set(obstore_stores._stores)
        source.prepare()
        assert sum(proxy.faults.access_keys.values()) == 0 and not proxy.faults.gets  # nothing was sent
        made = set(obstore_stores._stores) - before
        assert len(made) == 1 and next(iter(made))[2] == name
        obj = source.list_objects()[0]
        assert source.read(obj.url, obj.version, 0, obj.size) == payloads[obj.url.removeprefix("s3://")]
        assert set(obstore_stores._stores) - before == made and only_obstore(proxy)  # the read used it


def test_prepare_leaves_an_unreachable_endpoint_to_the_first_read(s3, bucket):
    name, _ = bucket
    with refused_port() as port:
        options = {**s3.storage_options, "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}",
                                                           "region_name": "us-east-1"}}
        # No outage budget: a refused endpoint fails at once instead of being waited for 60 s.
        source = source_for(f"s3://{name}/ds", options, max_attempts=1, outage_budget_s=0)
        source.prepare()  # no request is sent, so nothing to fail
        with pytest.raises(EndpointUnreachableError):
            source.read(f"s3://{name}/ds/obj-000", '"0"', 0, 10)


def test_keys_obstore_cannot_name_exactly_are_read_through_aiobotocore(s3, bucket):
    """object_store's paths refuse ``..``, empty segments and control characters, and drop
    a leading ``/``; S3 keys may have them. Those objects' GETs go through aiobotocore, the others
    through obstore, and every byte is the right object's."""
    from tierload.stores.cold.obstore_reads import obstore_addresses

    name, fs = bucket
    odd = ["up/../x.bin", "double//x.bin", "tab\tx.bin"]  # (a "." segment: neither engine's HTTP client keeps it)
    plain = ["plain/x.bin", ".../x.bin"]
    payloads = {f"{name}/k/{key}": key.encode() * 7 for key in odd + plain}
    fs.pipe(payloads)
    fs.invalidate_cache()
    assert [obstore_addresses(f"k/{key}") for key in odd + plain] == [False] * len(odd) + [True] * len(plain)
    with FaultyS3(s3.endpoint_url) as proxy:
        source = source_for(f"s3://{name}/k", proxied(s3, proxy))
        objects = source.list_objects()
        assert len(objects) == len(payloads)
        got = source.read_ranges([(obj.url, obj.version, 0, obj.size) for obj in objects])
        assert got == [payloads[obj.url.removeprefix("s3://")] for obj in objects]
        assert proxy.faults.clients == {OBSTORE: len(plain), AIOBOTOCORE: len(odd)}
