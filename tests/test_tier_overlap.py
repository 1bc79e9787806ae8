"""Tier locations never overlap each other or the source; listings skip tierload's own files
(issue 13, item 6). Real directories, real symbolic links."""

from __future__ import annotations

import pytest

from tierload.config.loading import load_config
from tierload.errors import ConfigError
from tierload.frames.blockfile import encode_frame
from tierload.loader.dataset import TieredDataset
from tierload.stores.cold.source import ColdSource
from tierload.stores.local import LocalDirStore


def _config(hot, warm):
    return load_config({"hot": {"dir": str(hot)}, "warm": {"url": None if warm is None else str(warm)}})


@pytest.mark.parametrize("hot, warm, how", [
    ("t", "t", "are the same location"),
    ("t", "t/warm", "holds"),
    ("t/hot", "t", "is inside"),
    ("t", "file://{root}/t", "are the same location"),
    ("t/{node}", "t", "is inside"),
])
def test_overlapping_hot_and_warm_are_refused_naming_both(tmp_path, hot, warm, how):
    hot_dir = str(tmp_path / hot)
    warm_url = warm.format(root=tmp_path) if warm.startswith("file://") else str(tmp_path / warm)
    with pytest.raises(ConfigError) as info:
        _config(hot_dir, warm_url)
    message = str(info.value)
    assert "hot.dir" in message and "warm.url" in message and how in message
    assert hot_dir in message and warm_url in message


def test_a_symbolic_link_to_the_same_directory_is_the_same_location(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ConfigError, match="are the same location"):
        _config(tmp_path / "real", tmp_path / "link")


@pytest.mark.parametrize("section, key", [("hot", "dir"), ("warm", "url")])
def test_an_empty_tier_path_is_refused(tmp_path, section, key):
    data = {"hot": {"dir": str(tmp_path / "hot")}, "warm": {"url": str(tmp_path / "warm")}}
    data[section][key] = ""
    with pytest.raises(ConfigError, match=rf"{section}\.{key} is empty"):
        load_config(data)


def test_tiers_apart_and_on_other_schemes_are_accepted(tmp_path):
    assert _config(tmp_path / "hot", tmp_path / "warm").warm.url == str(tmp_path / "warm")
    assert _config(tmp_path / "hot", None).warm.url is None
    assert load_config({"hot": {"dir": "/data/x"}, "warm": {"url": "s3://bucket/data/x"}}).hot.dir == "/data/x"


@pytest.mark.parametrize("tier", ["hot", "warm", "manifests"])
def test_a_tier_inside_a_file_source_is_refused(tmp_path, tier):
    source = tmp_path / "data"
    dirs = {"hot": tmp_path / "hot", "warm": tmp_path / "warm", "manifests": tmp_path / "manifests"}
    dirs[tier] = source / "cache"
    config = {"hot": {"dir": str(dirs["hot"])}, "warm": {"url": str(dirs["warm"])},
              "manifest": {"cache_dir": str(dirs["manifests"])}}
    key = {"hot": "hot.dir", "warm": "warm.url", "manifests": "manifest.cache_dir"}[tier]
    with pytest.raises(ConfigError) as info:
        TieredDataset(f"file://{source}", config, lazy=True)
    assert "source" in str(info.value) and key in str(info.value) and str(source) in str(info.value)
    with pytest.raises(ConfigError, match="is inside"):  # a source inside a tier, the other way round
        TieredDataset(f"file://{dirs['hot'] if tier != 'hot' else dirs['warm']}/data", config, lazy=True)


def test_a_local_listing_never_returns_tierload_files(tmp_path):
    """Even where the overlap check cannot see it (a tier made by hand inside a source, a stray
    tierload file), the listing skips tier directories and tierload's own file names."""
    root = tmp_path / "data"
    (root / "cls").mkdir(parents=True)
    (root / "cls" / "0.bin").write_bytes(b"sample")
    tier = LocalDirStore(root / "old-hot")
    key = "sample-" + "0" * 32
    tier.write(key, encode_frame(key, b"block bytes"))
    (root / "old-hot" / ".endpoint.json").write_text("{}")
    (root / "cls" / ".tierload-key").write_bytes(b"k" * 32)
    (root / "cls" / ".endpoint.json").write_text("{}")
    listing = ColdSource(f"file://{root}", load_config({}).cold).list_objects()
    assert listing.urls.to_pylist() == [f"file://{root}/cls/0.bin"]
