"""Names and byte ranges as they come (issue 12 item 7): non-UTF-8 file names, zero-length reads
and objects, ranges past the end of an object.

Real things only: moto's S3 server over HTTP behind the fault proxy (which counts the GETs that
reach it), real files with real byte names.
"""

from __future__ import annotations

import logging
import os

import pytest
from cases_common import proxied
from test_cold_async import source_for

from tierload.config.loading import load_config
from tierload.config.models import ManifestConfig
from tierload.data.manifest_build import build_manifest
from tierload.errors import ManifestError, SourceChangedError
from tierload.stores.cold.listing import NOT_UTF8
from tierload.stores.cold.source import ColdSource


@pytest.fixture
def odd_names(tmp_path):
    root = tmp_path / "names"
    (root / "sub").mkdir(parents=True)
    os.makedirs(os.fsencode(root) + b"/r\xe9pertoire")
    with open(os.fsencode(root) + b"/caf\xe9.bin", "wb") as handle:  # Latin-1 'café': not UTF-8
        handle.write(b"latin")
    with open(os.fsencode(root) + b"/r\xe9pertoire/inside.bin", "wb") as handle:
        handle.write(b"inside")
    (root / "ok.bin").write_bytes(b"fine")
    (root / "sub" / "caf\u00e9.bin").write_bytes(b"utf-8 name")  # a UTF-8 'café' is read as usual
    return root


def test_file_names_that_are_not_utf8_are_skipped_with_the_reason(odd_names, caplog):
    """Case B38: a file:// name holding byte 0xE9 is skipped, its reason in manifest.skipped; no UnicodeEncodeError"""
    source = ColdSource(f"file://{odd_names}", load_config({}).cold)
    with caplog.at_level(logging.WARNING, logger="tierload"):
        manifest = build_manifest(source, ManifestConfig(pack_target_bytes=0), layout="files")
    assert sorted(block.url.removeprefix(f"file://{odd_names}/") for block in manifest.blocks) == [
        "ok.bin", "sub/caf\u00e9.bin"]
    assert manifest.skipped == {f"file://{odd_names}/caf\\xe9.bin": NOT_UTF8,
                                f"file://{odd_names}/r\\xe9pertoire/inside.bin": NOT_UTF8}
    assert "2 files" in caplog.text and "not UTF-8" in caplog.text
    readable = next(block for block in manifest.blocks if block.url.endswith("caf\u00e9.bin"))
    assert source.read(readable.url, readable.version, 0, readable.length) == b"utf-8 name"


def test_a_prefix_of_only_unreadable_names_says_so(tmp_path):
    """Case B38: a prefix of only non-UTF-8 names is a ManifestError naming the reason, not UnicodeEncodeError"""
    with open(os.fsencode(tmp_path) + b"/\xff.bin", "wb") as handle:
        handle.write(b"x")
    source = ColdSource(f"file://{tmp_path}", load_config({}).cold)
    with pytest.raises(ManifestError, match="holds no objects; 1 skipped.*not valid UTF-8"):
        build_manifest(source, ManifestConfig(pack_target_bytes=0), layout="files")


@pytest.fixture(params=["obstore", "aiobotocore"])
def s3_objects(request, s3, bucket, faulty_s3):
    name, fs = bucket
    fs.pipe({f"{name}/ds/full.bin": bytes(range(100)), f"{name}/ds/empty.bin": b""})
    fs.invalidate_cache()
    source = source_for(f"s3://{name}/ds", proxied(s3, faulty_s3), s3_engine=request.param)
    objects = {obj.url.rsplit("/", 1)[-1]: obj for obj in source.list_objects()}
    return source, objects, faulty_s3, fs, name


def test_zero_bytes_cost_one_tiny_get_and_read_as_empty(s3_objects):
    source, objects, proxy, _, _ = s3_objects
    full, empty = objects["full.bin"], objects["empty.bin"]
    tally: dict = {}
    assert source.read(full.url, full.version, 0, 0, tally) == b""
    assert source.read(full.url, full.version, 40, 0, tally) == b""
    assert source.read(empty.url, empty.version, 0, 0, tally) == b""
    assert source.read(empty.url, empty.version) == b""  # length from the HEAD: the whole empty object
    assert proxy.faults.gets["ds/full.bin"] == 2 and proxy.faults.gets["ds/empty.bin"] == 2  # never retried
    assert tally["cold_bytes"] == 0


def test_a_range_past_the_end_is_one_clear_error_not_retried(s3_objects):
    source, objects, proxy, _, _ = s3_objects
    full = objects["full.bin"]
    with pytest.raises(SourceChangedError, match=r"bytes \[90, 110\) reach past the end of the object \(100 bytes"):
        source.read(full.url, full.version, 90, 20)
    assert proxy.faults.gets["ds/full.bin"] == 1
    with pytest.raises(SourceChangedError, match="starts past the end of the object"):
        source.read(full.url, full.version, 150, 10)
    assert proxy.faults.gets["ds/full.bin"] == 2
    assert source.read(full.url, full.version, 90, 10) == bytes(range(90, 100))  # up to the end: exact bytes


def test_an_object_that_shrank_after_the_listing_is_never_served(s3_objects):
    source, objects, proxy, fs, name = s3_objects
    full, empty = objects["full.bin"], objects["empty.bin"]
    fs.pipe({f"{name}/ds/full.bin": bytes(range(50)), f"{name}/ds/empty.bin": b"grew"})
    with pytest.raises(SourceChangedError):
        source.read(full.url, full.version, 0, 100)
    with pytest.raises(SourceChangedError):
        source.read(empty.url, empty.version, 0, 0)  # zero bytes of a changed object: still a changed object
    assert proxy.faults.gets["ds/full.bin"] == 1 and proxy.faults.gets["ds/empty.bin"] == 1


def test_local_files_past_their_end_or_empty(tmp_path):
    (tmp_path / "full.bin").write_bytes(bytes(range(100)))
    (tmp_path / "empty.bin").write_bytes(b"")
    source = ColdSource(f"file://{tmp_path}", load_config({}).cold)
    objects = {obj.url.rsplit("/", 1)[-1]: obj for obj in source.list_objects()}
    full, empty = objects["full.bin"], objects["empty.bin"]
    assert source.read(empty.url, empty.version, 0, 0) == b""
    assert source.read(full.url, full.version, 10, 0) == b""
    with pytest.raises(SourceChangedError, match=r"bytes \[90, 110\) reach past the end of the object \(100 bytes"):
        source.read(full.url, full.version, 90, 20)
    (tmp_path / "full.bin").write_bytes(bytes(range(50)))
    with pytest.raises(SourceChangedError):
        source.read(full.url, full.version, 0, 100)
