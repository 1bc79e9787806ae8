"""TieredDataset end to end: moto S3 over HTTP, a real local Ray, real tier directories."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import threading
import time
from collections import Counter

import pytest
import torch
from helpers import TierUsage, index_of, land_warm_writes, png_bytes, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.deploy.actors import actor_call
from tierload.errors import SourceChangedError
from tierload.frames.blockfile import HEADER_SIZE, decode_frame, parse_header
from tierload.frames.checksum_key import local_key
from tierload.stores.local import LocalDirStore
from tierload.wire.api import NodeCacheServiceAPI
from tierload.wire.endpoint import ENDPOINT_FILE


def indices(loader) -> list[int]:
    out: list[int] = []
    for samples, _labels in loader:
        out.extend(index_of(s) for s in samples)
    return out


def collect_raw(batch):
    return [item[0] for item in batch], torch.tensor([item[1] for item in batch])


def loader_for(dataset, batch_size=4, num_workers=0, **kwargs):
    return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collect_raw, **kwargs)


@pytest.fixture(scope="module")
def shared_dataset(module_tier_config, module_dataset):
    """``make(url, hot=..., warm=..., **kwargs)``: a TieredDataset on a deployment every test of this module
    asking for the same tier sizes shares. For tests that read their own fresh objects and assert per
    dataset (its samples, ``epoch_stats``); tests that look into the tier directories or at the node-wide
    ``cache_stats`` keep their own."""
    def make(url, hot="64MiB", warm="64MiB", **kwargs):
        return module_dataset(url, module_tier_config(hot, warm), **kwargs)
    return make


@pytest.mark.parametrize("count, drop_last", [(100, False), (101, False), (101, True)])
def test_exactly_once_per_epoch_across_two_ranks_and_two_workers(bucket, shared_dataset, count, drop_last):
    """B02/B03: every sample once per epoch over 2 ranks x 2 workers; equal length per rank."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", count, classes=3)
    seen_all = []
    for epoch in range(2):
        per_rank = []
        for rank in range(2):
            dataset = shared_dataset(f"s3://{name}/ds", rank=rank, world_size=2, batch_size=4,
                                     drop_last=drop_last, layout="files")
            dataset.set_epoch(epoch)
            loader = loader_for(dataset, num_workers=2)
            got, batches = [], 0
            for samples, _labels in loader:  # one pass gives the samples and the batch count
                got.extend(index_of(s) for s in samples)
                batches += 1
            assert len(got) == len(dataset)
            assert batches == len(loader)  # len(loader) is exact
            per_rank.append(got)
        assert len(per_rank[0]) == len(per_rank[1])
        counts = Counter(per_rank[0] + per_rank[1])
        if count % 2 == 0:
            assert counts == Counter(range(count))
        elif drop_last:
            assert len(counts) == count - 1 and set(counts.values()) == {1}
        else:
            assert set(counts) == set(range(count)) and sum(counts.values()) == count + 1
        seen_all.append(per_rank[0])
    assert seen_all[0] != seen_all[1]  # a new epoch is a new order


def test_second_epoch_reads_nothing_from_cold_when_hot_holds_everything(bucket, tier_config, make_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 60, size=2000)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(hot="1MiB", warm=None), layout="files", batch_size=4)
    for epoch in range(2):
        dataset.set_epoch(epoch)
        assert sorted(indices(loader_for(dataset, num_workers=2))) == list(range(60))
    first, second = dataset.epoch_stats(0), dataset.epoch_stats(1)
    # On failure, the split: each stream's row, and what the consumers read past the node cache.
    split = (f"epoch 0: {first}; epoch 1: {second}; consumers: {dict(dataset.consumer_stats)}; "
             f"streams: {dataset.cache_stats()['finished_streams']}")
    assert first["cold_gets"] == 60 and first["cold_bytes"] == 60 * 2000, split
    assert second["accesses"] == 60 and second["hot_hits"] == 60
    assert second["cold_bytes"] == 0 and second["cold_gets"] == 0


