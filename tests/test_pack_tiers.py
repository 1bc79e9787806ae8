"""Packs in the tiers: one file per pack per tier, checksummed, served by the warm tier, and the
manifest handed to the node cache by reference (issue 11, item 1: "checksums ... and the warm tier
work on packs exactly as on blocks"; item 3: "handed to the node cache by reference").

Real things only: moto's S3 server over HTTP, a real local Ray, real tier directories; the
corruption is a byte changed in a pack's file on disk.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import index_of, land_warm_writes
from torch.utils.data import DataLoader

from tierload.frames.blockfile import HEADER_SIZE, decode_frame, parse_header
from tierload.frames.checksum_key import local_key
from tierload.wire.endpoint import ENDPOINT_FILE

PACKS = {"pack_threshold_bytes": "2KiB", "pack_target_bytes": "8KiB"}


def _put_with_an_empty_member(fs, prefix: str, count: int) -> dict[int, bytes]:
    """``count`` small objects of random bytes (each starting with its index), plus one zero-byte object."""
    payloads = {}
    for index in range(count):
        payloads[index] = f"{index:08d}".encode() + os.urandom(400 + 23 * index)
        fs.pipe_file(f"{prefix}/{index % 2}/obj-{index:06d}.bin", payloads[index])
    fs.pipe_file(f"{prefix}/1/obj-000010-empty.bin", b"")
    fs.invalidate_cache()
    return payloads


def _block_files(path: Path) -> dict[str, Path]:
    """``{block key: file}`` of the complete block files under a tier directory."""
    return {p.name: p for p in path.rglob("*") if p.is_file() and ".tmp" not in p.parts
            and p.name != ENDPOINT_FILE and not p.name.startswith(".tierload")}


def _epoch(dataset, epoch: int) -> tuple[dict[int, bytes], int]:
    """``({index: bytes}, zero-byte samples)`` of one epoch; fails on a sample seen twice."""
    dataset.set_epoch(epoch)
    got: dict[int, bytes] = {}
    empties = 0
    for batch in DataLoader(dataset, batch_size=4, collate_fn=lambda items: [item[0] for item in items]):
        for sample in batch:
            if len(sample) == 0:
                empties += 1
                continue
            assert index_of(sample) not in got, f"sample {index_of(sample)} yielded twice"
            got[index_of(sample)] = bytes(sample)
    return got, empties


def test_a_pack_is_one_checksummed_file_per_tier_and_a_corrupt_hot_pack_is_served_by_warm(
        bucket, tier_config, make_dataset, tmp_path):
    name, fs = bucket
    payloads = _put_with_an_empty_member(fs, f"{name}/ds", 40)
    dataset = make_dataset(f"s3://{name}/ds", tier_config(hot="1MiB", warm="1MiB", manifest=PACKS), layout="files",
                           shuffle=False)
    blocks = dataset.manifest.blocks
    assert dataset.manifest.num_packs == len(blocks) >= 4  # every object is small: only packs
    assert _epoch(dataset, 0) == (payloads, 1)
    land_warm_writes(dataset)
    keys = {block.key for block in blocks}
    hot, warm = _block_files(tmp_path / "hot"), _block_files(tmp_path / "warm")
    assert set(hot) == keys and set(warm) == keys  # one file per pack in each tier, no file per member
    secret = local_key(tmp_path / "hot", create=False)
    for block in blocks:  # each file is one frame of the members' bytes concatenated, one checksum
        raw, _ = decode_frame(block.key, hot[block.key].read_bytes(), secret=secret)
        assert len(raw) == block.length == block.members.total_bytes

    victim = hot[blocks[1].key]
    frame = bytearray(victim.read_bytes())
    assert parse_header(victim.name, frame).codec == "raw"
    frame[HEADER_SIZE + len(frame[HEADER_SIZE:]) // 2] ^= 0x01  # one bit inside the pack's members
    victim.write_bytes(bytes(frame))
    assert _epoch(dataset, 1) == (payloads, 1)  # never a corrupt sample
    stats = dataset.epoch_stats(1)
    assert stats["integrity_failures"] == 1 and stats.get("cold_gets", 0) == 0  # the warm copy served the pack
    decode_frame(victim.name, victim.read_bytes(), secret=secret)  # replaced by a good copy


def test_a_fresh_hot_tier_reads_packs_from_warm_without_a_cold_request(bucket, tier_config, make_dataset, tmp_path):
    name, fs = bucket
    payloads = _put_with_an_empty_member(fs, f"{name}/ds", 40)
    first = make_dataset(f"s3://{name}/ds", tier_config(hot="1MiB", warm="1MiB", manifest=PACKS), layout="files")
    assert _epoch(first, 0) == (payloads, 1)
    land_warm_writes(first)
    config = tier_config(hot="1MiB", warm="1MiB", manifest=PACKS)
    other_node = config.model_copy(update={"hot": config.hot.model_copy(update={"dir": str(tmp_path / "hot2")})})
    second = make_dataset(f"s3://{name}/ds", other_node, layout="files")
    assert [b.key for b in second.manifest.blocks] == [b.key for b in first.manifest.blocks]
    assert _epoch(second, 0) == (payloads, 1)
    stats = second.epoch_stats(0)
    assert stats.get("cold_gets", 0) == 0 and stats["warm_hits"] == len(second.manifest.blocks)


def test_a_dataset_hands_its_node_cache_the_manifest_file_it_mapped(bucket, tier_config, make_dataset):
    """The registration names the cached manifest file (path + dataset id), which the node cache
    maps; the blocks travel over the socket only when it cannot. The hot tier here is small, so
    the pack target is lowered (``tierload.data.manifest_settings.manifest_settings``): the path must still be the
    file of the manifest the dataset uses."""
    from tierload.node.node_cache import _mapped_manifest
    from tierload.wire.messages import BlockTable, DatasetRegistration

    name, fs = bucket
    _put_with_an_empty_member(fs, f"{name}/ds", 40)
    config = tier_config(hot="64KiB", warm=None, manifest={"pack_threshold_bytes": "2KiB", "pack_target_bytes": "8MiB"})
    dataset = make_dataset(f"s3://{name}/ds", config, layout="files")
    manifest, path = dataset.manifest, dataset._manifest_path
    assert manifest.num_packs >= 4 and max(b.length for b in manifest.blocks) <= 64 * 1024 // 16
    assert _mapped_manifest(str(path), manifest.dataset_id).blocks == manifest.blocks
    by_reference = DatasetRegistration(manifest.dataset_id, dataset._cold, BlockTable.of([]), manifest_path=str(path))
    assert dataset._link.call(lambda cache: cache.register_dataset(by_reference)) is True  # the node cache maps it
    elsewhere = DatasetRegistration(manifest.dataset_id, dataset._cold, BlockTable.of([]),
                                    manifest_path=str(path) + ".missing")
    assert dataset._link.call(lambda cache: cache.register_dataset(elsewhere)) is False  # then the dataset sends the blocks


@pytest.fixture(scope="module")
def small_hot_tier(module_tier_config, module_dataset):
    """``(hot_dir, make)``: a 1 MiB hot tier and no warm tier, one deployment for the two tests below
    that need no tier of their own (~1.5 CPU-s a deployment saved); ``make`` is like
    ``make_dataset``. Each reads its own bucket; the open-counting test counts only its own packs' files."""
    config = module_tier_config(hot="1MiB", warm=None, manifest=PACKS)

    def make(url, **kwargs):
        return module_dataset(url, config, layout="files", **kwargs)
    return Path(config.hot.dir), make


