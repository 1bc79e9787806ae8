"""A mapped manifest keeps its blocks as columns over the file; the epoch plan's memory follows its dtypes.

Real files under a ``file://`` cold prefix, a real Arrow IPC manifest written and mapped (no Ray).
"""

from __future__ import annotations

import dataclasses
import pickle
import tracemalloc

import numpy as np
import pytest

from tierload.config.loading import load_config
from tierload.config.models import ManifestConfig
from tierload.data.block_columns import BlockColumns, BlocksByKey, ColumnSpans, block_key_at, block_lengths
from tierload.data.manifest import open_manifest
from tierload.data.manifest_arrow import save_manifest
from tierload.data.manifest_build import build_manifest
from tierload.data.member_spans import PackIndex
from tierload.data.order import block_sequence, compact_index_dtype, epoch_order
from tierload.stores.cold.source import ColdSource


@pytest.fixture
def built(tmp_path):
    """A listing of small objects (packed) and large ones (a block each), built and saved."""
    root = tmp_path / "data"
    for folder in ("a", "b"):
        (root / folder).mkdir(parents=True)
        for i in range(60):
            size = 3000 if i % 7 == 0 else 40 + i  # every 7th object is above the pack threshold
            (root / folder / f"obj-{i:03d}.bin").write_bytes(bytes([i % 251]) * size)
    source = ColdSource(f"file://{root}", load_config(None).cold)
    settings = ManifestConfig(pack_threshold_bytes=1000, pack_target_bytes=600)
    manifest = build_manifest(source, settings, layout="files")
    path = tmp_path / "manifest.arrow"
    save_manifest(manifest, path)
    return manifest, path


def _mapped_ranges(path) -> list[tuple[int, int]]:
    """Address ranges of this process's mappings of ``path`` (from /proc/self/maps)."""
    ranges = []
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].strip() == str(path):
                low, high = (int(part, 16) for part in fields[0].split("-"))
                ranges.append((low, high))
    return ranges


def _inside(address: int, ranges: list[tuple[int, int]]) -> bool:
    return any(low <= address < high for low, high in ranges)


def test_mapped_blocks_are_columns_over_the_file(built):
    manifest, path = built
    opened = open_manifest(path)
    blocks = opened.blocks
    assert isinstance(blocks, BlockColumns) and opened.num_packs > 0 and opened.num_packs < len(blocks)
    ranges = _mapped_ranges(path)
    # Keys, URLs and versions are the file's bytes; offsets and lengths read-only views of it.
    for strings in (blocks.keys, blocks.urls, blocks.versions):
        for part in (strings.offsets, strings.data):
            assert not part.flags.writeable and _inside(part.__array_interface__["data"][0], ranges)
    for numbers in (blocks.offsets, blocks.lengths, blocks.pack_block, blocks.member_ids):
        assert not numbers.flags.owndata and not numbers.flags.writeable
        assert _inside(numbers.__array_interface__["data"][0], ranges)
    assert block_lengths(blocks) is blocks.lengths  # the column itself, not a copy


def test_mapped_blocks_read_as_the_built_list(built):
    manifest, path = built
    opened = open_manifest(path)
    blocks = opened.blocks
    assert len(blocks) == len(manifest.blocks) and blocks == manifest.blocks  # iteration: every block equal
    assert [blocks[i] for i in range(len(blocks))] == list(manifest.blocks)  # indexing, members included
    assert blocks[-1] == manifest.blocks[-1] and blocks[2:5] == manifest.blocks[2:5]
    with pytest.raises(IndexError):
        blocks[len(blocks)]
    assert [block_key_at(blocks, i) for i in range(len(blocks))] == [b.key for b in manifest.blocks]
    assert opened.dataset_id == manifest.dataset_id  # saved with the file: the key column is not read for it
    # digested again from the columns (a copy without the saved id): the key column's bytes at once
    # digest as the keys one by one
    assert dataclasses.replace(opened).dataset_id == manifest.dataset_id
    assert opened.total_bytes == manifest.total_bytes and opened.num_packs == manifest.num_packs
    by_columns, by_blocks = opened.pack_index, PackIndex.of(manifest.blocks)
    assert isinstance(by_columns, ColumnSpans)  # nothing held over every member of a mapped manifest
    for block in range(len(blocks)):
        first, starts, ends = by_columns.span(block)
        expected_first, expected_starts, expected_ends = by_blocks.span(block)
        assert first == expected_first
        assert starts.tolist() == expected_starts.tolist() and ends.tolist() == expected_ends.tolist()
    with pytest.raises(IndexError, match=f"block index {len(blocks)} outside"):
        by_columns.span(len(blocks))
    by_key = BlocksByKey(blocks)
    some = manifest.blocks[3]
    assert by_key[some.key] == some and some.key in by_key and "nope" not in by_key and len(by_key) == len(blocks)
    assert pickle.loads(pickle.dumps(blocks)) == manifest.blocks  # a DataLoader worker under spawn


def test_compact_epoch_order_is_the_same_order():
    sample_block = (np.arange(5000) // 3).astype(np.int32)
    for shuffle in ("sample", "block", "none"):
        wide = epoch_order(sample_block, seed=5, epoch=2, shuffle=shuffle)
        narrow = epoch_order(sample_block, seed=5, epoch=2, shuffle=shuffle, dtype=compact_index_dtype(5000))
        assert wide.dtype == np.int64 and narrow.dtype == np.int32 and np.array_equal(wide, narrow)
    assert compact_index_dtype(2**31) == np.int64
    with pytest.raises(ValueError, match="dtype"):
        epoch_order(sample_block, seed=0, epoch=0, dtype=np.int16)


def test_epoch_plan_allocates_what_its_dtypes_say():
    """An epoch's order, the next one's, and the int32 block sequence of both at 200,000 blocks:
    the peak of what is allocated is their dtype sizes (4 bytes a position each), nothing per sample."""
    count = 200_000
    sample_block = np.arange(count, dtype=np.int32)  # one sample per block
    dtype = compact_index_dtype(count)
    block_sequence(sample_block, epoch_order(sample_block[:10], seed=1, epoch=0, dtype=dtype))  # one-off caches
    tracemalloc.start()
    try:
        order = epoch_order(sample_block, seed=1, epoch=0, shuffle="sample", dtype=dtype)
        upcoming = epoch_order(sample_block, seed=1, epoch=1, shuffle="sample", dtype=dtype)
        seq = block_sequence(sample_block, order, upcoming)
        del upcoming
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # kept: the order (4 B) and the sequence (2 x 4 B); transient: the next order (4 B) and one
    # window of ids widened to intp while gathered (512 KiB)
    bound = count * (4 + 4 + 2 * 4) + 512 * 1024 + 64 * 1024
    assert peak <= bound, f"the plan allocated {peak} bytes at peak; its dtypes bound it at {bound}"
    assert current <= count * (4 + 2 * 4) + 64 * 1024
    assert seq.dtype == np.int32 and np.array_equal(seq[:count], sample_block[order])
