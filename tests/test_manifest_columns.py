"""A manifest file mapped without pyarrow: its string columns, its column index, and every way the
index can be unusable (missing, of another file, corrupt, out of range), each read right by pyarrow.

Real files: real listings of real directories, real Arrow IPC manifests written and mapped.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from tierload.config.loading import load_config
from tierload.config.models import ManifestConfig
from tierload.data.manifest import open_manifest
from tierload.data.manifest_arrow import arrow_columns, save_manifest
from tierload.data.manifest_build import build_manifest
from tierload.data.manifest_columns import index_path, indexed_columns
from tierload.data.string_column import StringColumn
from tierload.stores.cold.source import ColdSource


def test_a_string_column_reads_what_arrow_holds():
    values = ["", "a", "ünïcode", "", "s3://b/k/" + "x" * 300, "last"]
    arrow = pa.array(values, pa.large_string())
    for column in (StringColumn.of(values), StringColumn.of_arrow(arrow)):
        assert len(column) == len(values) and list(column) == values and column.to_list() == values
        assert [column[i] for i in range(len(values))] == values and column[-1] == "last"
        assert column.window(1, 3) == values[1:3] and column.window(4, 99) == values[4:] and column.window(3, 3) == []
        assert bytes(column.joined_bytes()) == "".join(values).encode()
        assert column.to_arrow().equals(arrow)
        with pytest.raises(IndexError, match="string index 6 outside 0..5"):
            column[6]
    sliced = StringColumn.of_arrow(arrow.slice(2, 3))  # an array offset into its buffers
    assert sliced.to_list() == values[2:5] and sliced.to_arrow().to_pylist() == values[2:5]
    over = StringColumn.of_arrow(arrow)
    assert over.data.__array_interface__["data"][0] == arrow.buffers()[2].address  # the same bytes, no copy
    assert StringColumn.of_arrow(pa.array(["", ""], pa.large_string())).to_list() == ["", ""]


def test_a_string_column_refuses_columns_it_cannot_read():
    with pytest.raises(ValueError, match="int64"):
        StringColumn(np.zeros(2, np.int32), np.zeros(0, np.uint8))
    with pytest.raises(ValueError, match="past the 3 bytes"):
        StringColumn(np.array([0, 5], np.int64), np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="large_string without nulls"):
        StringColumn.of_arrow(pa.array(["a"], pa.string()))
    with pytest.raises(ValueError, match="large_string without nulls"):
        StringColumn.of_arrow(pa.array(["a", None], pa.large_string()))


def _save(tmp_path, name: str, *, packed: bool = True, salt: int = 0):
    """A listing of real files (packed small ones and large ones), built and saved at ``tmp_path/name``."""
    root = tmp_path / f"data-{name}"
    for folder in ("a", "b"):
        (root / folder).mkdir(parents=True)
        for i in range(40):
            size = 3000 if i % 5 == 0 or not packed else 30 + i + salt
            (root / folder / f"obj-{i:03d}.bin").write_bytes(bytes([i % 251]) * size)
    source = ColdSource(f"file://{root}", load_config(None).cold)
    manifest = build_manifest(source, ManifestConfig(pack_threshold_bytes=1000, pack_target_bytes=500), "files")
    path = tmp_path / name
    save_manifest(manifest, path)
    return manifest, path


def _same_columns(path) -> None:
    by_index, by_arrow = indexed_columns(path), arrow_columns(path)
    assert by_index is not None and by_index.meta == by_arrow.meta
    assert by_index.numbers.keys() == by_arrow.numbers.keys() and by_index.strings.keys() == by_arrow.strings.keys()
    for name, values in by_arrow.numbers.items():
        assert by_index.numbers[name].dtype == values.dtype and np.array_equal(by_index.numbers[name], values), name
    for name, strings in by_arrow.strings.items():
        assert by_index.strings[name].to_list() == strings.to_list(), name


def test_the_column_index_maps_every_column_as_pyarrow_reads_it(tmp_path):
    for name, packed in (("packed.arrow", True), ("plain.arrow", False)):  # plain: empty member columns
        manifest, path = _save(tmp_path, name, packed=packed)
        assert index_path(path).is_file() and (manifest.num_packs > 0) == packed
        _same_columns(path)
        opened = open_manifest(path)
        assert opened.blocks == manifest.blocks and opened.dataset_id == manifest.dataset_id
        assert np.array_equal(opened.sample_block, manifest.sample_block)
        assert not opened.sample_block.flags.writeable  # a view of the mapped file


_READ_WITHOUT_ARROW = """
import json, sys
from tierload.data.block_columns import block_key_at, block_url_at
from tierload.data.manifest import open_manifest
manifest = open_manifest(sys.argv[1])
keys = [block_key_at(manifest.blocks, i) for i in range(len(manifest.blocks))]
spans = [manifest.pack_index.span(i)[2].tolist() for i in range(len(manifest.blocks))]
print(json.dumps({"keys": keys, "spans": spans, "url": block_url_at(manifest.blocks, 0),
                  "dataset_id": manifest.dataset_id, "labels": manifest.labels.tolist(),
                  "arrow": sorted(m for m in sys.modules if m.split(".")[0] == "pyarrow")}))
