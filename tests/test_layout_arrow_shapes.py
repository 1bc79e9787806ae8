"""Arrow IPC shapes people have on disk (issue 23 items 3 and 5), planned and decoded block by block
against the table pyarrow wrote: a ``datasets`` ``save_to_disk`` folder as that library lays it out
(``data-0000N-of-0000M.arrow`` in the IPC *stream* format, ``state.json``, ``dataset_info.json``;
written here with pyarrow's stream writer, so it runs where ``datasets`` is not installed), the
file format, the pre-0.15 stream format (no continuation marker), record batches larger than the
walker's window (bodies skipped), a dictionary column, and ``columns=`` with the label column.
Real files (file://), the manifest build and the decoder; no Ray needed.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tierload.config.loading import load_config
from tierload.data.cold_read import read_cold
from tierload.data.manifest_build import build_manifest
from tierload.stores.cold.source import ColdSource


def table(start: int, rows: int, blob_bytes: int = 0) -> pa.Table:
    ids = list(range(start, start + rows))
    columns = {"id": ids, "text": [f"row {i}" for i in ids],
               "lang": pa.array([("en", "fr", "de")[i % 3] for i in ids]).dictionary_encode(),
               "label": [i % 5 for i in ids]}
    if blob_bytes:
        columns["blob"] = [bytes([i % 251]) * blob_bytes for i in ids]
    return pa.table(columns)


def write(path, data: pa.Table, kind: str, batch_rows: int, legacy: bool = False) -> None:
    options = pa.ipc.IpcWriteOptions(use_legacy_format=legacy)
    opener = pa.ipc.new_stream if kind == "stream" else pa.ipc.new_file
    with pa.OSFile(str(path), "wb") as sink, opener(sink, data.schema, options=options) as writer:
        for batch in data.to_batches(max_chunksize=batch_rows):
            writer.write_batch(batch)


def rows(folder, tmp_path, block_bytes: int, columns: list[str] | None = None):
    """``{id: (row, label)}`` of every row the manifest's blocks decode to, and the manifest."""
    config = load_config({"manifest": {"cache_dir": str(tmp_path / "manifests"), "layout": "arrow",
                                       "block_bytes": block_bytes}})
    source = ColdSource(f"file://{folder}", config.cold)
    manifest = build_manifest(source, config.manifest)
    decoder = manifest.decoder(columns=columns)
    got: dict[int, tuple[dict, int]] = {}
    for index, block in enumerate(manifest.blocks):
        samples = decoder.decode(index, read_cold(source, block))
        assert len(samples) == int((manifest.sample_block == index).sum())
        for row, label in samples:
            key = row["id"] if "id" in row else len(got)
            assert key not in got
            got[key] = (row, label)
    return got, manifest


def check(got: dict, start: int, count: int, blob_bytes: int = 0, columns: set[str] | None = None) -> None:
    assert sorted(got) == list(range(start, start + count))
    for i, (row, label) in got.items():
        assert label == i % 5  # manifest.label_column ("label") moved out of the row
        assert set(row) == (columns or {"id", "text", "lang"} | ({"blob"} if blob_bytes else set()))
        assert row["text"] == f"row {i}" and row.get("lang", ("en", "fr", "de")[i % 3]) == ("en", "fr", "de")[i % 3]
        if "blob" in row:
            assert row["blob"] == bytes([i % 251]) * blob_bytes


def test_a_save_to_disk_folder_of_stream_shards(tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    write(folder / "data-00000-of-00002.arrow", table(0, 150), "stream", batch_rows=20)
    write(folder / "data-00001-of-00002.arrow", table(150, 70), "stream", batch_rows=20)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00002.arrow"},
                                                                   {"filename": "data-00001-of-00002.arrow"}]}))
    (folder / "dataset_info.json").write_text("{}")
    got, manifest = rows(folder, tmp_path, block_bytes=2048)
    check(got, 0, 220)
    assert {f["format"] for f in manifest.extra["files"]} == {"stream"}
    assert len(manifest.blocks) > 4 and sorted(manifest.skipped) == [f"file://{folder}/dataset_info.json",
                                                                      f"file://{folder}/state.json"]
    narrow, _ = rows(folder, tmp_path, block_bytes=2048, columns=["id", "text"])
    check(narrow, 0, 220, columns={"id", "text"})


@pytest.mark.parametrize("kind, legacy", [("stream", False), ("stream", True), ("file", False)])
def test_batches_larger_than_the_walkers_window(tmp_path, kind, legacy):
    """300 KB batches (the stream walker reads their headers only) and 1 KB ones, in one file."""
    folder = tmp_path / "big"
    folder.mkdir()
    write(folder / "a.arrow", table(0, 12, blob_bytes=100_000), kind, batch_rows=3, legacy=legacy)
    write(folder / "b.arrow", table(12, 40), kind, batch_rows=4, legacy=legacy)
    got, manifest = rows(folder, tmp_path, block_bytes=64 * 1024)
    check({i: v for i, v in got.items() if i < 12}, 0, 12, blob_bytes=100_000)
    check({i: v for i, v in got.items() if i >= 12}, 12, 40)
    big = [b for b in manifest.blocks if b.url.endswith("a.arrow")]
    assert len(big) == 4  # one 300 KB batch a block: larger than block_bytes, never split
