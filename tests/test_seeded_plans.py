"""A stream's plan derived by the node cache from seeds (``SeededStreamPlan``): the plan the
training process would have sent, every sample once through it, and the plan itself sent to a
cache that cannot derive it (moto S3 over HTTP, the session's Ray, an in-process node cache)."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter

import numpy as np
import pytest
from helpers import index_of, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.config.loading import load_config
from tierload.data.blocks import Block
from tierload.data.manifest import Manifest, open_manifest
from tierload.data.manifest_arrow import save_manifest
from tierload.errors import MessageError, ServiceError
from tierload.node.node_cache import NodeCache
from tierload.node.plan_expansion import expanded_plan
from tierload.stores.cold.identity import identity_of
from tierload.stores.cold.location import ColdLocation
from tierload.wire.messages import BlockTable, DatasetRegistration, SeededStreamPlan, StreamPlan
from tierload.wire.node_client import NodeCacheClient

# Packs of a few objects each, so that block-aware shuffle has blocks of several samples.
PACKED = {"pack_target_bytes": 2000, "pack_threshold_bytes": 1000}


def _raw(batch):
    return list(batch)


def test_the_cache_derives_the_plan_the_training_process_would_send(bucket, module_tier_config, module_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 90, size=300, classes=3)
    config = module_tier_config(manifest=PACKED)
    url = f"s3://{name}/ds"
    for shuffle in ("sample", "block", "none"):
        for world, rank, drop_last in ((1, 0, False), (4, 0, True), (4, 3, False)):
            dataset = module_dataset(url, config, rank=rank, world_size=world, shuffle=shuffle, drop_last=drop_last,
                                     layout="files", window_blocks=3)
            manifest = dataset.manifest
            assert 1 < manifest.num_packs < manifest.num_samples  # several samples per block
            for epoch, start_sample, start in ((0, 0, 0), (2, 5, 3)):
                rest = dataset.rank_order(epoch)[start_sample:]
                sent = dataset._stream_plan(epoch, rest, start_sample, start, rank, world)
                assert isinstance(sent, SeededStreamPlan), (shuffle, world, rank)  # the cache maps the manifest
                derived = expanded_plan(sent, manifest.sample_block)
                explicit = dataset._plan(epoch, rest, start, rank, world)
                assert derived.seq.tolist() == explicit.seq.tolist(), (shuffle, world, rank, epoch)
                assert (derived.consume_len, derived.reuse_gap, derived.start, derived.lineage, derived.identity,
                        derived.epoch, derived.dataset_id) == (
                    explicit.consume_len, explicit.reuse_gap, explicit.start, explicit.lineage, explicit.identity,
                    explicit.epoch, explicit.dataset_id)
                assert derived.consume_len == len(rest) and len(derived.seq) > len(rest)  # the look-ahead


def test_every_sample_once_with_its_bytes_through_streams_the_cache_planned(bucket, module_tier_config,
                                                                            module_dataset):
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 61, size=300, classes=2)
    config = module_tier_config(manifest=PACKED)
    for epoch in range(2):
        seen: Counter[int] = Counter()
        for rank in range(2):
            dataset = module_dataset(f"s3://{name}/ds", config, rank=rank, world_size=2, batch_size=4,
                                     layout="files", shuffle="block")
            dataset.set_epoch(epoch)
            assert dataset._cache_maps_manifest  # the seeded plan is what opens these streams
            for batch in DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=_raw):
                for sample, label in batch:
                    index = index_of(sample)
                    assert bytes(sample) == payloads[index] and label == index % 2
                    seen[index] += 1
        assert set(seen) == set(range(61)) and sum(seen.values()) == 62  # one padded sample, drop_last=False


@pytest.fixture
def node_cache(tmp_path):
    cache = NodeCache(load_config({"hot": {"dir": str(tmp_path / "hot")}, "warm": {"url": None}}),
                      node_id="n1").start()
    yield cache
    cache.close()


def test_a_cache_that_was_sent_the_blocks_asks_for_the_plan_itself(node_cache, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    blocks = []
    for index in range(6):
        path = data / f"{index}.bin"
        path.write_bytes(os.urandom(50 + index))
        blocks.append(Block.of(f"file://{path}", "", 0, 50 + index))
    endpoint = node_cache.endpoint()
    client = NodeCacheClient(endpoint.address, endpoint.authkey)
    local = ColdLocation(f"file://{data}")
    seeded = SeededStreamPlan(dataset_id="d", samples="0123", epoch=0, seed=1, shuffle="sample", window_blocks=1,
                              drop_last=False, rank=0, world=1, identity=identity_of(local))
    with pytest.raises(ServiceError, match=r"dataset d \(samples 0123\) is not registered with this node cache by its "
                                           "manifest file"):
        client.open_stream("unknown", 0, 1, seeded)
    assert client.register_dataset(DatasetRegistration("d", local, BlockTable.of(blocks))) is True
    with pytest.raises(ServiceError, match="by its manifest file; register it, or send the StreamPlan itself"):
        client.open_stream("s", 0, 1, seeded)
    assert client.stream_stats("d") == []  # nothing opened
    plan = StreamPlan(dataset_id="d", epoch=0, seq=np.arange(6), consume_len=6, identity=identity_of(local))
    assert client.open_stream("s", 0, 1, plan) is True  # the plan itself opens it


def _seeds(**changes) -> SeededStreamPlan:
    settings = {"dataset_id": "d", "samples": "0123", "epoch": 0, "seed": 1, "shuffle": "none", "window_blocks": 2,
                "drop_last": False, "rank": 0, "world": 1}
    return SeededStreamPlan(**{**settings, **changes})


def test_a_seeded_plan_outside_the_ranks_order_is_refused_naming_the_value():
    sample_block = np.repeat(np.arange(10, dtype=np.int32), 3)  # 30 samples in 10 blocks
    with pytest.raises(MessageError, match=r"start_sample=11 outside 0\.\.10"):
        expanded_plan(_seeds(shuffle="block", rank=1, world=3, start_sample=11), sample_block)
    with pytest.raises(MessageError, match="shuffl"):
        expanded_plan(_seeds(shuffle="sideways"), sample_block)
    with pytest.raises(MessageError, match="rank=3, world_size=3"):
        expanded_plan(_seeds(rank=3, world=3), sample_block)
    whole = expanded_plan(_seeds(rank=1, world=3, start_sample=10), sample_block)
    # nothing left of this epoch; the look-ahead is the next epoch's samples 10..19 (blocks 3..6)
    assert whole.consume_len == 0 and whole.seq.tolist() == [3, 3, 4, 4, 4, 5, 5, 5, 6, 6]


def test_two_cuts_of_one_datasets_blocks_are_each_planned_over_their_own_samples(node_cache, tmp_path):
    """Two jobs whose manifests share the blocks (one dataset id) but cut other samples from them
    (token windows of two lengths, say): each job's seeds are expanded over its own sample column."""
    data = tmp_path / "data"
    data.mkdir()
    for index in range(5):
        (data / f"{index}.bin").write_bytes(os.urandom(64))
    blocks = [Block.of(f"file://{data}/{index}.bin", "", 0, 64) for index in range(5)]
    cuts = {"short": np.repeat(np.arange(5, dtype=np.int32), 4), "long": np.repeat(np.arange(5, dtype=np.int32), 2)}
    manifests = {}
    for name, sample_block in cuts.items():
        manifest = Manifest(f"file://{data}", "files", blocks, sample_block,
                            np.tile(np.arange(len(sample_block) // 5, dtype=np.int32), 5),
                            np.zeros(len(sample_block), np.int64))
        save_manifest(manifest, tmp_path / f"{name}.arrow")
        manifests[name] = open_manifest(tmp_path / f"{name}.arrow")
    short, long = manifests["short"], manifests["long"]
    assert short.dataset_id == long.dataset_id and short.samples_digest != long.samples_digest
    endpoint = node_cache.endpoint()
    client = NodeCacheClient(endpoint.address, endpoint.authkey)
    local = ColdLocation(f"file://{data}")
    for name, manifest in manifests.items():
        registration = DatasetRegistration(manifest.dataset_id, local, BlockTable.of([]),
                                           manifest_path=str(tmp_path / f"{name}.arrow"))
        assert client.register_dataset(registration) is True
        seeded = SeededStreamPlan(dataset_id=manifest.dataset_id, samples=manifest.samples_digest, epoch=0, seed=3,
                                  shuffle="sample", window_blocks=1, drop_last=False, rank=0, world=1,
                                  identity=identity_of(local))
        assert client.open_stream(name, 0, 1, seeded) is True
        # A second worker's seeds join the open stream; nothing is derived again (these name no column).
        assert client.open_stream(name, 0, 1, dataclasses.replace(seeded, samples="not-derived")) is True
    opened = {stream.stream_id: stream.consume_len for stream in client.stream_stats(short.dataset_id)}
    assert opened == {"short": 20, "long": 10}


def test_a_cache_restarted_where_the_manifest_file_is_gone_is_sent_the_plans(bucket, tier_config, make_dataset):
    """Fault: the node cache is killed for good between epochs (ray.kill) and the cached manifest file
    it mapped is gone. The cache created again cannot map it: it refuses the seeds, the job
    registers its blocks and sends each plan itself, and every sample arrives once with its bytes."""
    import ray

    from tierload.deploy.actors import node_cache_name

    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 41, size=300, classes=3)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(warm=None, manifest=PACKED), layout="files", batch_size=4)

    def epoch(number: int, num_workers: int) -> Counter[int]:
        dataset.set_epoch(number)
        seen: Counter[int] = Counter()
        for batch in DataLoader(dataset, batch_size=4, num_workers=num_workers, collate_fn=_raw):
            for sample, label in batch:
                index = index_of(sample)
                assert bytes(sample) == payloads[index] and label == index % 3
                seen[index] += 1
        return seen

    assert epoch(0, 2) == Counter(range(41)) and dataset._cache_maps_manifest
    config = dataset.config
    ray.kill(ray.get_actor(node_cache_name(config, ray.get_runtime_context().get_node_id()),
                           namespace=config.ray.namespace))
    dataset._manifest_path.unlink()  # the training process keeps its mapping; the new cache finds no file
    assert epoch(1, 2) == Counter(range(41))  # each worker: seeds refused, blocks registered, plan sent
    assert epoch(2, 0) == Counter(range(41))
    assert not dataset._cache_maps_manifest  # the main process registered its blocks too
