"""Packs: small objects grouped into one tier block each, read back exactly.

Real things only: moto's S3 server over HTTP, a local directory as a ``file://`` cold tier,
a real local Ray and real tier directories.
"""

from __future__ import annotations

import os

import pytest
import torch
from helpers import index_of, put_indexed_objects
from torch.utils.data import DataLoader

from tierload.config.models import ManifestConfig
from tierload.data.manifest_build import build_manifest
from tierload.data.member_spans import PackIndex
from tierload.data.order import worker_positions
from tierload.data.packs import group_objects
from tierload.errors import SourceChangedError
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.source import ColdSource

PACKS = {"pack_threshold_bytes": "2KiB", "pack_target_bytes": "8KiB"}


def _collect(batch):
    return [item[0] for item in batch], torch.tensor([item[1] for item in batch])


def _samples(dataset, num_workers=0, batch_size=4) -> dict[int, bytes]:
    """``{index: bytes}`` of every sample the dataset yields; fails on a sample seen twice."""
    got: dict[int, bytes] = {}
    for samples, _ in DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=_collect):
        for sample in samples:
            index = index_of(sample)
            assert index not in got, f"sample {index} yielded twice"
            got[index] = bytes(sample)
    return got


def _info(size: int, name: str = "x") -> ObjectInfo:
    return ObjectInfo(f"file:///d/{name}", size, "v")


def test_grouping_packs_small_neighbours_and_leaves_large_objects_alone():
    sizes = [100, 100, 5000, 100, 0, 100, 100, 100]
    runs = group_objects([_info(s) for s in sizes], threshold_bytes=1000, target_bytes=250)
    assert [list(r) for r in runs] == [[0, 1], [2], [3, 4, 5], [6, 7]]
    assert [list(r) for r in group_objects([_info(s) for s in sizes], 1000, 0)] == [[i] for i in range(8)]


def test_pack_index_locates_every_member_inside_its_block(s3, bucket):
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 30, size=700)
    manifest = build_manifest(ColdSource(f"s3://{name}/ds", _cold(s3)), ManifestConfig(**PACKS), layout="files")
    assert manifest.num_packs >= 3 and len(manifest.blocks) < 30
    index = PackIndex.of(manifest.blocks)
    for sample in range(manifest.num_samples):
        block = int(manifest.sample_block[sample])
        first, starts, ends = index.span(block)
        position = int(manifest.sample_index[sample])
        assert first + position == sample
        assert ends[position] - starts[position] == len(payloads[sample])
    assert all(b.length == sum(b.members.sizes) for b in manifest.blocks if b.members is not None)


def _cold(s3):
    from tierload.config.models import ColdConfig

    return ColdConfig(storage_options=s3.storage_options)


def _put_mixed(fs, prefix: str) -> dict[int, bytes]:
    """61 objects: small ones (one of them empty) around two large ones, which close packs."""
    payloads = {}
    for index in range(61):
        size = 3000 if index in (20, 41) else 500 + 37 * index
        payloads[index] = f"{index:08d}".encode() + os.urandom(size)
        fs.pipe_file(f"{prefix}/{index % 3}/obj-{index:06d}.bin", payloads[index])
    fs.pipe_file(f"{prefix}/1/obj-000030-empty.bin", b"")  # zero-byte, inside a pack
    fs.invalidate_cache()
    return payloads


