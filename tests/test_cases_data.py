"""Real-world failure cases from ../shared/cases, turned into tests (IDs in each docstring):
what the data looks like: a Parquet file rewritten with another schema, odd names, an object a
cached listing lacks, folder markers and empty objects (the rest: tests/test_cases.py,
tests/test_cases_recovery.py).

Everything is real: moto's S3 server over HTTP, a local Ray, real directories.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cases_common import collect_raw, indices
from helpers import land_warm_writes, put_indexed_objects
from torch.utils.data import DataLoader


def _parquet(columns: dict, row_group_size: int) -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer, row_group_size=row_group_size)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def shared_tiers(module_tier_config, module_dataset):
    """``(tier_root, make)``: a 1 MiB hot and a 1 MiB warm tier under ``tier_root``, one
    deployment for B09, B16 and B17 instead of one each (~1.5 CPU-s a deployment); ``make`` is like
    ``make_dataset``. Each test reads its own bucket and looks at tier files by its own block keys
    (B09) or checks every file in the tiers (B16, whose check holds for all of them)."""
    config = module_tier_config(hot="1MiB", warm="1MiB")

    def make(url, **kwargs):
        return module_dataset(url, config, **kwargs)
    return Path(config.hot.dir).parent, make


def test_b09_a_parquet_file_rewritten_with_another_schema_is_served_new_from_every_tier(
        bucket, shared_tiers):
    """Case B09: Parquet A (read, so it is in hot and warm) is overwritten by Parquet B with another
    schema and length; a refreshed start reads B's rows only and neither tier keeps A's blocks. A
    reader of A still iterating when its blocks are dropped ends at once, with every A row it was
    given right or a clear SourceChangedError, never a hang."""
    from tierload.errors import SourceChangedError

    name, fs = bucket
    fs.pipe_file(f"{name}/pq/part-0.parquet", _parquet({"x": list(range(10))}, 5))
    fs.invalidate_cache()
    tiers, make_dataset = shared_tiers
    old = make_dataset(f"s3://{name}/pq", shuffle=False)
    assert sorted(row["x"] for row, _ in old) == list(range(10))
    land_warm_writes(old)
    old_keys = {block.key for block in old.manifest.blocks}
    on_disk = {p.name for tier in ("hot", "warm") for p in (tiers / tier).rglob("*") if p.is_file()}
    assert old_keys <= on_disk
    in_use = iter(DataLoader(old, batch_size=None, num_workers=0))
    first = next(in_use)[0]
    assert first["x"] == 0

    fs.pipe_file(f"{name}/pq/part-0.parquet", _parquet({"y": [f"b{i}" for i in range(7)], "z": [1.5] * 7}, 7))
    fs.invalidate_cache()
    fresh = make_dataset(f"s3://{name}/pq", shuffle=False, refresh_manifest=True)
    assert sorted(row["y"] for row, _ in fresh) == [f"b{i}" for i in range(7)]
    assert all(set(row) == {"y", "z"} for row, _ in fresh)
    land_warm_writes(fresh)
    on_disk = {p.name for tier in ("hot", "warm") for p in (tiers / tier).rglob("*") if p.is_file()}
    assert not old_keys & on_disk  # no tier keeps A

    started = time.monotonic()
    try:
        rest = [row["x"] for row, _ in in_use]
        assert rest == list(range(1, 10))  # what was already in the reader's window, exact
    except SourceChangedError:
        pass  # the rest of A is gone at the source: said clearly
    assert time.monotonic() - started < 30


def test_b16_nfc_and_nfd_names_and_glob_characters_are_distinct_literal_keys(bucket, shared_tiers):
    """Case B16: NFC and NFD spellings of one name are two objects; a key with glob characters given
    as the dataset URL is read literally (not the objects its pattern would match); every tier file
    stays inside its tier directory."""
    import unicodedata

    name, fs = bucket
    nfc = unicodedata.normalize("NFC", "imgs/naïve café.bin")
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfc != nfd
    objects = {nfc: b"00000000nfc", nfd: b"00000001nfd", "imgs/cat [1].bin": b"00000002bracket",
               "imgs/cat 1.bin": b"00000003plain", "imgs/x?y*z.bin": b"00000004glob", "imgs/xAyBBz.bin": b"00000005",
               "imgs/../escape.bin": b"00000006dots"}
    for key, body in objects.items():
        fs.pipe_file(f"{name}/data/{key}", body)
    fs.invalidate_cache()
    tiers, make_dataset = shared_tiers
    dataset = make_dataset(f"s3://{name}/data", layout="files")
    got = {bytes(sample) for samples, _ in DataLoader(dataset, batch_size=4, collate_fn=collect_raw)
           for sample in samples}
    assert got == set(objects.values())  # NFC and NFD both read, each with its own bytes
    for literal, body in (("imgs/cat [1].bin", b"00000002bracket"), ("imgs/x?y*z.bin", b"00000004glob")):
        one = make_dataset(f"s3://{name}/data/{literal}", layout="files")
        assert [bytes(s) for samples, _ in DataLoader(one, batch_size=4, collate_fn=collect_raw)
                for s in samples] == [body]
    land_warm_writes(dataset)
    for tier in ("hot", "warm"):
        root = (tiers / tier).resolve()
        files = [p.resolve() for p in (tiers / tier).rglob("*") if p.is_file()]
        assert files and all(root in p.parents for p in files)


def test_b17_an_object_a_cached_listing_lacks_opens_directly_and_a_refresh_counts_it(
        bucket, shared_tiers):
    """Case B17: the prefix's listing is cached; an object added since opens directly by its key (the
    cached listing is not asked whether it exists), and a refreshed listing counts it."""
    name, fs = bucket
    put_indexed_objects(fs, f"{name}/train", 5, size=100)
    _tiers, make_dataset = shared_tiers  # tier sizes are not what B17 is about
    stale = make_dataset(f"s3://{name}/train", layout="files")
    assert stale.manifest.num_samples == 5
    fs.pipe_file(f"{name}/train/0/obj-000005.bin", b"00000005" + bytes(92))
    fs.invalidate_cache()
    direct = make_dataset(f"s3://{name}/train/0/obj-000005.bin", layout="files")
    assert indices(direct) == [5]
    refreshed = make_dataset(f"s3://{name}/train", layout="files", refresh_manifest=True)
    assert refreshed.manifest.num_samples == 6 and sorted(indices(refreshed)) == list(range(6))


def test_b18_markers_are_excluded_and_an_empty_object_is_an_empty_sample_in_every_tier(
        s3, bucket, tier_config, make_dataset):
    """Case B18: under data/, a 0-byte ``data/`` marker and ``data/_SUCCESS`` are excluded; the empty
    ``data/empty.bin`` is an empty sample (the documented policy, tierload/data/layouts/objects.py), cached
    in the hot tier as a complete entry that epoch 2 reads from hot (an empty frame's zstd round
    trip: tests/test_blocks_codec.py)."""
    name, fs = bucket
    fs.pipe_file(f"{name}/data/_SUCCESS", b"")
    fs.call_s3("put_object", Bucket=name, Key="data/", Body=b"")
    fs.pipe_file(f"{name}/data/part-0.bin", b"00000000" + bytes(1000))
    fs.pipe_file(f"{name}/data/empty.bin", b"")
    fs.invalidate_cache()
    dataset = make_dataset(f"s3://{name}/data", tier_config(hot="1MiB", warm=None), layout="files")
    assert sorted(b.url.rsplit("/", 1)[-1] for b in dataset.manifest.blocks) == ["empty.bin", "part-0.bin"]
    for epoch in (0, 1):
        dataset.set_epoch(epoch)
        got = sorted(bytes(s) for samples, _ in DataLoader(dataset, batch_size=2, collate_fn=collect_raw)
                     for s in samples)
        assert got == [b"", b"00000000" + bytes(1000)]
    stats = dataset.epoch_stats(1)
    assert stats.get("cold_gets", 0) == 0 and stats["hot_hits"] == 2  # the empty entry is complete
    assert dataset.cache_stats()["levels"][0]["blocks"] == 2