def test_warm_tier_serves_what_hot_cannot_hold(bucket, tier_config, make_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 40, size=1000)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(hot="8KiB", warm="1MiB"), layout="files",
                           batch_size=4)
    for epoch in range(2):
        dataset.set_epoch(epoch)
        assert sorted(indices(loader_for(dataset))) == list(range(40))
        land_warm_writes(dataset)
    second = dataset.epoch_stats(1)
    assert second["cold_bytes"] == 0
    assert second["warm_hits"] > 0 and second["hot_hits"] + second["warm_hits"] == 40


@pytest.fixture
def tier_mounts(tmp_path):
    """The hot and warm directories on their own tmpfs, so their usage can be read atomically
    (falls back to consistent directory walks where mounting is not allowed)."""
    mounted = []
    for name in ("hot", "warm"):
        (tmp_path / name).mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m,mode=0700", "tmpfs", str(tmp_path / name)],
                              capture_output=True)
        if proc.returncode == 0:
            mounted.append(tmp_path / name)
    yield len(mounted) == 2
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_tier_capacities_are_never_exceeded_under_churn(bucket, tier_config, make_dataset, tmp_path, tier_mounts):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 120, size=3000)
    stored = 3000 + HEADER_SIZE
    hot, warm = 40_000, 150_000  # 13 and 49 stored blocks: about 1/9 and 4/9 of the data set
    config = tier_config(hot=hot, warm=warm, prefetch={"depth_blocks": 8})
    usage = {tier: TierUsage(tmp_path / tier, tier_mounts) for tier in ("hot", "warm")}
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files", batch_size=4)
    peaks = {"hot": 0, "warm": 0}
    samples = {"hot": 0, "warm": 0}
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for tier in peaks:
                blocks = usage[tier].blocks_now(stored)
                if blocks is not None:
                    samples[tier] += 1
                    peaks[tier] = max(peaks[tier], blocks)
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for epoch in range(3):
            dataset.set_epoch(epoch)
            assert sorted(indices(loader_for(dataset, num_workers=2))) == list(range(120))
    finally:
        stop.set()
        watcher.join()
    stats = dataset.cache_stats()
    assert peaks["hot"] <= hot // stored and peaks["warm"] <= warm // stored
    assert peaks["hot"] >= (hot // stored) // 2 and peaks["warm"] >= (warm // stored) // 2  # really used
    assert min(samples.values()) > 20
    assert all(level["used_bytes"] <= level["capacity_bytes"] for level in stats["levels"])
    assert stats["levels"][0]["evictions"] > 0 or stats["levels"][0]["refusals"] > 0


def test_corrupted_hot_block_is_detected_and_refetched(bucket, tier_config, make_dataset, tmp_path):
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 10, size=500)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(hot="1MiB", warm=None), layout="files")
    assert sorted(indices(loader_for(dataset))) == list(range(10))
    files = sorted(p for p in (tmp_path / "hot").rglob("*")
                   if p.is_file() and ".tmp" not in p.parts and p.name != ENDPOINT_FILE
                   and not p.name.startswith(".tierload"))
    assert len(files) == 10
    victim = files[3]
    data = bytearray(victim.read_bytes())
    data[HEADER_SIZE + 100] ^= 0x5A  # flip bits inside the payload, keep the size
    victim.write_bytes(bytes(data))
    dataset.set_epoch(1)
    got = {}
    for samples, _ in loader_for(dataset):
        for sample in samples:
            got[index_of(sample)] = bytes(sample)
    assert got == {i: payloads[i] for i in range(10)}  # never the corrupt bytes
    stats = dataset.epoch_stats(1)
    assert stats["integrity_failures"] == 1 and stats["cold_gets"] == 1