def test_packs_round_trip_exactly_over_s3_across_ranks_and_workers(bucket, module_tier_config, module_dataset):
    """Every sample's bytes equal the source's, with packs straddling the rank and worker splits."""
    name, fs = bucket
    payloads = _put_mixed(fs, f"{name}/ds")
    config = module_tier_config(manifest=PACKS)
    empties = 0
    got: dict[int, bytes] = {}
    for rank in range(2):
        dataset = module_dataset(f"s3://{name}/ds", config, rank=rank, world_size=2, batch_size=4, layout="files",
                               shuffle="none")
        manifest = dataset.manifest
        assert manifest.num_packs >= 4 and len(manifest.blocks) < manifest.num_samples
        for samples, _ in DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=_collect):
            for sample in samples:
                if len(sample) == 0:
                    empties += 1
                    continue
                got[index_of(sample)] = bytes(sample)
    half = -(-manifest.num_samples // 2)
    assert manifest.sample_block[half - 1] == manifest.sample_block[half]  # one pack serves both ranks
    mine = dataset.rank_order(0)  # the last rank's slice, split between its 2 workers as EpochReader splits it
    per_worker = [{int(manifest.sample_block[mine[p]]) for p in worker_positions(len(mine), worker_id=w, num_workers=2,
                                                                               chunk=4)} for w in range(2)]
    assert per_worker[0] & per_worker[1]  # and packs whose samples both DataLoader workers of a rank read
    assert any(b.members is not None and 0 in b.members.sizes[1:-1] for b in manifest.blocks)
    assert empties == 1 and got == payloads


def test_packs_round_trip_exactly_over_file_urls(ray_session, module_tier_config, module_dataset, tmp_path):
    source = tmp_path / "src"
    payloads = {}
    for index in range(40):
        folder = source / str(index % 2)
        folder.mkdir(parents=True, exist_ok=True)
        payloads[index] = f"{index:08d}".encode() + os.urandom(300 + 50 * index)
        (folder / f"obj-{index:06d}.bin").write_bytes(payloads[index])
    dataset = module_dataset(f"file://{source}", module_tier_config(manifest=PACKS), layout="files", storage_options={})
    assert dataset.manifest.num_packs >= 3
    for epoch in range(2):  # cold, then hot
        dataset.set_epoch(epoch)
        assert _samples(dataset, num_workers=2) == payloads
    assert dataset.epoch_stats(1)["cold_gets"] == 0


def test_a_changed_member_fails_its_pack_until_the_manifest_is_refreshed(bucket, module_tier_config, module_dataset):
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 24, size=600)
    config = module_tier_config(hot=0, warm=None, manifest=PACKS)
    first = module_dataset(f"s3://{name}/ds", config, layout="files")
    assert first.manifest.num_packs >= 2
    assert _samples(first) == dict(enumerate(payloads))
    fs.pipe_file(f"{name}/ds/0/obj-000005.bin", b"00000005changed")
    fs.invalidate_cache()
    stale = module_dataset(f"s3://{name}/ds", config, layout="files")  # cached manifest, old ETag
    with pytest.raises(SourceChangedError):
        _samples(stale)
    fresh = module_dataset(f"s3://{name}/ds", config, layout="files", refresh_manifest=True)
    assert {b.key for b in fresh.manifest.blocks} != {b.key for b in first.manifest.blocks}
    assert _samples(fresh) == {**dict(enumerate(payloads)), 5: b"00000005changed"}


