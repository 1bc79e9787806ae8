"""Random access (issue 22, item 4): ``ds[i]``, ``ds.__getitems__`` and the map-style view.

Real moto S3 over HTTP, a real local Ray, real tier directories; nothing mocked. Every layout's
``ds[i]`` is compared with what iteration yields for sample ``i``, read once before the epoch
(nothing cached: member reads and cold fetches) and once after it (hot copies).
"""

from __future__ import annotations

import io
import json
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from helpers import index_of, png_bytes, put_indexed_objects, tar_of
from torch.utils.data import DataLoader

from tierload.errors import SampleIndexError


def same(a: Any, b: Any) -> bool:
    """Exact equality of samples: tensors, arrays, bytes, dicts and sequences of them."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b)) and np.asarray(a).dtype == np.asarray(b).dtype
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def parquet_bytes() -> bytes:
    table = pa.table({"id": list(range(30)), "text": [f"row {i}" for i in range(30)],
                      "label": [i % 3 for i in range(30)]})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=7)
    return buffer.getvalue()


def arrow_bytes() -> bytes:
    table = pa.table({"id": list(range(25)), "vec": pa.array([[float(i), -float(i)] for i in range(25)],
                                                              type=pa.list_(pa.float32(), 2))})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=6):
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def put_layout(fs, prefix: str, layout: str) -> tuple[str | None, dict]:
    """Write one layout's objects under ``prefix``: ``(layout=, manifest settings)``."""
    if layout in ("files", "packed-files"):
        put_indexed_objects(fs, prefix, 23, size=300, classes=2)
        packs = {"pack_threshold_bytes": "1KiB", "pack_target_bytes": 1500} if layout == "packed-files" else {}
        return "files", packs
    if layout == "packed-imagefolder":
        fs.pipe({f"{prefix}/{'cat' if i % 2 else 'dog'}/{i:03d}.png": png_bytes(i) for i in range(14)})
        return "imagefolder", {"pack_threshold_bytes": "1KiB", "pack_target_bytes": 400}
    if layout == "npy":
        fs.pipe({f"{prefix}/a.npy": npy_bytes(np.arange(40 * 3, dtype=np.float32).reshape(40, 3)),
                 f"{prefix}/b.npy": npy_bytes(np.arange(10 * 3, dtype=np.float32).reshape(10, 3) * -1)})
        return "npy", {"block_bytes": 160}
    if layout == "parquet":
        fs.pipe({f"{prefix}/part-0.parquet": parquet_bytes()})
        return "parquet", {"label_column": "label"}
    if layout == "webdataset":
        members = [(f"s{i:03d}.{ext}", data) for i in range(12)
                   for ext, data in (("png", png_bytes(i)), ("cls", str(i % 3).encode()),
                                     ("json", json.dumps({"i": i}).encode()))]
        fs.pipe({f"{prefix}/shard-0.tar": tar_of(members[:18]), f"{prefix}/shard-1.tar": tar_of(members[18:])})
        return "webdataset", {"block_bytes": 2048}
    if layout == "tokens":
        fs.pipe({f"{prefix}/a.bin": np.arange(300, dtype="<u2").tobytes(),
                 f"{prefix}/b.bin": np.arange(300, 397, dtype="<u2").tobytes()})
        return "tokens", {"seq_len_tokens": 7, "block_bytes": 64}
    if layout == "jsonl":
        lines = [json.dumps({"id": i, "text": "x" * (i * 13 % 90)}) for i in range(40)]
        fs.pipe({f"{prefix}/a.jsonl": "\n".join(lines[:25]).encode(),
                 f"{prefix}/b.jsonl": "\n".join(lines[25:]).encode()})
        return "jsonl", {"block_bytes": 300}
    if layout == "arrow":
        fs.pipe({f"{prefix}/data.arrow": arrow_bytes()})
        return "arrow", {}
    raise AssertionError(layout)


LAYOUTS = ["files", "packed-files", "packed-imagefolder", "npy", "parquet", "webdataset", "tokens", "jsonl", "arrow"]


@pytest.fixture(scope="module")
def layouts_deployment(module_tier_config):
    """``config(manifest settings)``: tiers (hot 4 MiB, no warm) whose one deployment, a node cache and a
    coordinator actor, every layout below reads through, as jobs with their own manifest settings share a
    node's cache. Each layout reads its own objects and counts its random reads as a difference, so it
    checks what a deployment of its own per layout did (~2 CPU-s of actor start-up each). Stopped at the
    module's end."""
    def config(manifest: dict):
        return module_tier_config(hot="4MiB", warm=None, manifest=manifest)
    return config


@pytest.mark.parametrize("layout", LAYOUTS)
def test_ds_i_is_exactly_what_iteration_yields_for_every_layout(bucket, layouts_deployment, module_dataset, layout):
    name, fs = bucket
    layout_name, manifest = put_layout(fs, f"{name}/{layout}", layout)
    fs.invalidate_cache()
    dataset = module_dataset(f"s3://{name}/{layout}", layouts_deployment(manifest), layout=layout_name, shuffle=False)
    random_reads = dataset.cache_stats()["counters"].get("random_reads", 0)  # the shared node cache's so far
    count = dataset.manifest.num_samples
    assert count >= 10
    if layout.startswith("packed"):
        assert dataset.manifest.num_packs > 0
    before = [dataset[i] for i in range(count)]  # nothing cached yet: members alone, cold fetches
    backwards = dataset.__getitems__(list(range(count - 1, -1, -1)))  # batched, blocks read once each
    iterated = list(dataset)
    assert len(iterated) == count
    after = [dataset[i] for i in range(count)]  # now through the hot tier
    for i, expected in enumerate(iterated):
        assert same(before[i], expected), (layout, i, before[i], expected)
        assert same(after[i], expected), (layout, i)
        assert same(backwards[count - 1 - i], expected), (layout, i)
    assert same(dataset[-1], iterated[-1])
    with pytest.raises(SampleIndexError, match=rf"sample index {count} is outside the dataset: valid indices are "
                                               rf"0 \.\. {count - 1}"):
        dataset[count]
    assert dataset.cache_stats()["counters"]["random_reads"] > random_reads