def test_changed_source_object_is_never_served_from_an_old_copy(bucket, tier_config, make_dataset, tmp_path):
    """B09: after the source changes, a refreshed manifest serves the new bytes and drops old copies."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 5, size=100)
    config = tier_config(hot="1MiB", warm="1MiB")
    old = make_dataset(f"s3://{name}/ds", config, layout="files")
    assert sorted(indices(loader_for(old))) == list(range(5))
    land_warm_writes(old)
    old_key = next(b.key for b in old.manifest.blocks if b.url.endswith("obj-000002.bin"))
    assert any(p.name == old_key for p in (tmp_path / "hot").rglob("*"))
    assert any(p.name == old_key for p in (tmp_path / "warm").rglob("*"))
    fs.pipe_file(f"{name}/ds/0/obj-000002.bin", b"00000002" + b"NEW" * 10)
    fs.invalidate_cache()
    fresh = make_dataset(f"s3://{name}/ds", config, layout="files", refresh_manifest=True)
    samples = {index_of(s): bytes(s) for batch, _ in loader_for(fresh) for s in batch}
    assert samples[2] == b"00000002" + b"NEW" * 10
    assert not any(p.name == old_key for p in (tmp_path / "hot").rglob("*"))
    assert not any(p.name == old_key for p in (tmp_path / "warm").rglob("*"))


def test_stale_manifest_with_a_changed_object_fails_loudly(bucket, shared_dataset):
    """With nothing cached, a stale manifest must not mix versions: the cold read refuses."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 4, size=100)
    first = shared_dataset(f"s3://{name}/ds", hot=0, warm=None, layout="files")
    assert sorted(indices(loader_for(first))) == list(range(4))
    fs.pipe_file(f"{name}/ds/0/obj-000001.bin", b"00000001changed")
    stale = shared_dataset(f"s3://{name}/ds", hot=0, warm=None, layout="files")  # cached manifest, old ETag
    with pytest.raises(SourceChangedError):
        indices(loader_for(stale))


def test_blocks_the_hot_tier_refuses_travel_zstd_compressed(bucket, shared_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 12, size=20_000)  # zeros after the index: compresses well
    fs.pipe_file(f"{name}/noise/0/noise.bin", b"00000000" + os.urandom(20_000))
    fs.invalidate_cache()
    compressible = shared_dataset(f"s3://{name}/ds", hot=0, warm=None, layout="files")
    assert sorted(indices(loader_for(compressible))) == list(range(12))
    stats = compressible.epoch_stats(0)
    assert stats["wire_raw_bytes"] == 12 * 20_000 and stats["wire_sent_bytes"] < stats["wire_raw_bytes"] / 20
    noise = shared_dataset(f"s3://{name}/noise", hot=0, warm=None, layout="files")
    assert indices(loader_for(noise)) == [0]
    stats = noise.epoch_stats(0)
    assert stats["wire_sent_bytes"] == stats["wire_raw_bytes"] == 20_008  # raw: it does not compress


