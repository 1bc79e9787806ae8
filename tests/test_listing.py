"""The columnar listing (:mod:`tierload.stores.cold.listing`): moto over HTTP and real directories."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pyarrow as pa
import pytest
from helpers import put_objects

from tierload.config.loading import load_config
from tierload.errors import SourceNotFoundError
from tierload.stores.cold.listing import ObjectListing
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.source import ColdSource


def cold(s3, url):
    config = load_config({"cold": {"storage_options": dict(s3.storage_options)}})
    return ColdSource(url, config.cold)


def assert_columns(listing: ObjectListing) -> None:
    assert listing.urls.type == pa.large_string() and listing.versions.type == pa.large_string()
    assert isinstance(listing.sizes, np.ndarray) and listing.sizes.dtype == np.int64


def test_s3_listing_pages_folders_markers_and_excludes(s3, bucket):
    """Folders listed concurrently, more than one page each, come back complete, filtered and sorted."""
    name, fs = bucket
    objects = {f"pre/a/{i:05d}.bin": b"x" * (i % 7) for i in range(1001)}  # two pages in one folder
    objects.update({f"pre/b/{i}.bin": b"yy" for i in range(1001)})
    objects.update({"pre/a-b/x.bin": b"1", "pre/a.txt": b"22", "pre/z/sub/deep.bin": b"333",
                    "pre/_SUCCESS": b"", "pre/a/_SUCCESS": b"", "other/no.bin": b"4"})
    put_objects(s3, name, objects)
    for marker in ("pre/", "pre/a/", "pre/z/sub/"):
        fs.call_s3("put_object", Bucket=name, Key=marker, Body=b"")
    fs.invalidate_cache()
    source = cold(s3, f"s3://{name}/pre")
    listing = source.list_objects(exclude=("_SUCCESS",))
    assert_columns(listing)
    expected = sorted(f"s3://{name}/{key}" for key in objects
                      if key.startswith("pre/") and not key.endswith("_SUCCESS"))
    assert listing.urls.to_pylist() == expected  # binary order: "a-b/" < "a.txt" < "a/"
    sizes = {f"s3://{name}/{key}": len(body) for key, body in objects.items()}
    assert listing.sizes.tolist() == [sizes[url] for url in expected]
    for position in (0, 1, 1600, len(listing) - 1):
        info = listing[position]
        assert info == source.head(info.url)  # the version is the ETag a read is checked against
    with_markers_kept = source.list_objects()
    assert len(with_markers_kept) == len(expected) + 2  # the two _SUCCESS, never the markers


def test_s3_prefix_naming_one_object_and_missing_prefix(s3, bucket):
    name, fs = bucket
    fs.pipe_file(f"{name}/one/data.parquet", b"PAR1")
    fs.invalidate_cache()
    [info] = cold(s3, f"s3://{name}/one/data.parquet").list_objects()
    assert info.url == f"s3://{name}/one/data.parquet" and info.size == 4
    assert len(cold(s3, f"s3://{name}/nothing-here").list_objects()) == 0


def test_local_listing_walks_with_scandir(tmp_path):
    root = tmp_path / "data"
    for folder, count in (("0", 3), ("1", 2), ("1/deep", 2)):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            (root / folder / f"{i}.bin").write_bytes(b"z" * (i + 1))
    (root / "_SUCCESS").write_bytes(b"")
    (root / "top.bin").write_bytes(b"")
    source = ColdSource(f"file://{root}", load_config({}).cold)
    listing = source.list_objects(exclude=("_SUCCESS",))
    assert_columns(listing)
    expected = sorted(f"file://{path}" for path in (str(p) for p in root.rglob("*") if p.is_file())
                      if not path.endswith("_SUCCESS"))
    assert listing.urls.to_pylist() == expected
    assert listing.sizes.tolist() == [os.path.getsize(url[len("file://"):]) for url in expected]
    for info in listing:
        assert info == source.head(info.url)
    with pytest.raises(SourceNotFoundError, match="does not exist"):  # not an empty listing: a typo is named
        ColdSource(f"file://{tmp_path}/missing", load_config({}).cold).list_objects()


def test_object_listing_is_a_sequence_of_object_infos():
    objects = [ObjectInfo(f"s3://b/{i}", i, f'"e{i}"') for i in range(5)]
    listing = ObjectListing.of(objects)
    assert list(listing) == objects and listing[-1] == objects[-1] and len(listing) == 5
    assert list(listing[1:4]) == objects[1:4]
    with pytest.raises(IndexError):
        listing[5]


def test_pages_in_any_order_become_one_sorted_listing_and_are_released():
    from tierload.stores.cold.listing import _Page

    pages = [_Page(["s3://b/c/2", "s3://b/c/", "s3://b/c/1"], [2, 0, 1], ['"2"', '"m"', '"1"']),  # unsorted, marker
             _Page(["s3://b/a/x", "s3://b/a/_SUCCESS"], [9, 0], ['"x"', '"s"']),
             _Page([], [], []),
             _Page(["s3://b/b/é", "s3://b/b/z"], [3, 4], ['"e"', '"z"'])]
    listing = ObjectListing.from_pages(pages, exclude=("_SUCCESS",))
    assert_columns(listing)
    assert pages == []  # consumed: the caller's list no longer holds the pages' columns
    assert listing.urls.to_pylist() == ["s3://b/a/x", "s3://b/b/z", "s3://b/b/é", "s3://b/c/1", "s3://b/c/2"]
    assert listing.sizes.tolist() == [9, 4, 3, 1, 2]
    assert listing.versions.to_pylist() == ['"x"', '"z"', '"e"', '"1"', '"2"']
    in_order = [_Page([f"s3://b/{i:02d}" for i in range(5 * p, 5 * p + 5)], [1] * 5, ["v"] * 5) for p in (1, 0)]
    assert ObjectListing.from_pages(in_order).urls.to_pylist() == [f"s3://b/{i:02d}" for i in range(10)]
    assert len(ObjectListing.from_pages([_Page(["s3://b/d/"], [0], ["m"])])) == 0


def test_local_reads_check_the_listed_version_and_read_ranges(tmp_path):
    from tierload.errors import SourceChangedError, SourceNotFoundError

    root = tmp_path / "data"
    root.mkdir()
    (root / "a.bin").write_bytes(b"0123456789")
    (root / "empty.bin").write_bytes(b"")
    source = ColdSource(f"file://{root}", load_config({}).cold)
    a, empty = sorted(source.list_objects(), key=lambda info: info.url)
    tally: dict = {}
    assert source.read_ranges([(a.url, a.version, 0, 10), (a.url, a.version, 3, 4),
                               (empty.url, empty.version, 0, 0)], tally) == [b"0123456789", b"3456", b""]
    assert tally == {"cold_gets": 3, "cold_bytes": 14}
    with pytest.raises(SourceChangedError, match="past the end"):  # never short bytes for a sample
        source.read(a.url, a.version, 8, 100)
    # a pack's worth of members goes to several pool threads: every part in request order, every read counted
    requests = [(a.url, a.version, i % 10, 1) for i in range(37)]
    tally = {}
    assert asyncio.run(source.read_ranges_async(requests, tally)) == [str(i % 10).encode() for i in range(37)]
    assert tally == {"cold_gets": 37, "cold_bytes": 37}
    os.utime(root / "a.bin", (1, 1))  # same size, another mtime: the listed version no longer holds
    with pytest.raises(SourceChangedError):
        source.read(a.url, a.version, 0, 10)
    with pytest.raises(SourceNotFoundError):
        source.read(f"file://{root}/gone.bin", "1.0-1", 0, 1)


def _mapped_from(address: int) -> str:
    """The /proc/self/maps line of the mapping that holds ``address`` ('' when none)."""
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            low, high = (int(part, 16) for part in line.split()[0].split("-"))
            if low <= address < high:
                return line
    return ""


def test_s3_pages_are_spilled_to_disk_and_the_listing_is_mapped(s3, bucket, tmp_path):
    """Pages go to files in spill_dir as they arrive; the sorted columns are mapped files, removed once mapped."""
    name, fs = bucket
    # 1,001 a folder: each folder's listing is two pages (1,000 keys a page), more than one page is the point
    objects = {f"big/{folder}/{i:05d}.bin": b"v" * (i % 5) for folder in ("c", "a", "b") for i in range(1001)}
    put_objects(s3, name, objects)
    fs.invalidate_cache()
    spill = tmp_path / "spill"
    listing = cold(s3, f"s3://{name}/big").list_objects(spill_dir=str(spill))
    assert_columns(listing)
    assert listing.urls.to_pylist() == sorted(f"s3://{name}/{key}" for key in objects)
    assert listing.sizes.tolist() == [len(objects[url.split("/", 3)[3]]) for url in listing.urls.to_pylist()]
    for column in (listing.urls, listing.versions):
        for buffer in column.buffers()[1:]:
            line = _mapped_from(buffer.address)
            assert str(spill) in line and line.rstrip().endswith("(deleted)"), line  # mapped, file removed
    assert not listing.sizes.flags.writeable and str(spill) in _mapped_from(listing.sizes.ctypes.data)
    assert os.listdir(spill) == []  # nothing left behind
    with pytest.raises(Exception):  # noqa: B017 - any typed error; what matters is what is left behind
        cold(s3, "s3://no-such-bucket-here/x").list_objects(spill_dir=str(spill))
    assert os.listdir(spill) == []


def test_spilled_pages_that_overlap_are_sorted_in_memory(tmp_path):
    from tierload.stores.cold.listing_spill import SpilledPages

    pages = SpilledPages(str(tmp_path))
    for urls in (["s3://b/c/1", "s3://b/c/2"], ["s3://b/a/x", "s3://b/c/15"], ["s3://b/b/é", "s3://b/b/z"]):
        pages.add(pa.array(urls, pa.large_string()), np.arange(len(urls), dtype=np.int64),
                  pa.array([f'"{u[-1]}"' for u in urls], pa.large_string()), urls[0], urls[-1], True)
    assert pages.sorted_pages() is None  # the second page overlaps the first
    listing = ObjectListing.from_spill(pages)
    assert listing.urls.to_pylist() == ["s3://b/a/x", "s3://b/b/z", "s3://b/b/é", "s3://b/c/1", "s3://b/c/15",
                                        "s3://b/c/2"]
    assert listing.sizes.tolist() == [0, 1, 0, 0, 1, 1] and os.listdir(tmp_path) == []
    empty = SpilledPages(str(tmp_path))
    assert len(ObjectListing.from_spill(empty)) == 0 and os.listdir(tmp_path) == []