def test_one_packed_member_is_read_from_cold_by_its_own_ranged_get(bucket, tier_config, make_dataset, faulty_s3):
    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/packs", 40, size=500)
    config = tier_config(hot="4MiB", warm="4MiB", manifest={"pack_threshold_bytes": "1KiB", "pack_target_bytes": 5000})
    dataset = make_dataset(f"s3://{name}/packs", config, layout="files", endpoint_url=faulty_s3.endpoint_url)
    manifest = dataset.manifest
    target = 17  # a sample id (packs mix the listing: not object 17)
    block = manifest.blocks[int(manifest.sample_block[target])]
    assert block.members is not None and len(block.members) >= 8  # a pack of ~10 members
    counters = dataset.cache_stats()["counters"]
    gets_before = Counter(faulty_s3.faults.gets)

    sample, _ = dataset[target]

    assert bytes(sample) == payloads[index_of(sample)]
    after = dataset.cache_stats()["counters"]
    assert after["cold_gets"] - counters["cold_gets"] == 1
    assert after["cold_bytes"] - counters["cold_bytes"] == 500  # the member's bytes, not the pack's
    assert after["cold_misses"] - counters["cold_misses"] == 1
    assert after["random_reads"] - counters["random_reads"] == 1
    new_gets = faulty_s3.faults.gets - gets_before  # what reached S3: one GET of the member's object
    assert sum(new_gets.values()) == 1 and next(iter(new_gets)).endswith(f"obj-{index_of(sample):06d}.bin"), new_gets


def test_a_shuffled_map_style_dataloader_with_two_workers_returns_every_sample_once(bucket, tier_config,
                                                                                      make_dataset):
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/map", 60, size=200)
    config = tier_config(hot="4MiB", warm="4MiB", manifest={"pack_threshold_bytes": "1KiB", "pack_target_bytes": 1200})
    dataset = make_dataset(f"s3://{name}/map", config, layout="files")
    view = dataset.map_style()
    assert len(view) == 60
    torch.manual_seed(0)
    loader = DataLoader(view, batch_size=8, shuffle=True, num_workers=2, collate_fn=list)
    order = [index_of(sample) for batch in loader for sample, _ in batch]
    assert sorted(order) == list(range(60))
    assert order != list(range(60))  # shuffled
    counters = dataset.cache_stats()["counters"]
    assert counters["random_reads"] > 0 and counters["accesses"] >= counters["random_reads"]


def test_a_member_is_cut_from_the_warm_copy_of_its_pack_once_warm_holds_it(bucket, tier_config, make_dataset):
    """hot -> warm -> cold: with no hot tier, the first read of a member is its own ranged GET; once an
    epoch has put the packs in the warm tier, a member comes from there and S3 sees no GET."""
    from helpers import land_warm_writes

    name, fs = bucket
    payloads = put_indexed_objects(fs, f"{name}/warm", 30, size=400)
    config = tier_config(hot=0, warm="4MiB", manifest={"pack_threshold_bytes": "1KiB", "pack_target_bytes": 4000})
    dataset = make_dataset(f"s3://{name}/warm", config, layout="files", shuffle=False)
    assert dataset.manifest.num_packs > 0
    first = dataset.cache_stats()["counters"]
    sample, _ = dataset[3]
    assert bytes(sample) == payloads[index_of(sample)]
    cold = dataset.cache_stats()["counters"]
    assert (cold["cold_misses"] - first["cold_misses"], cold["cold_gets"] - first["cold_gets"],
            cold["cold_bytes"] - first["cold_bytes"]) == (1, 1, 400)

    assert sorted(index_of(s) for s, _ in dataset) == list(range(30))  # the packs go whole to warm
    land_warm_writes(dataset)
    before = dataset.cache_stats()["counters"]
    sample, _ = dataset[5]
    assert bytes(sample) == payloads[index_of(sample)]
    after = dataset.cache_stats()["counters"]
    assert after["warm_hits"] - before["warm_hits"] == 1
    assert after["cold_gets"] == before["cold_gets"] and after["cold_bytes"] == before["cold_bytes"]
    assert after["random_reads"] - before["random_reads"] == 1
    assert dataset.consumer_stats["random_cache_reads"] == 2 and dataset.consumer_stats["random_hot_reads"] == 0


def test_read_sample_messages_are_frozen_and_versioned():
    import dataclasses
    import pickle

    from tierload.errors import MessageError
    from tierload.wire.messages import MemberFrame, SampleRead, member_key

    request = SampleRead("d", "k", 3)
    assert pickle.loads(pickle.dumps(request)) == request and request.version == SampleRead.VERSION
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.member = 4  # type: ignore[misc]
    with pytest.raises(MessageError, match="expected a SampleRead"):
        SampleRead.received(MemberFrame(b""))
    assert member_key("k", 3) != member_key("k", 4) != "k"
