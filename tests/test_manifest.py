"""Listing the cold tier and describing the dataset (moto over HTTP, no Ray)."""

from __future__ import annotations

import io
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import png_bytes, put_objects

from tierload.config.loading import load_config
from tierload.config.models import ManifestConfig
from tierload.data.manifest_build import build_manifest, load_manifest
from tierload.errors import (
    BucketNotFoundError,
    ConfigError,
    EndpointUnreachableError,
    ManifestError,
    SourceChangedError,
    SourceNotFoundError,
)
from tierload.stores.cold.source import ColdSource


def cold(s3, url, **options):
    config = load_config({"cold": {"storage_options": {**s3.storage_options, **options}}})
    return ColdSource(url, config.cold)


def test_listing_of_more_than_a_thousand_objects_is_complete(s3, bucket):
    """B17: 2,345 objects under train/ plus some under train/sub/: one page is 1,000."""
    name, fs = bucket
    put_objects(s3, name, {f"train/obj-{i:05d}.bin": b"x" for i in range(2345)})  # B17's count
    fs.pipe({f"{name}/train/sub/more-{i}.bin": b"y" for i in range(7)})
    fs.invalidate_cache()
    source = cold(s3, f"s3://{name}/train")
    objects = source.list_objects()
    assert len(objects) == 2352
    manifest = build_manifest(source, ManifestConfig(pack_target_bytes=0), layout="files")
    assert manifest.num_samples == 2352 and len({b.key for b in manifest.blocks}) == 2352


def test_nasty_keys_and_markers(s3, bucket):
    """B16/B18: spaces, unicode, '..', glob characters; directory markers and _SUCCESS excluded."""
    name, fs = bucket
    keys = ["imgs/cat [1].bin", "imgs/a+b.bin", "imgs/50%.bin", "imgs/naïve café.bin", "imgs/trailing space ",
            "imgs/../escape.bin", "imgs/x?y*z.bin"]
    for i, key in enumerate(keys):
        fs.pipe_file(f"{name}/data/{key}", f"payload-{i}".encode())
    fs.pipe_file(f"{name}/data/_SUCCESS", b"")
    fs.call_s3("put_object", Bucket=name, Key="data/", Body=b"")  # a directory marker
    fs.invalidate_cache()
    source = cold(s3, f"s3://{name}/data")
    manifest = build_manifest(source, ManifestConfig(pack_target_bytes=0), layout="files")
    urls = sorted(b.url for b in manifest.blocks)
    assert len(urls) == len(keys) and not any(u.endswith("_SUCCESS") for u in urls)
    for block in manifest.blocks:
        data = source.read(block.url, block.version, block.offset, block.length)
        assert data.startswith(b"payload-")
        assert block.url.endswith(keys[int(data.split(b"-")[1])])  # maps back to the exact key


def test_zero_byte_objects_are_empty_samples_or_counted_skips(s3, bucket):
    name, fs = bucket
    fs.pipe_file(f"{name}/mixed/0/a.png", png_bytes(1))
    fs.pipe_file(f"{name}/mixed/0/empty.png", b"")
    fs.pipe_file(f"{name}/mixed/1/empty.bin", b"")
    fs.invalidate_cache()
    source = cold(s3, f"s3://{name}/mixed")
    images = build_manifest(source, ManifestConfig(pack_target_bytes=0), layout="imagefolder")
    assert images.num_samples == 1
    assert images.skipped[f"s3://{name}/mixed/0/empty.png"] == "zero-byte object is not an image"
    files = build_manifest(source, ManifestConfig(pack_target_bytes=0), layout="files")
    assert files.num_samples == 3
    empty = next(b for b in files.blocks if b.url.endswith("empty.bin"))
    assert empty.length == 0 and source.read(empty.url, empty.version, 0, 0) == b""
    decoded = files.decoder().decode(files.blocks.index(empty), b"")
    assert decoded == [(b"", files.labels[files.blocks.index(empty)])]


def test_imagefolder_labels_follow_sorted_class_folders(s3, bucket):
    name, fs = bucket
    for label in ("cat", "dog"):
        for i in range(3):
            fs.pipe_file(f"{name}/pets/{label}/{i}.png", png_bytes(10 if label == "cat" else 200))
    fs.invalidate_cache()
    manifest = build_manifest(cold(s3, f"s3://{name}/pets"), ManifestConfig(pack_target_bytes=0))
    assert manifest.layout == "imagefolder" and manifest.classes == ["cat", "dog"]
    decoder = manifest.decoder()
    source = cold(s3, f"s3://{name}/pets")
    for index, block in enumerate(manifest.blocks):
        image, label = decoder.decode(index, source.read(block.url, block.version, 0, block.length))[0]
        assert image.shape == (1, 8, 8) and image.dtype.is_floating_point is False
        assert label == (0 if "/cat/" in block.url else 1)
        assert int(image[0, 0, 0]) == (10 if label == 0 else 200)


