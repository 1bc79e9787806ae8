"""JSONL records at every cut (issue 23 items 2 and 5): for every block size from 1 byte to past the
file, the blocks the manifest plans decode to exactly the records a plain reading of the file
gives, each once, whatever line the cut falls in (CRLF, blank lines, a last line without a
newline, multi-byte UTF-8); a bad line is named by file and line number, or left out and counted,
in plain and compressed files alike. Real files (file://), the manifest build and the decoder;
no Ray needed.
"""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from tierload.config.loading import load_config
from tierload.data.cold_read import read_cold
from tierload.data.manifest_build import build_manifest
from tierload.errors import BadLineError
from tierload.stores.cold.source import ColdSource


def text_of(rows: list[dict]) -> bytes:
    """Lines of varied length, some CRLF, blank lines between, non-ASCII text, no final newline."""
    out = []
    for i, row in enumerate(rows):
        out.append(json.dumps(row, ensure_ascii=False).encode() + (b"\r\n" if i % 3 == 0 else b"\n"))
        if i % 4 == 1:
            out.append(b"\n" if i % 8 == 1 else b"\r\n")
    return b"".join(out).rstrip(b"\r\n")


def rows_of(count: int) -> list[dict]:
    return [{"id": i, "text": "é" * (i % 9) + "x" * ((i * 13) % 40)} for i in range(count)]


def records(folder, tmp_path, block_bytes: int, **manifest):
    """Every record the manifest's blocks decode to, in block order, and the manifest."""
    config = load_config({"manifest": {"cache_dir": str(tmp_path / f"m{block_bytes}"), "layout": "jsonl",
                                       "block_bytes": block_bytes, **manifest}})
    source = ColdSource(f"file://{folder}", config.cold)
    manifest = build_manifest(source, config.manifest)
    decoder = manifest.decoder()
    decoded = [decoder.decode(i, read_cold(source, block)) for i, block in enumerate(manifest.blocks)]
    assert [len(d) for d in decoded] == [int((manifest.sample_block == i).sum()) for i in range(len(decoded))]
    return [record for block in decoded for record, label in block if label == -1], manifest


def test_every_cut_gives_every_record_once(tmp_path):
    rows = rows_of(12)
    text = text_of(rows)
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(text)
    for block_bytes in range(1, len(text) + 2):
        got, manifest = records(folder, tmp_path, block_bytes)
        assert got == rows, block_bytes
        spans = [(b.offset, b.offset + b.length) for b in manifest.blocks]
        assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False)), block_bytes


@pytest.mark.parametrize("codec", ["none", "gz", "zst"])
def test_bad_line_named_or_skipped_and_counted_in_plain_and_compressed_files(tmp_path, codec):
    rows = rows_of(30)
    lines = [json.dumps(row).encode() for row in rows]
    lines.insert(20, b'{"id": 777, oops}')  # line 21
    lines.append(b'{"id": 778')  # line 32, the last, without a newline
    text = b"\n".join(lines)
    name = {"none": "bad.jsonl", "gz": "bad.jsonl.gz", "zst": "bad.jsonl.zst"}[codec]
    data = {"none": text, "gz": gzip.compress(text), "zst": zstandard.ZstdCompressor().compress(text)}[codec]
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / name).write_bytes(data)
    with pytest.raises(BadLineError, match=rf"{name} line 21 is not JSON") as caught:
        records(folder, tmp_path, 97)
    assert caught.value.line == 21 and caught.value.url == f"file://{folder}/{name}"
    got, manifest = records(folder, tmp_path, 97, on_bad_lines="skip")
    assert got == rows and manifest.num_samples == 30
    assert manifest.extra["bad_lines"] == {f"file://{folder}/{name}": [21, 32]}
