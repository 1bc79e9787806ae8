"""Every job reads with its own identity (issue 24, item 3), on one shared node cache.

Real local Ray, moto's S3 server behind the fault-injecting proxy (tests/faulty_s3.py), which
refuses one access key on the dataset's prefix (403 AccessDenied, as an IAM policy would) and
counts the requests each key signed: job A reads and caches the dataset; job B, whose key the
store refuses, finds the manifest A cached and the blocks A cached on the same node cache, and
still gets a typed AccessDeniedError naming the URL and no bytes; a stream asked for B's identity
is refused; job A goes on; job C, with a key of its own that may read, is checked once and its
cold reads are signed with its key, not A's.
"""

from __future__ import annotations

import pytest
from cases_common import indices, proxied
from faulty_s3 import FaultyS3
from helpers import put_indexed_objects

from tierload.errors import AccessDeniedError, BackendError
from tierload.stores.cold.identity import identity_of
from tierload.stores.cold.location import ColdLocation
from tierload.wire.messages import StreamPlan

OBJECTS = 24


def as_key(s3, proxy, key: str) -> dict:
    """The proxied s3fs options of a job that signs with access key ``key``."""
    return proxied(s3, proxy, key=key, secret=f"secret-of-{key}")


def test_a_refused_job_gets_a_typed_error_and_no_bytes_while_the_others_go_on(s3, bucket, tier_config, make_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", OBJECTS, size=300)
    url = f"s3://{name}/ds"
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.refused_on_prefix["job-b"] = f"{name}/ds"
        config = tier_config(warm=None)  # one node cache, its hot tier only: A's copies are the only ones

        job_a = make_dataset(url, config, layout="files", storage_options=as_key(s3, proxy, "job-a"))
        assert sorted(indices(job_a)) == list(range(OBJECTS))
        assert proxy.faults.access_keys["job-a"] >= OBJECTS  # A listed and read with its own key

        # B's manifest is A's cached file (no listing), its blocks are in the hot tier: only the node
        # cache's check with B's own key stands between B and them.
        signed_before = sum(proxy.faults.access_keys.values())
        job_b = make_dataset(url, config, layout="files", storage_options=as_key(s3, proxy, "job-b"), lazy=True)
        with pytest.raises(AccessDeniedError, match="node cache serves it no block") as refused:
            job_b.start()
        assert refused.value.url == url and url in str(refused.value)
        assert isinstance(refused.value, BackendError) and isinstance(refused.value, PermissionError)
        assert proxy.faults.refused["job-b"] == proxy.faults.access_keys["job-b"] >= 1  # B's every request refused
        assert sum(proxy.faults.access_keys.values()) - signed_before == proxy.faults.access_keys["job-b"]
        assert "job-b" not in str(refused.value) and "secret-of" not in str(refused.value)

        # Even a client that skips the registration gets no stream for B's identity.
        plan = StreamPlan(dataset_id=job_a.manifest.dataset_id, epoch=0, seq=[0], consume_len=1,
                          identity=identity_of(job_b._cold))
        with pytest.raises(AccessDeniedError, match="not checked"):
            job_a._link.call(lambda cache: cache.open_stream("intruder", 0, 1, plan))

        # A goes on, from the hot tier.
        job_a.set_epoch(1)
        assert sorted(indices(job_a)) == list(range(OBJECTS))

        # C may read: checked once (one HEAD), then its cold reads are signed with its key.
        job_c = make_dataset(url, config, layout="files", storage_options=as_key(s3, proxy, "job-c"))
        assert proxy.faults.access_keys["job-c"] == 1
        job_c._link.call(lambda cache: cache.invalidate([block.key for block in job_c.manifest.blocks]))
        gets_by_a = proxy.faults.access_keys["job-a"]
        assert sorted(indices(job_c)) == list(range(OBJECTS))
        assert proxy.faults.access_keys["job-c"] >= 1 + OBJECTS and proxy.faults.access_keys["job-a"] == gets_by_a


def test_the_identity_is_a_hash_of_the_credentials_and_options_never_the_credentials():
    a = ColdLocation("s3://b/x", {"key": "AKIA-a", "secret": "s3cr3t"})
    assert identity_of(a) == identity_of(ColdLocation("s3://b/other", {"key": "AKIA-a", "secret": "s3cr3t"}))
    assert identity_of(a) != identity_of(ColdLocation("s3://b/x", {"key": "AKIA-a", "secret": "other"}))
    assert identity_of(a) != identity_of(ColdLocation("s3://b/x", {"key": "AKIA-a", "secret": "s3cr3t",
                                                                   "requester_pays": True}))
    assert identity_of(a) != identity_of(ColdLocation("s3://b/x", {"key": "AKIA-a", "secret": "s3cr3t"},
                                                      (("profile", "team-b"),)))
    assert "AKIA" not in identity_of(a) and "s3cr3t" not in identity_of(a) and len(identity_of(a)) == 32