"""


def test_a_process_reads_keys_spans_and_labels_of_a_mapped_manifest_without_pyarrow(tmp_path):
    """What a training process reads of its manifest (each block's key, each sample's span and label,
    the dataset id) in a fresh interpreter: the same values, and pyarrow never imported."""
    manifest, path = _save(tmp_path, "m.arrow")
    done = subprocess.run([sys.executable, "-c", _READ_WITHOUT_ARROW, str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert read["arrow"] == []
    assert read["keys"] == [b.key for b in manifest.blocks] and read["url"] == manifest.blocks[0].url
    assert read["spans"] == [manifest.pack_index.span(i)[2].tolist() for i in range(len(manifest.blocks))]
    assert read["labels"] == manifest.labels.tolist() and read["dataset_id"] == manifest.dataset_id


def test_an_unusable_index_is_passed_over_and_the_file_read_with_pyarrow(tmp_path, caplog):
    manifest, path = _save(tmp_path, "m.arrow")
    index = index_path(path)
    good = index.read_text()
    # Missing (a file written before indexes existed): pyarrow reads it, silently.
    index.unlink()
    assert indexed_columns(path) is None and open_manifest(path).blocks == manifest.blocks
    # Of another file: the manifest rewritten at the same path (another listing), the old index put back.
    other, _ = _save(tmp_path, "other.arrow", salt=7)
    shutil.copyfile(tmp_path / "other.arrow", path)
    index.write_text(good)
    assert indexed_columns(path) is None
    assert open_manifest(path).blocks == other.blocks and open_manifest(path).blocks != manifest.blocks
    # Corrupt, or naming bytes past the end of its file: logged, then pyarrow reads the file.
    manifest, path = _save(tmp_path, "m2.arrow")
    index = index_path(path)
    entries = json.loads(index.read_text())
    broken = json.loads(json.dumps(entries))
    broken["columns"]["sample_block"]["offset"] = os.path.getsize(path)
    for text in ("{not json", json.dumps(broken)):
        index.write_text(text)
        with caplog.at_level(logging.WARNING, logger="tierload.data.manifest_columns"):
            caplog.clear()
            assert indexed_columns(path) is None
        assert "unreadable" in caplog.text and str(path) in caplog.text
        opened = open_manifest(path)
        assert opened.blocks == manifest.blocks and np.array_equal(opened.sample_block, manifest.sample_block)


def test_saving_over_a_manifest_replaces_its_index(tmp_path):
    first, path = _save(tmp_path, "m.arrow")
    second, other = _save(tmp_path, "n.arrow", salt=3)
    save_manifest(second, path)  # the same path, another manifest: the index follows the file
    assert indexed_columns(path) is not None
    assert open_manifest(path).blocks == second.blocks and open_manifest(path).dataset_id == second.dataset_id
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "m.arrow", "m.arrow.columns.json", "n.arrow", "n.arrow.columns.json"]  # no partial file left


_JOIN_AN_OLD_CACHE = """
import json, sys
from tierload.config.models import ColdConfig, ManifestConfig
from tierload.data.block_columns import block_keys
from tierload.data.manifest_columns import index_path
from tierload.data.manifest_helper import load_manifest_apart
from tierload.stores.cold.source import ColdSource
settings = ManifestConfig(cache_dir=sys.argv[2], pack_threshold_bytes=1000, pack_target_bytes=500)
manifest, path = load_manifest_apart(ColdSource(sys.argv[1], ColdConfig()), settings, "files")
print(json.dumps({"keys": block_keys(manifest.blocks), "indexed": index_path(path).is_file(),
                  "arrow": "pyarrow" in sys.modules}))
"""


def test_a_manifest_cached_without_an_index_gets_one_from_the_helper(tmp_path):
    """A file an older tierload cached (no column index): the next job's forked helper writes its
    index, nothing is listed again, and the job maps it without ever importing pyarrow."""
    from tierload.data.manifest_build import load_manifest

    manifest, _ = _save(tmp_path, "unused.arrow")
    url = manifest.url
    settings = ManifestConfig(cache_dir=str(tmp_path / "cache"), pack_threshold_bytes=1000, pack_target_bytes=500)
    cached = load_manifest(ColdSource(url, load_config(None).cold), settings, "files")
    (path,) = (tmp_path / "cache").glob("*.arrow")
    index_path(path).unlink()  # as an older tierload left it
    listed_at = os.stat(path).st_mtime_ns
    done = subprocess.run([sys.executable, "-c", _JOIN_AN_OLD_CACHE, url, str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    joined = json.loads(done.stdout.strip().splitlines()[-1])
    assert joined == {"keys": [block.key for block in cached.blocks], "indexed": True, "arrow": False}
    assert os.stat(path).st_mtime_ns == listed_at  # the same file, not listed again
    _same_columns(path)


def test_a_file_that_is_not_a_manifest_gets_no_index(tmp_path):
    from tierload.data.manifest_arrow import index_manifest
    from tierload.errors import ManifestError

    path = tmp_path / "m.arrow"
    path.write_bytes(b"ARROW1" + b"\0" * 100)
    with pytest.raises(ManifestError, match="is not a tierload manifest"):
        index_manifest(path)
    assert not index_path(path).exists()
