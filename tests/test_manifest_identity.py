"""A cached manifest follows the settings that shaped it; one object is one entry (issue 12 item 6).

Real listings: moto's S3 server over HTTP and real files, one manifest cache directory reused
across settings, as a user restarting a job with new settings does.
"""

from __future__ import annotations

import pytest
from helpers import png_bytes

from tierload.config.loading import load_config
from tierload.config.models import ManifestConfig
from tierload.data.manifest import cache_path
from tierload.data.manifest_build import load_manifest
from tierload.stores.cold.location import canonical_url
from tierload.stores.cold.source import ColdSource


def cold(s3, url):
    return ColdSource(url, load_config({"cold": {"storage_options": s3.storage_options}}).cold)


@pytest.fixture
def images(tmp_path):
    root = tmp_path / "images"
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        (root / label / "a.png").write_bytes(png_bytes(1))
        (root / label / "b.jpg").write_bytes(b"\xff\xd8 not decoded here")
        (root / label / "skip-me.png").write_bytes(png_bytes(2))
    return f"file://{root}"


def sample_names(manifest) -> list[str]:
    return sorted(manifest.blocks[block].url.rsplit("/", 2)[-2] + "/" + manifest.blocks[block].url.rsplit("/", 1)[-1]
                  for block in manifest.sample_block.tolist())


def test_changing_extensions_or_exclude_gives_a_new_sample_list(images, tmp_path):
    """Case B44: starting again on one manifest cache dir with other extensions or exclude: the new settings hold"""
    source = ColdSource(images, load_config({}).cold)
    cache = str(tmp_path / "manifests")
    base = dict(cache_dir=cache, layout="imagefolder", pack_target_bytes=0)
    png_only = load_manifest(source, ManifestConfig(**base, extensions=(".png",)))
    assert sample_names(png_only) == ["cat/a.png", "cat/skip-me.png", "dog/a.png", "dog/skip-me.png"]
    both = load_manifest(source, ManifestConfig(**base, extensions=(".png", ".jpg")))
    assert sample_names(both) == ["cat/a.png", "cat/b.jpg", "cat/skip-me.png", "dog/a.png", "dog/b.jpg",
                                  "dog/skip-me.png"]
    excluded = load_manifest(source, ManifestConfig(**base, extensions=(".png", ".jpg"),
                                                    exclude=("skip-me.png",)))
    assert sample_names(excluded) == ["cat/a.png", "cat/b.jpg", "dog/a.png", "dog/b.jpg"]
    # And back: the first settings find their own cached manifest again, unchanged.
    assert sample_names(load_manifest(source, ManifestConfig(**base, extensions=(".png",)))) == sample_names(png_only)


@pytest.mark.parametrize("setting", [{"block_bytes": 4096}, {"pack_threshold_bytes": 10}, {"pack_target_bytes": 1},
                                     {"pack_order": "listing"}, {"label_column": "y"}, {"layout": "files"}])
def test_every_setting_that_shapes_the_blocks_is_part_of_the_identity(images, tmp_path, setting):
    """Case B44: every setting that shapes the blocks gives a new manifest"""
    source = ColdSource(images, load_config({}).cold)
    assert cache_path(source, ManifestConfig(**setting), None) != cache_path(source, ManifestConfig(), None)


def test_the_cache_directory_is_not_part_of_the_identity(images, tmp_path):
    source = ColdSource(images, load_config({}).cold)
    one = cache_path(source, ManifestConfig(cache_dir=str(tmp_path / "a")), None)
    other = cache_path(source, ManifestConfig(cache_dir=str(tmp_path / "b")), None)
    assert one.name == other.name


@pytest.mark.parametrize("spelling", ["s3://{b}/p/", "s3://{b}//p", "s3a://{b}/p", "s3a://{b}//p//"])
def test_one_prefix_is_one_manifest_however_its_url_is_spelled(s3, bucket, tmp_path, spelling):
    name, fs = bucket
    fs.pipe({f"{name}/p/{i}.bin": bytes([i]) * 10 for i in range(3)})
    config = ManifestConfig(cache_dir=str(tmp_path), pack_target_bytes=0)
    plain = cold(s3, f"s3://{name}/p")
    other = cold(s3, spelling.format(b=name))
    assert other.url == plain.url == f"s3://{name}/p"
    assert cache_path(other, config, "files") == cache_path(plain, config, "files")
    first, second = load_manifest(plain, config, "files"), load_manifest(other, config, "files")
    assert [b.key for b in second.blocks] == [b.key for b in first.blocks]  # one object, one tier key
    assert all(b.url.startswith(f"s3://{name}/p/") for b in second.blocks)
    assert other.read(second.blocks[1].url, second.blocks[1].version, 0, 10) == bytes([1]) * 10


def test_canonical_urls_leave_other_schemes_and_listed_keys_alone():
    assert canonical_url("file:///data//train/") == "file:///data/train"
    assert canonical_url("/data//train/") == "/data/train"
    assert canonical_url("https://host/a//b/") == "https://host/a//b"
    assert canonical_url("s3://bucket/") == "s3://bucket"