_opened: list[str] | None = None  # paths opened while a test records (an audit hook stays for the process)


def _record_opens(event: str, args: tuple) -> None:
    if event == "open" and _opened is not None and isinstance(args[0], (str, os.PathLike)):
        _opened.append(os.fspath(args[0]))


def test_a_hot_pack_is_opened_once_for_all_of_its_samples(bucket, small_hot_tier):
    """A hot epoch (block-aware shuffle, the default) opens each pack's file once, not once per
    sample: its samples are slices of that one read. Counted with Python's ``open`` audit event."""
    import sys

    global _opened
    name, fs = bucket
    payloads = _put_with_an_empty_member(fs, f"{name}/ds", 40)
    hot_dir, make_dataset = small_hot_tier
    dataset = make_dataset(f"s3://{name}/ds")
    assert _epoch(dataset, 0) == (payloads, 1)  # fills the hot tier
    sys.addaudithook(_record_opens)
    _opened = []
    try:
        assert _epoch(dataset, 1) == (payloads, 1)
        # Control files are dot-files (the checksum key's copy, the endpoint the cache keeper reads
        # every few seconds): only the block files count.
        hot_opens = [path for path in _opened if path.startswith(str(hot_dir))
                     and not os.path.basename(path).startswith(".")]
    finally:
        _opened = None
    assert dataset.epoch_stats(1).get("cold_gets", 0) == 0
    keys = [block.key for block in dataset.manifest.blocks]
    assert sorted(os.path.basename(path) for path in hot_opens) == sorted(keys)  # 41 samples, one open per pack


def test_sample_shuffle_over_packs_is_warned_about_and_block_aware_shuffle_is_not(bucket, small_hot_tier, caplog):
    """docs/packs.md: sample-level shuffle reads a pack again for most samples once it leaves the
    decoded window; a dataset asked for it says so."""
    import logging

    name, fs = bucket
    payloads = _put_with_an_empty_member(fs, f"{name}/ds", 40)
    _hot_dir, make_dataset = small_hot_tier
    with caplog.at_level(logging.WARNING, logger="tierload.loader.dataset"):
        block_aware = make_dataset(f"s3://{name}/ds")
        assert not [r for r in caplog.records if "shuffle='sample'" in r.getMessage()]
        sample = make_dataset(f"s3://{name}/ds", shuffle="sample")
    warned = [r.getMessage() for r in caplog.records if "shuffle='sample'" in r.getMessage()]
    assert len(warned) == 1 and f"over {sample.manifest.num_packs} packs" in warned[0]
    assert block_aware.manifest.num_packs == sample.manifest.num_packs >= 4
    assert _epoch(sample, 0) == (payloads, 1)  # still every sample exactly, only slower