def test_peers_and_the_warm_tier_get_the_stored_frame_not_a_re_encoding(bucket, tier_config, make_dataset,
                                                                        tmp_path):
    """What a peer asks for is the hot file's frame, compressed for the wire only where that
    pays; the warm tier gets the frame encoded once in its own format; the cold checksum rides along."""
    import ray

    from tierload.deploy.actors import get_node_cache

    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 4, size=20_000)  # zeros after the index: compresses well
    for index in range(4, 8):
        fs.pipe_file(f"{name}/ds/0/obj-{index:06d}.bin", f"{index:08d}".encode() + os.urandom(20_000))
    fs.invalidate_cache()
    config = tier_config(hot="1MiB", warm="1MiB")
    config = config.model_copy(update={"warm": config.warm.model_copy(update={"compress": True})})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    assert sorted(indices(loader_for(dataset))) == list(range(8))
    cache = get_node_cache(dataset.config)
    ray.get(actor_call(cache, NodeCacheServiceAPI.sync_now))  # the warm writes of the epoch land now
    hot, warm = LocalDirStore(tmp_path / "hot"), LocalDirStore(tmp_path / "warm", tier="warm")
    assert len(hot.scan()) == 8 and len(warm.scan()) == 8
    codecs = Counter()
    secret = local_key(tmp_path / "hot", create=False)  # the deployment's checksum key
    for key in hot.scan():
        stored, in_warm = hot.read(key), warm.read(key)
        sent = ray.get(actor_call(cache, NodeCacheServiceAPI.read_block, key))
        raw, digest = decode_frame(key, stored, secret=secret)
        assert parse_header(key, stored).codec == "raw"  # the hot tier stores raw frames
        assert decode_frame(key, sent, secret=secret) == decode_frame(key, in_warm, secret=secret) == (raw, digest)
        if raw[8:] == bytes(len(raw) - 8):
            assert parse_header(key, sent).codec == parse_header(key, in_warm).codec == "zstd"
            assert sent == in_warm  # one frame: the wire and the warm tier compress alike here
        else:
            assert sent == stored and in_warm == stored  # compression does not pay: the hot file's bytes
        codecs[parse_header(key, sent).codec] += 1
    assert codecs == {"zstd": 4, "raw": 4}


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_workers_never_reuse_the_parents_connections(bucket, shared_dataset, context):
    """B05: the parent has listed S3 and holds Ray; workers of every start method read correctly."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 20, size=300)
    dataset = shared_dataset(f"s3://{name}/ds", layout="files", batch_size=5)
    loader = loader_for(dataset, batch_size=5, num_workers=2,
                        multiprocessing_context=multiprocessing.get_context(context), timeout=120)
    assert sorted(indices(loader)) == list(range(20))


def test_images_arrive_as_uint8_chw_with_their_labels(bucket, shared_dataset):
    name, fs = bucket
    for label in range(3):
        for i in range(4):
            fs.pipe_file(f"{name}/img/class{label}/{i}.png", png_bytes(label * 50 + i))
    fs.invalidate_cache()
    dataset = shared_dataset(f"s3://{name}/img", batch_size=6, transform=lambda t: t.to(torch.float32))
    assert dataset.classes == ["class0", "class1", "class2"]
    seen = []
    for images, labels in DataLoader(dataset, batch_size=6, num_workers=0):
        assert images.shape[1:] == (1, 8, 8) and images.dtype == torch.float32
        for image, label in zip(images, labels, strict=True):
            value = int(image[0, 0, 0])
            assert value // 50 == int(label)
            seen.append(value)
    assert sorted(seen) == sorted(label * 50 + i for label in range(3) for i in range(4))


def test_bad_arguments_are_typed_errors_naming_the_value(s3, ray_session, tier_config):
    from tierload.errors import BucketNotFoundError, ConfigError
    from tierload.loader.dataset import TieredDataset

    with pytest.raises(ConfigError, match="'ten gigs'"):
        TieredDataset("s3://b/x", {"hot": {"capacity_bytes": "ten gigs"}}, lazy=True)
    with pytest.raises(ConfigError, match="unknown policy 'mru'"):
        TieredDataset("s3://b/x", {"policy": {"hot": {"eviction": "mru"}}}, lazy=True)
    with pytest.raises(ConfigError, match="shuffle='yes'"):
        TieredDataset("s3://b/x", shuffle="yes", lazy=True)
    with pytest.raises(ConfigError, match="not-a-url"):
        TieredDataset("not-a-url", lazy=True)
    with pytest.raises(ConfigError, match="or file:///data/train for that local directory"):
        TieredDataset("/data/train/", lazy=True)
    with pytest.raises(BucketNotFoundError, match="missing-bucket-xyz"):
        TieredDataset("s3://missing-bucket-xyz/x", tier_config(), storage_options=s3.storage_options)


def test_each_rank_sees_its_own_epoch_counters_on_a_shared_node_cache(bucket, tier_config, make_dataset):
    """Two ranks (or jobs) read one dataset through one node cache: ``own_epoch_stats`` is each one's
    share (before, each was shown the node's totals: 2 nodes x 2 ranks reported 164-171 cold GETs for
    90 objects), and the shares add up to ``epoch_stats``, the node's totals."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/ds", 40, size=500)
    config = tier_config(warm=None)
    ranks = [make_dataset(f"s3://{name}/ds", config, rank=rank, world_size=2, batch_size=4, layout="files")
             for rank in range(2)]
    seen = [indices(loader_for(dataset, num_workers=2 if rank else 0)) for rank, dataset in enumerate(ranks)]
    assert sorted(seen[0] + seen[1]) == list(range(40))
    own = [dataset.own_epoch_stats(0) for dataset in ranks]
    node = ranks[0].epoch_stats(0)
    assert ranks[1].epoch_stats(0) == node
    assert [stats["accesses"] for stats in own] == [20, 20] and node["accesses"] == 40
    assert own[0]["cold_gets"] + own[1]["cold_gets"] == node["cold_gets"] == 40  # every object fetched once
    # Counters add up; the lead gauges are left out: a worker's stream may still be closing between the reads.
    for counter in node.keys() - {"lead_blocks", "lead_positions"}:
        assert own[0].get(counter, 0) + own[1].get(counter, 0) == node[counter], counter
