"""A shared node cache serves a stream's and a dataset's bytes only to the job they belong to
(issue 24, item 3's remaining holes), and a mixture reads each source with that source's identity.

Real local Ray, moto's S3 server behind the fault-injecting proxy (tests/faulty_s3.py), which
refuses one access key on the dataset's prefix (403 AccessDenied, as an IAM policy would) and
counts the requests each key signed. Job A owns an open stream; job B (refused by the store) and
job C (admitted to the dataset, but not the stream's owner) ask the same node cache for its bytes
through every call that serves them: joining A's stream, acquiring from it, opening a stream of
the dataset, reading a sample (``ds[i]``); and try to move or close A's consumers. Each gets a typed AccessDeniedError naming the URL and
no bytes; A is served. Then a mixture of two sources, each readable by its own key only: its
blocks are read from cold with each source's own key, even where another job registered a source
first with a key of its own.
"""

from __future__ import annotations

import pytest
from cases_common import proxied
from faulty_s3 import FaultyS3
from helpers import index_of, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.errors import AccessDeniedError
from tierload.loader.consumer import BlockReader, NodeLink
from tierload.loader.mixture_sources import Source
from tierload.stores.cold.identity import identity_of
from tierload.stores.cold.location import ColdLocation
from tierload.wire.api import NodeCacheAPI
from tierload.wire.messages import BlockTable, DatasetRegistration, SampleRead, StreamPlan

OBJECTS = 12


def as_key(s3, proxy, key: str) -> dict:
    """The proxied s3fs options of a job that signs with access key ``key``."""
    return proxied(s3, proxy, key=key, secret=f"secret-of-{key}")


def test_no_job_is_served_bytes_of_another_jobs_stream_or_of_a_dataset_it_was_not_checked_for(
        s3, bucket, tier_config, make_dataset):
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/own", OBJECTS, size=200)
    url = f"s3://{name}/own"
    with FaultyS3(s3.endpoint_url) as proxy:
        proxy.faults.refused_on_prefix["job-b"] = f"{name}/own"
        config = tier_config(warm=None)
        job_a = make_dataset(url, config, layout="files", storage_options=as_key(s3, proxy, "job-a"))
        job_c = make_dataset(url, config, layout="files", storage_options=as_key(s3, proxy, "job-c"))
        manifest = job_a.manifest
        identity_a, identity_c = identity_of(job_a._cold), identity_of(job_c._cold)
        job_b = make_dataset(url, config, layout="files", storage_options=as_key(s3, proxy, "job-b"), lazy=True)
        identity_b = identity_of(job_b._cold)  # B never starts: the store refuses its key
        assert len({identity_a, identity_b, identity_c}) == 3

        # A's stream, open, over every block; nothing of it fetched by anyone yet but the prefetcher.
        seq = list(range(len(manifest.blocks)))
        plan = StreamPlan(dataset_id=manifest.dataset_id, epoch=0, seq=seq, consume_len=len(seq), identity=identity_a)
        link_a = NodeLink(job_a._endpoint, identity_a)
        assert link_a.call(lambda cache: cache.open_stream("a-epoch", 0, 1, plan))

        link_b, link_c = NodeLink(job_a._endpoint, identity_b), NodeLink(job_a._endpoint, identity_c)
        nobody = NodeLink(job_a._endpoint)  # a client that presents no identity at all
        b_signed = proxy.faults.access_keys["job-b"]
        for intruder in (link_b, link_c, nobody):
            with pytest.raises(AccessDeniedError, match="belongs to another job") as refused:
                intruder.call(lambda cache: cache.acquire("a-epoch", 0, 0, None, intruder.identity))
            assert refused.value.url == url
            with pytest.raises(AccessDeniedError, match="belongs to another job"):
                intruder.call(lambda cache: cache.open_stream("a-epoch", 1, 2, identity=intruder.identity))
            # A plan of its own cannot join A's stream either (C's identity is admitted to the dataset).
            own_plan = StreamPlan(dataset_id=manifest.dataset_id, epoch=0, seq=seq, consume_len=len(seq),
                                  identity=intruder.identity)
            with pytest.raises(AccessDeniedError):
                intruder.call(lambda cache: cache.open_stream("a-epoch", 1, 2, own_plan))
            # Nor may it move A's consumers: a cursor moved ahead, or a consumer closed, would let the
            # cache drop what A needs next. (Sent as calls with an answer: the typed client sends them one-way.)
            channel = intruder.client.channel
            with pytest.raises(AccessDeniedError, match="belongs to another job"):
                channel.call(NodeCacheAPI.progress, "a-epoch", 0, len(seq), intruder.identity)
            with pytest.raises(AccessDeniedError, match="belongs to another job"):
                channel.call(NodeCacheAPI.close_consumer, "a-epoch", 0, intruder.identity)
            # The reader the training loop uses gets no bytes through the node cache.
            with pytest.raises(AccessDeniedError):
                BlockReader(intruder).read("a-epoch", 0, 0, "not-held-" + "0" * 32)  # a key no hot file has

        # B (refused by the store) and a client without identity: no stream and no sample of the dataset.
        for intruder in (link_b, nobody):
            with pytest.raises(AccessDeniedError, match="not checked") as refused:
                intruder.call(lambda cache: cache.read_sample(
                    SampleRead(manifest.dataset_id, manifest.blocks[0].key, identity=intruder.identity)))
            assert refused.value.url == url
            b_plan = StreamPlan(dataset_id=manifest.dataset_id, epoch=0, seq=seq, consume_len=len(seq),
                                identity=intruder.identity)
            with pytest.raises(AccessDeniedError, match="not checked"):
                intruder.call(lambda cache: cache.open_stream("b-epoch", 0, 1, b_plan))
        assert proxy.faults.access_keys["job-b"] == b_signed  # refused by the node cache, not by asking S3

        # C, checked for the dataset, reads a sample of it; A reads its own stream, every block exact.
        sample = link_c.call(lambda cache: cache.read_sample(
            SampleRead(manifest.dataset_id, manifest.blocks[0].key, identity=identity_c)))
        assert sample is not None
        reader = BlockReader(link_a)
        got = [reader.read("a-epoch", 0, position, block.key) for position, block in enumerate(manifest.blocks)]
        assert sorted(index_of(data) for data in got) == list(range(OBJECTS))
        assert sorted(got) == sorted(payloads)
        link_a.call(lambda cache: cache.close_consumer("a-epoch", 0, identity_a))