def test_parquet_row_groups_are_blocks_and_decode_alone(s3, bucket):
    name, fs = bucket
    for part in range(2):
        rows = np.arange(part * 250, (part + 1) * 250)
        vec = pa.array([[float(r)] * 4 for r in rows],  # B46: non-nullable elements decode to tensors
                       type=pa.list_(pa.field("item", pa.float64(), nullable=False)))
        table = pa.table({"x": pa.array(rows, pa.int64()), "vec": vec,
                          "label": pa.array(rows % 10), "name": [f"row-{r}" for r in rows]})
        buffer = io.BytesIO()
        pq.write_table(table, buffer, row_group_size=100)
        fs.pipe_file(f"{name}/pq/part-{part}.parquet", buffer.getvalue())
    fs.invalidate_cache()
    source = cold(s3, f"s3://{name}/pq")
    manifest = build_manifest(source, ManifestConfig())
    assert manifest.layout == "parquet" and len(manifest.blocks) == 6 and manifest.num_samples == 500
    decoder = manifest.decoder("label")
    seen = []
    for index, block in enumerate(manifest.blocks):
        rows = decoder.decode(index, source.read(block.url, block.version, block.offset, block.length))
        for row, label in rows:
            assert label == row["x"] % 10 and row["name"] == f"row-{row['x']}"
            assert row["vec"].tolist() == [float(row["x"])] * 4
            seen.append(row["x"])
    assert sorted(seen) == list(range(500))
    only_x = manifest.decoder("label", columns=["x"]).decode(0, source.read(
        manifest.blocks[0].url, manifest.blocks[0].version, manifest.blocks[0].offset, manifest.blocks[0].length))
    assert set(only_x[0][0]) == {"x"}


def test_manifest_is_cached_and_refreshed_on_request(s3, bucket, tmp_path):
    name, fs = bucket
    fs.pipe({f"{name}/c/{i}.bin": b"v1" for i in range(5)})
    config = ManifestConfig(cache_dir=str(tmp_path))
    source = cold(s3, f"s3://{name}/c")
    first = load_manifest(source, config, "files")
    fs.pipe_file(f"{name}/c/new.bin", b"added")
    fs.invalidate_cache()
    assert load_manifest(source, config, "files").num_samples == 5  # cached: no second listing
    refreshed = load_manifest(source, config, "files", refresh=True)
    assert refreshed.num_samples == 6 and refreshed.dataset_id != first.dataset_id


def test_cold_reads_refuse_a_changed_object(s3, bucket):
    name, fs = bucket
    fs.pipe_file(f"{name}/v/obj.bin", b"old bytes")
    source = cold(s3, f"s3://{name}/v")
    [info] = source.list_objects()
    fs.pipe_file(f"{name}/v/obj.bin", b"new bytes!")
    with pytest.raises(SourceChangedError):
        source.read(info.url, info.version, 0, info.size)
    fs.rm_file(f"{name}/v/obj.bin")
    with pytest.raises(SourceNotFoundError):
        source.read(info.url, '"whatever"', 0, 1)


def test_requests_never_exceed_the_configured_size(s3, bucket):
    name, fs = bucket
    payload = bytes(range(256)) * 400  # 102,400 bytes
    fs.pipe_file(f"{name}/big/blob.bin", payload)
    config = load_config({"cold": {"max_request_bytes": 10_000, "storage_options": s3.storage_options}})
    source = ColdSource(f"s3://{name}/big", config.cold)
    [info] = source.list_objects()
    tally = {}
    assert source.read(info.url, info.version, 0, info.size, tally=tally) == payload
    assert tally == {"cold_gets": 11, "cold_bytes": len(payload)}


def test_unreachable_endpoint_and_missing_bucket_are_typed_errors(s3):
    config = load_config({"cold": {"endpoint_url": "http://127.0.0.1:9", "max_attempts": 1,
                                   "connect_timeout_s": 1, "storage_options": {"key": "a", "secret": "b"}}})
    started = time.monotonic()
    with pytest.raises(EndpointUnreachableError) as info:
        ColdSource("s3://any-bucket/x", config.cold).list_objects()
    assert "127.0.0.1:9" in str(info.value) and time.monotonic() - started < 30
    with pytest.raises(BucketNotFoundError) as info:
        cold(s3, "s3://no-such-bucket-here/x").list_objects()
    assert "no-such-bucket-here" in str(info.value)


def test_a_missing_local_directory_is_named_as_missing_not_as_empty(tmp_path):
    config = load_config({})
    missing = tmp_path / "trian"
    with pytest.raises(SourceNotFoundError, match=f"the directory '{missing}' does not exist"):
        ColdSource(f"file://{missing}", config.cold).list_objects()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManifestError, match="holds no objects"):  # an existing empty one stays "empty"
        build_manifest(ColdSource(f"file://{tmp_path / 'empty'}", config.cold), ManifestConfig())


def test_a_misspelt_layout_is_a_config_error_before_any_listing(tmp_path):
    # the directory does not exist either: the layout is checked first, so no listing was sent
    source = ColdSource(f"file://{tmp_path / 'missing'}", load_config({}).cold)
    with pytest.raises(ConfigError, match="unknown layout 'file'; choose one of auto, imagefolder"):
        build_manifest(source, ManifestConfig(), layout="file")


def test_an_empty_prefix_is_a_manifest_error(s3, bucket):
    name, _ = bucket
    with pytest.raises(ManifestError, match="no objects"):
        build_manifest(cold(s3, f"s3://{name}/nothing"), ManifestConfig())
