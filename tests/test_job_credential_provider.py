"""A job's ``cold.credential_provider`` travels with its cold location (issue 24, item 3): on a node
cache started by another job, with another provider, the job's cold reads are signed with the
credentials its own provider returns, and its access check too.

Real local Ray, moto's S3 server behind the fault-injecting proxy (tests/faulty_s3.py), which counts
the requests each access key signed; the providers are tests/job_credentials.py.
"""

from __future__ import annotations

from cases_common import indices, proxied
from faulty_s3 import FaultyS3
from helpers import put_indexed_objects
from job_credentials import KEY_A, KEY_B

from tierload.stores.cold.identity import identity_of

OBJECTS = 10


def test_a_joining_job_reads_with_its_own_credential_provider_not_the_node_caches(
        s3, bucket, tier_config, make_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/prov", OBJECTS, size=100)
    url = f"s3://{name}/prov"
    with FaultyS3(s3.endpoint_url) as proxy:
        owner = make_dataset(url, tier_config(warm=None, cold={"credential_provider": "job_credentials:team_a"}),
                             layout="files", storage_options=proxied(s3, proxy))
        assert sorted(indices(owner)) == list(range(OBJECTS))
        assert proxy.faults.access_keys[KEY_A] >= OBJECTS and proxy.faults.access_keys[KEY_B] == 0

        # B joins A's node cache (same tiers; its cold section may differ) with a provider of its own.
        joiner = make_dataset(url, tier_config(warm=None, cold={"credential_provider": "job_credentials:team_b"}),
                              layout="files", storage_options=proxied(s3, proxy))
        assert identity_of(joiner._cold) != identity_of(owner._cold)
        assert proxy.faults.access_keys[KEY_B] >= 1  # its access check, signed by its provider's key
        joiner._link.call(lambda cache: cache.invalidate([block.key for block in joiner.manifest.blocks]))
        signed_by_a = proxy.faults.access_keys[KEY_A]
        assert sorted(indices(joiner)) == list(range(OBJECTS))
        assert proxy.faults.access_keys[KEY_B] >= 1 + OBJECTS  # every cold read: B's key
        assert proxy.faults.access_keys[KEY_A] == signed_by_a  # none with the node cache's own provider