def test_imagefolder_packs_decode_every_image_with_its_class(bucket, module_tier_config, module_dataset):
    from helpers import png_bytes

    name, fs = bucket
    for label in ("cat", "dog"):
        for i in range(12):
            fs.pipe_file(f"{name}/pets/{label}/{i:02d}.png", png_bytes(i * 10 + (0 if label == "cat" else 1)))
    fs.invalidate_cache()
    dataset = module_dataset(f"s3://{name}/pets", module_tier_config(manifest={"pack_target_bytes": "1KiB"}),
                             shuffle="none")
    assert dataset.manifest.layout == "imagefolder" and dataset.manifest.num_packs >= 2
    seen = set()
    for image, label in dataset:
        value = int(image[0, 0, 0])
        assert image.shape == (1, 8, 8) and label == value % 10  # cat: 0, dog: 1
        seen.add((label, value // 10))
    assert seen == {(label, i) for label in (0, 1) for i in range(12)}


def test_the_cached_manifest_is_an_arrow_file_mapped_in_place(tmp_path):
    """Arrow IPC round trip: same blocks, packs and samples; arrays are views of the mapped file."""
    import pickle

    from tierload.data.layouts.objects import plan_objects
    from tierload.data.manifest import Manifest, open_manifest
    from tierload.data.manifest_arrow import save_manifest

    objects = [ObjectInfo(f"s3://b/d/{i % 3}/o{i:05d}", 0 if i == 7 else 100 + i, f'"e{i}"') for i in range(3000)]
    objects.insert(1500, ObjectInfo("s3://b/d/big", 5000, '"big"'))
    plan = plan_objects("s3://b/d", objects, extensions=None, skip_empty=False, pack_threshold_bytes=1000,
                        pack_target_bytes=20_000)
    built = Manifest("s3://b/d", "files", plan.blocks, plan.sample_block, plan.sample_index, plan.labels,
                     plan.classes)
    save_manifest(built, tmp_path / "m.arrow")
    opened = open_manifest(tmp_path / "m.arrow")
    assert opened.blocks == built.blocks and opened.dataset_id == built.dataset_id
    assert opened.num_packs == built.num_packs >= 10 and opened.classes == built.classes
    for name in ("sample_block", "sample_index", "labels"):
        array = getattr(opened, name)
        assert (array == getattr(built, name)).all() and not array.flags.writeable  # a view of the mapping
    members = next(b.members for b in opened.blocks if b.members is not None)
    column_bytes = sum(b.members.urls.nbytes for b in opened.blocks[:1] if b.members is not None)
    assert len(pickle.dumps(members)) < 4 * column_bytes  # a slice pickles compactly, not the whole column
    assert pickle.loads(pickle.dumps(members)) == members


def test_a_node_cache_maps_the_manifest_file_named_in_a_registration(tmp_path):
    from tierload.data.layouts.objects import plan_objects
    from tierload.data.manifest import Manifest
    from tierload.data.manifest_arrow import save_manifest
    from tierload.node.node_cache import _mapped_manifest

    objects = [ObjectInfo(f"s3://b/d/o{i:04d}", 100, f'"e{i}"') for i in range(500)]
    plan = plan_objects("s3://b/d", objects, extensions=None, skip_empty=False, pack_threshold_bytes=1000,
                        pack_target_bytes=10_000)
    manifest = Manifest("s3://b/d", "files", plan.blocks, plan.sample_block, plan.sample_index, plan.labels)
    save_manifest(manifest, tmp_path / "m.arrow")
    mapped = _mapped_manifest(str(tmp_path / "m.arrow"), manifest.dataset_id)
    assert mapped is not None and mapped.blocks == manifest.blocks
    assert mapped.sample_block.tolist() == manifest.sample_block.tolist()  # what seeded plans are derived over
    assert _mapped_manifest(str(tmp_path / "m.arrow"), "another-dataset") is None  # the blocks are sent instead
    assert _mapped_manifest(str(tmp_path / "missing.arrow"), manifest.dataset_id) is None


def test_packs_are_never_larger_than_a_sixteenth_of_the_hot_tier():
    from tierload.config.loading import load_config
    from tierload.data.manifest_settings import PACKS_PER_HOT_TIER, manifest_settings

    roomy = load_config({"hot": {"capacity_bytes": "1GiB"}, "manifest": {"pack_target_bytes": "8MiB"}})
    assert manifest_settings(roomy) is roomy.manifest
    small = load_config({"hot": {"capacity_bytes": "64KiB"}, "manifest": {"pack_target_bytes": "8MiB"}})
    settings = manifest_settings(small)
    assert settings.pack_target_bytes == 64 * 1024 // PACKS_PER_HOT_TIER
    assert settings.pack_threshold_bytes == small.manifest.pack_threshold_bytes
    off = load_config({"hot": {"capacity_bytes": "64KiB"}, "manifest": {"pack_target_bytes": 0}})
    assert manifest_settings(off).pack_target_bytes == 0  # packing off stays off
    no_hot = load_config({"hot": {"capacity_bytes": 0}, "manifest": {"pack_target_bytes": "8MiB"}})
    assert manifest_settings(no_hot) is no_hot.manifest  # no hot tier to fit


def test_mixed_packs_hold_many_classes_and_listing_packs_one():
    """A listing is sorted by class folder: packs of neighbours would feed block-aware shuffle
    batches of a handful of classes; mixed packs (the default) hold many classes each."""
    from tierload.data.layouts.objects import plan_objects

    objects = [ObjectInfo(f"file:///d/{label}/img-{i:03d}.png", 100, "v") for label in range(8) for i in range(32)]
    kwargs = dict(extensions=(".png",), skip_empty=True, pack_threshold_bytes=1000, pack_target_bytes=1600)

    def classes_per_pack(order: str) -> list[int]:
        plan = plan_objects("file:///d", objects, pack_order=order, **kwargs)
        assert sorted(plan.labels.tolist()) == sorted(int(o.url.split("/")[-2]) for o in objects)
        return [len(set(plan.labels[plan.sample_block == b].tolist())) for b in range(len(plan.blocks))]

    listing, mixed = classes_per_pack("listing"), classes_per_pack("mixed")
    assert len(listing) == len(mixed) == 16  # 256 objects of 100 bytes, 16 per pack either way
    assert max(listing) <= 2 and min(mixed) >= 5
    again = plan_objects("file:///d", objects, pack_order="mixed", **kwargs)
    first = plan_objects("file:///d", objects, pack_order="mixed", **kwargs)
    assert [b.key for b in again.blocks] == [b.key for b in first.blocks]  # the same listing, the same packs


def test_mixed_packs_refer_to_listing_rows_and_the_file_holds_the_listing_once(tmp_path):
    """pack_order mixed: members are rows of the one listing (no reordered copy), in memory and mapped."""
    import numpy as np

    from tierload.data.layouts.objects import plan_objects
    from tierload.data.manifest import Manifest, open_manifest
    from tierload.data.manifest_arrow import save_manifest
    from tierload.data.packs import ListedMembers, mixing_order

    objects = [ObjectInfo(f"s3://b/d/{i % 4}/o{i:05d}", 0 if i == 11 else 50 + i % 90, f'"e{i}"') for i in range(4000)]
    objects.insert(2000, ObjectInfo("s3://b/d/big", 5000, '"big"'))
    listing_order = sorted(objects, key=lambda o: o.url)
    plan = plan_objects("s3://b/d", listing_order, extensions=None, skip_empty=False, pack_threshold_bytes=1000,
                        pack_target_bytes=8_000, pack_order="mixed")
    packs = [b.members for b in plan.blocks if b.members is not None]
    assert len(packs) >= 20 and all(isinstance(m, ListedMembers) for m in packs)
    assert len({id(m.listing) for m in packs}) == 1  # one listing shared by every pack
    order = mixing_order(np.array([o.size for o in listing_order], np.int64), 1000)
    expected = [listing_order[row] for row in order.tolist()]  # samples in the mixing order
    rows = [row for block in plan.blocks for row in (block.members.rows() if block.members is not None
                                                     else [(block.url, block.version, block.length)])]
    assert rows == [(o.url, o.version, o.size) for o in expected]
    built = Manifest("s3://b/d", "files", plan.blocks, plan.sample_block, plan.sample_index, plan.labels,
                     plan.classes)
    save_manifest(built, tmp_path / "m.arrow")
    opened = open_manifest(tmp_path / "m.arrow")
    assert opened.blocks == built.blocks and opened.dataset_id == built.dataset_id
    shared = next(b.members for b in opened.blocks if b.members is not None)
    assert isinstance(shared, ListedMembers) and shared.listing.urls.to_pylist() == [o.url for o in listing_order]
    neighbours = plan_objects("s3://b/d", listing_order, extensions=None, skip_empty=False,
                              pack_threshold_bytes=1000, pack_target_bytes=8_000, pack_order="listing")
    save_manifest(Manifest("s3://b/d", "files", neighbours.blocks, neighbours.sample_block, neighbours.sample_index,
                           neighbours.labels, neighbours.classes), tmp_path / "n.arrow")
    second_copy = sum(len(o.url) + len(o.version) for o in objects)  # what a reordered copy would add
    assert os.path.getsize(tmp_path / "m.arrow") < os.path.getsize(tmp_path / "n.arrow") + second_copy / 4


def test_a_member_changed_to_the_same_size_fails_its_pack_by_its_etag(bucket, module_tier_config, module_dataset):
    """Only the ETag tells this change: the member keeps its size, so no length check can catch it."""
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/ds", 24, size=600)
    config = module_tier_config(hot=0, warm=None, manifest=PACKS)
    first = module_dataset(f"s3://{name}/ds", config, layout="files")
    assert first.manifest.num_packs >= 2
    same_size = b"00000007" + os.urandom(592)
    fs.pipe_file(f"{name}/ds/0/obj-000007.bin", same_size)
    fs.invalidate_cache()
    stale = module_dataset(f"s3://{name}/ds", config, layout="files")  # cached manifest, old ETag
    with pytest.raises(SourceChangedError):
        _samples(stale)
    fresh = module_dataset(f"s3://{name}/ds", config, layout="files", refresh_manifest=True)
    assert _samples(fresh) == {**dict(enumerate(payloads)), 7: same_size}


def test_a_local_member_rewritten_in_place_fails_its_pack_by_its_mtime(ray_session, module_tier_config, module_dataset,
                                                                        tmp_path):
    """``file://``: a member's version is its mtime and size; a same-size rewrite changes the mtime."""
    source = tmp_path / "src"
    source.mkdir()
    for index in range(40):
        (source / f"obj-{index:06d}.bin").write_bytes(f"{index:08d}".encode() + bytes(400))
    config = module_tier_config(hot=0, warm=None, manifest=PACKS)
    first = module_dataset(f"file://{source}", config, layout="files", storage_options={})
    assert first.manifest.num_packs >= 2
    victim = source / "obj-000003.bin"
    before = victim.stat()
    victim.write_bytes(b"00000003" + os.urandom(400))
    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))  # a second later, whatever the clock
    stale = module_dataset(f"file://{source}", config, layout="files", storage_options={})
    with pytest.raises(SourceChangedError):
        _samples(stale)


def test_a_zero_byte_file_inside_a_pack_over_file_urls(ray_session, module_tier_config, module_dataset, tmp_path):
    """``file://`` reads a zero-byte member as no bytes (no read past it, no shifted neighbour), cold and hot."""
    source = tmp_path / "src"
    source.mkdir()
    payloads = {}
    for index in range(30):
        payloads[index] = f"{index:08d}".encode() + os.urandom(300 + 7 * index)
        (source / f"obj-{index:06d}.bin").write_bytes(payloads[index])
    (source / "obj-000010-empty.bin").write_bytes(b"")
    config = module_tier_config(manifest={**PACKS, "pack_order": "listing"})
    dataset = module_dataset(f"file://{source}", config, layout="files", storage_options={})
    assert any(b.members is not None and 0 in b.members.sizes[1:-1] for b in dataset.manifest.blocks)
    for epoch in range(2):  # cold, then hot
        dataset.set_epoch(epoch)
        got, empties = {}, 0
        for samples, _ in DataLoader(dataset, batch_size=4, collate_fn=_collect):
            for sample in samples:
                if len(sample) == 0:
                    empties += 1
                else:
                    got[index_of(sample)] = bytes(sample)
        assert empties == 1 and got == payloads