def _mixture_ids(dataset) -> list[tuple[int, int]]:
    loader = DataLoader(dataset, batch_size=4, num_workers=0, collate_fn=list)
    return sorted((source, index_of(sample)) for batch in loader for sample, _, source in batch)


def test_a_mixture_reads_each_source_with_its_own_identity(s3, bucket, tier_config, make_dataset, ray_session):
    from tierload.loader.dataset import TieredDataset

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/zero", OBJECTS, size=100)
    put_indexed_objects(fs, f"{name}/one", OBJECTS, size=100)
    with FaultyS3(s3.endpoint_url) as proxy:
        # Each key may read its own source only, as two teams' IAM policies would allow.
        proxy.faults.refused_on_prefix.update({"key-zero": f"{name}/one", "key-one": f"{name}/zero",
                                               "other-one": f"{name}/zero"})
        config = tier_config(warm=None)
        # Another job registers source one first, with a key of its own: the node cache's first
        # source of that dataset is the other job's.
        first = make_dataset(f"s3://{name}/one", config, layout="files", storage_options=as_key(s3, proxy, "other-one"))
        first._link.call(lambda cache: cache.invalidate([block.key for block in first.manifest.blocks]))
        other_signed = proxy.faults.access_keys["other-one"]

        mixture = TieredDataset([Source(f"s3://{name}/zero", layout="files",
                                        storage_options=as_key(s3, proxy, "key-zero")),
                                 Source(f"s3://{name}/one", layout="files",
                                        storage_options=as_key(s3, proxy, "key-one"))], config)
        try:
            assert _mixture_ids(mixture) == [(s, i) for s in (0, 1) for i in range(OBJECTS)]
            assert sum(proxy.faults.refused.values()) == 0  # no read went with the wrong source's key
            assert proxy.faults.access_keys["other-one"] == other_signed  # nor with the other job's
            assert proxy.faults.gets and proxy.faults.access_keys["key-one"] >= OBJECTS  # one's blocks: its key

            # The mixture admits a job only as each source admitted it: a part named with an identity
            # that never registered it is refused (no bytes, nothing registered).
            joined = mixture.manifest
            stranger = identity_of(ColdLocation(f"s3://{name}/one", {"key": "stranger", "secret": "x"}))
            parts = tuple((part.dataset_id, identity) for part, identity in
                          zip(mixture._sources.parts, (identity_of(mixture._sources.colds[0]), stranger), strict=True))
            forged = DatasetRegistration(joined.dataset_id, mixture._sources.colds[0], BlockTable.of([]), parts=parts)
            with pytest.raises(AccessDeniedError, match="not checked"):
                mixture._link.call(lambda cache: cache.register_dataset(forged))
        finally:
            from tierload.deploy.runtime import stop_actors

            stop_actors(mixture.config)
