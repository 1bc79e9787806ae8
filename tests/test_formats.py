"""Formats read in place (image folders, Parquet, WebDataset tar shards, .npy), byte-range blocks for
large objects (B29), empty objects (B18), the two shuffle modes' trade-off, and the collate helper.

Real moto S3 over HTTP, a real local Ray, real tier directories; nothing mocked.
"""

from __future__ import annotations

import io
import json
import math
import tarfile
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from helpers import png_bytes
from torch.utils.data import DataLoader

from tierload import collate
from tierload.data.layouts.webdataset import split_name, walk_members
from tierload.data.order import epoch_order


def make_tar(samples: list[dict[str, bytes]], pad_to: int = 0) -> bytes:
    """A WebDataset shard: members ``<key>.<ext>`` in sample order."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for sample in samples:
            key = sample["__key__"]
            for ext, data in sample.items():
                if ext == "__key__":
                    continue
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def wds_sample(index: int, payload: int = 0) -> dict[str, bytes]:
    key = f"shard/{index:05d}" if index % 7 else f"{'deep/' * 30}{index:05d}"  # some names need a pax header
    return {"__key__": key, "png": png_bytes(index), "cls": str(index % 5).encode(),
            "json": json.dumps({"i": index}).encode(), "bin": bytes(payload)}


def keys_seen(dataset, num_workers=0, batch_size=4):
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, collate_fn=collate)
    seen = []
    for samples, labels in loader:
        assert samples["png"].shape[1:] == (1, 8, 8) and samples["png"].dtype == torch.uint8
        assert torch.equal(labels, samples["cls"])
        assert torch.equal(samples["json"]["i"] % 5, labels)
        seen.extend(int(i) for i in samples["json"]["i"])
    return seen


def test_webdataset_shards_are_read_in_place_and_large_shards_become_range_blocks(bucket, tier_config,
                                                                                   make_dataset):
    """B29: a shard larger than manifest.block_bytes is cached as byte-range blocks of whole samples."""
    name, fs = bucket
    fs.pipe_file(f"{name}/wds/small-000.tar", make_tar([wds_sample(i) for i in range(10)]))
    big = make_tar([wds_sample(i, payload=20_000) for i in range(10, 40)])  # ~30 samples x 21 KB
    fs.pipe_file(f"{name}/wds/big-001.tar", big)
    fs.pipe_file(f"{name}/wds/empty.tar", b"")  # B18: a zero-byte object is skipped, never a crash
    fs.invalidate_cache()
    config = tier_config(hot="4MiB", warm=None, manifest={"block_bytes": "100KiB"},
                         cold={"max_request_bytes": "32KiB"})
    dataset = make_dataset(f"s3://{name}/wds", config, batch_size=4)
    manifest = dataset.manifest
    assert manifest.layout == "webdataset" and manifest.num_samples == 40
    assert "zero-byte" in manifest.skipped[f"s3://{name}/wds/empty.tar"]
    big_blocks = [b for b in manifest.blocks if b.url.endswith("big-001.tar")]
    assert len(big_blocks) >= math.ceil(len(big) / (100 * 1024)) - 1 and len(big_blocks) > 1
    assert all(b.length <= 100 * 1024 for b in big_blocks)
    starts = sorted(b.offset for b in big_blocks)
    assert starts[0] == 0 and all(a < b for a, b in zip(starts, starts[1:]))
    for epoch in range(2):
        dataset.set_epoch(epoch)
        assert sorted(keys_seen(dataset, num_workers=2)) == list(range(40))
    stats = dataset.epoch_stats(0)
    # Each block is read once, in requests no larger than cold.max_request_bytes (32 KiB).
    assert stats["cold_bytes"] == sum(b.length for b in manifest.blocks)
    assert stats["cold_gets"] == sum(math.ceil(b.length / (32 * 1024)) for b in manifest.blocks)
    assert dataset.epoch_stats(1)["cold_gets"] == 0


def test_tar_walker_handles_pax_and_long_names():
    samples = [wds_sample(i) for i in range(8)]
    data = make_tar(samples)
    members = list(walk_members(lambda off, n: data[off:off + n], len(data)))
    names = [name for _start, _off, _size, name in members]
    assert names == [f"{s['__key__']}.{ext}" for s in samples for ext in ("png", "cls", "json", "bin")]
    for _start, offset, size, name in members:
        key, ext = split_name(name)
        sample = next(s for s in samples if s["__key__"] == key)
        assert data[offset:offset + size] == sample[ext]
    assert split_name("a/b.c/0001.seg.png") == ("a/b.c/0001", "seg.png")
    assert split_name("a/.hidden") is None


def test_npy_rows_are_samples_and_large_files_become_row_range_blocks(bucket, module_tier_config, module_dataset):
    name, fs = bucket
    images = np.arange(50 * 3 * 4, dtype=np.float32).reshape(50, 3, 4)
    ids = np.arange(1000, 1030, dtype=">i8")  # big-endian on purpose
    for key, array in (("a.npy", images), ("b.npy", ids)):
        buffer = io.BytesIO()
        np.save(buffer, array)
        fs.pipe_file(f"{name}/npy/{key}", buffer.getvalue())
    fs.invalidate_cache()
    dataset = module_dataset(f"s3://{name}/npy", module_tier_config(manifest={"block_bytes": 480}), batch_size=8)
    manifest = dataset.manifest
    assert manifest.layout == "npy" and manifest.num_samples == 80
    assert all(b.length <= 480 for b in manifest.blocks) and len(manifest.blocks) == 5 + 1
    rows, scalars = [], []
    for samples, labels in DataLoader(dataset, batch_size=8, num_workers=2, collate_fn=collate):
        assert (labels == -1).all()
        for sample in (samples if isinstance(samples, list) else list(samples)):
            (rows if sample.shape == (3, 4) else scalars).append(sample)
    assert sorted(int(r[0, 0]) // 12 for r in rows) == list(range(50))
    for row in rows:
        assert torch.equal(row, torch.from_numpy(images[int(row[0, 0]) // 12]))
    assert sorted(int(s) for s in scalars) == list(range(1000, 1030))


def test_parquet_rows_with_column_selection(bucket, module_tier_config, module_dataset):
    name, fs = bucket
    vec = pa.list_(pa.field("item", pa.float64(), nullable=False))  # B46: non-nullable elements decode to tensors
    table = pa.table({"x": list(range(60)), "vec": pa.array([[float(i)] * 3 for i in range(60)], type=vec),
                      "text": [f"row {i}" for i in range(60)], "label": [i % 3 for i in range(60)]})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=16)
    fs.pipe_file(f"{name}/pq/part-0.parquet", buffer.getvalue())
    fs.pipe_file(f"{name}/pq/_SUCCESS", b"")  # B18: a marker is excluded
    fs.invalidate_cache()
    dataset = module_dataset(f"s3://{name}/pq", module_tier_config(), columns=["x", "vec"], batch_size=5)
    assert len(dataset.manifest.blocks) == 4  # one byte-range block per row group
    seen = []
    for rows, labels in DataLoader(dataset, batch_size=5, collate_fn=collate):
        assert set(rows) == {"x", "vec"} and rows["vec"].shape == (5, 3)
        assert torch.equal(labels, rows["x"] % 3)
        seen.extend(rows["x"].tolist())
    assert sorted(seen) == list(range(60))


def test_image_folder_reads_png_and_jpeg(bucket, module_tier_config, module_dataset):
    from PIL import Image

    name, fs = bucket
    for i in range(3):
        fs.pipe_file(f"{name}/img/cat/{i}.png", png_bytes(40 + i, side=6))
        jpeg = io.BytesIO()
        Image.fromarray(np.full((6, 6, 3), 200, dtype=np.uint8)).save(jpeg, format="JPEG")
        fs.pipe_file(f"{name}/img/dog/{i}.jpg", jpeg.getvalue())
    fs.invalidate_cache()
    dataset = module_dataset(f"s3://{name}/img", module_tier_config())
    got = Counter()
    for image, label in dataset:
        got[(dataset.classes[label], tuple(image.shape))] += 1
    assert got == {("cat", (1, 6, 6)): 3, ("dog", (3, 6, 6)): 3}


def mean_distinct_blocks(order: np.ndarray, sample_block: np.ndarray, batch: int) -> float:
    blocks = sample_block[order]
    return float(np.mean([len(set(blocks[i:i + batch])) for i in range(0, len(blocks) - batch + 1, batch)]))


def test_block_shuffle_trades_randomness_for_far_fewer_cold_bytes(bucket, tier_config, make_dataset):
    """Sample-level shuffle mixes more blocks per batch; block-aware shuffle reads each block ~once.

    (``benchmarks/shuffle_tradeoff.py`` measures the whole curve over window sizes.)
    """
    name, fs = bucket
    buffer = io.BytesIO()
    np.save(buffer, np.arange(512 * 64, dtype=np.uint8).reshape(512, 64))  # 32 blocks of 16 rows
    fs.pipe_file(f"{name}/tradeoff/x.npy", buffer.getvalue())
    fs.invalidate_cache()
    results, before = {}, 0
    for mode in ("sample", "block"):
        config = tier_config(hot="4KiB", warm=None, manifest={"block_bytes": 1024}, prefetch={"depth_blocks": 4})
        dataset = make_dataset(f"s3://{name}/tradeoff", config, shuffle=mode, window_blocks=2, batch_size=16)
        order = dataset.rank_order(0)
        count = sum(len(samples) for samples, _ in DataLoader(dataset, batch_size=16, collate_fn=collate))
        assert count == 512
        cold_bytes = dataset.epoch_stats(0)["cold_bytes"] - before  # both modes share one node cache
        before += cold_bytes
        results[mode] = (mean_distinct_blocks(order, dataset.manifest.sample_block, 16), cold_bytes)
    (sample_mix, sample_bytes), (block_mix, block_bytes) = results["sample"], results["block"]
    assert sample_mix > 3 * block_mix  # batches draw from many more blocks
    assert block_bytes <= 1.1 * 512 * 64 < sample_bytes / 3  # ... at several times the cold traffic


def test_epoch_order_modes_are_permutations():
    sample_block = np.repeat(np.arange(10), 7)
    for mode in ("sample", "block", "none"):
        order = epoch_order(sample_block, seed=3, epoch=1, shuffle=mode, window_blocks=3)
        assert sorted(order.tolist()) == list(range(70))


def test_collate_handles_every_sample_type():
    batch = [({"img": torch.zeros(3, 4, 4), "cap": "a", "n": 1, "maybe": None, "raw": b"x"}, 1),
             ({"img": torch.ones(3, 4, 4), "cap": "b", "n": 2, "raw": b"yz"}, -1)]
    samples, labels = collate(batch)
    assert samples["img"].shape == (2, 3, 4, 4) and samples["cap"] == ["a", "b"]
    assert torch.equal(samples["n"], torch.tensor([1, 2])) and samples["maybe"] == [None, None]
    assert samples["raw"] == [b"x", b"yz"] and labels.tolist() == [1, -1]
    mixed, _ = collate([(torch.zeros(1, 2, 2), 0), (torch.zeros(1, 3, 3), 0)])
    assert isinstance(mixed, list) and [t.shape[-1] for t in mixed] == [2, 3]
    rows, _ = collate([(np.arange(3), 0), (np.arange(3), 0)])
    assert rows.shape == (2, 3)
