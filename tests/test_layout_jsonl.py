"""JSONL and text lines read in place (issue 23 item 2): records exact across block cuts, plain,
.zst and .gz, a bad line named by file and line number, or left out and counted.

Real moto S3 over HTTP and real files (file://), a real local Ray, real tier directories.
"""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from tierload.errors import BadLineError

BLOCK = 200  # bytes: far smaller than the files, so cuts fall inside lines


def records(count: int, start: int = 0) -> list[dict]:
    # lengths vary from a few bytes to several cuts long
    return [{"id": i, "text": "x" * ((i * 37) % 450), "tags": [i % 3, None]} for i in range(start, start + count)]


def jsonl_text(rows: list[dict], crlf_every: int = 5) -> bytes:
    """JSON lines with blank lines, some CRLF endings, and no newline after the last line."""
    out = []
    for i, row in enumerate(rows):
        out.append(json.dumps(row).encode() + (b"\r\n" if i % crlf_every == 0 else b"\n"))
        if i % 7 == 3:
            out.append(b"\n" if i % 2 else b"\r\n")  # blank lines are not records
    return b"".join(out).rstrip(b"\n")


def read_all(dataset) -> list:
    got = []
    for record, label in dataset:
        assert label == -1
        got.append(record)
    return got


def test_jsonl_records_are_exact_across_block_cuts(bucket, module_tier_config, module_dataset):
    name, fs = bucket
    first, second = records(60), records(45, start=60)
    texts = {"a.jsonl": jsonl_text(first), "b.jsonl": jsonl_text(second) + b"\n"}
    for key, text in texts.items():
        fs.pipe_file(f"{name}/corpus/{key}", text)
    fs.pipe_file(f"{name}/corpus/README.md", b"# not a record")
    fs.invalidate_cache()
    dataset = module_dataset(f"s3://{name}/corpus", module_tier_config(manifest={"block_bytes": BLOCK}), layout="jsonl")
    manifest = dataset.manifest
    assert "not a .jsonl" in manifest.skipped[f"s3://{name}/corpus/README.md"]
    assert manifest.num_samples == 105
    assert len(manifest.blocks) > 10
    for key, text in texts.items():
        spans = sorted((b.offset, b.offset + b.length) for b in manifest.blocks if b.url.endswith(key))
        # no byte in two blocks; between blocks only blank lines (a cut holding nothing else is no block)
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert end <= start and not text[end:start].strip()
        assert not text[spans[-1][1]:].strip()
    for epoch in range(2):
        dataset.set_epoch(epoch)
        got = read_all(dataset)
        assert sorted(got, key=lambda r: r["id"]) == first + second
    assert dataset.epoch_stats(0)["cold_bytes"] == manifest.total_bytes


def test_text_lines_are_raw_bytes_across_cuts(tmp_path, module_tier_config, module_dataset):
    source = tmp_path / "text"
    source.mkdir()
    lines = [f"line {i} ".encode() + b"y" * ((i * 53) % 500) for i in range(80)]
    (source / "part.txt").write_bytes(b"\n".join(lines) + b"\n")
    dataset = module_dataset(f"file://{source}", module_tier_config(manifest={"block_bytes": BLOCK}), layout="lines",
                           storage_options={})
    assert len(dataset.manifest.blocks) > 10
    assert sorted(read_all(dataset)) == sorted(lines)


@pytest.mark.parametrize("codec", ["zst", "gz"])
def test_compressed_jsonl_is_one_block_per_file(tmp_path, module_tier_config, module_dataset, codec):
    source = tmp_path / f"compressed-{codec}"
    source.mkdir()
    compress = zstandard.ZstdCompressor().compress if codec == "zst" else gzip.compress
    shards = [records(40), records(30, start=40)]
    for index, rows in enumerate(shards):
        (source / f"shard-{index}.jsonl.{codec}").write_bytes(compress(jsonl_text(rows)))
    dataset = module_dataset(f"file://{source}", module_tier_config(manifest={"block_bytes": BLOCK}), layout="jsonl",
                           storage_options={})
    manifest = dataset.manifest
    assert manifest.num_samples == 70
    assert len(manifest.blocks) == 2 and all(b.offset == 0 for b in manifest.blocks)
    assert sorted(read_all(dataset), key=lambda r: r["id"]) == shards[0] + shards[1]


def bad_corpus(fs, prefix: str) -> tuple[list[dict], int]:
    """A JSONL file whose 31st line is not JSON: the good records and that line's number."""
    rows = records(50)
    lines = [json.dumps(row).encode() for row in rows]
    lines.insert(30, b'{"id": 999, "text": "unterminated')
    fs.pipe_file(f"{prefix}/bad.jsonl", b"\n".join(lines) + b"\n")
    fs.invalidate_cache()
    return rows, 31


def test_a_bad_line_is_an_error_naming_file_and_line(bucket, module_tier_config, module_dataset):
    name, fs = bucket
    _rows, line = bad_corpus(fs, f"{name}/bad")
    dataset = module_dataset(f"s3://{name}/bad", module_tier_config(manifest={"block_bytes": BLOCK}), shuffle=False)
    assert dataset.manifest.num_samples == 51  # counted as a record: found when its block is decoded
    with pytest.raises(BadLineError, match=rf"bad\.jsonl line {line} is not JSON.*on_bad_lines: skip") as caught:
        read_all(dataset)
    assert caught.value.line == line and caught.value.url == f"s3://{name}/bad/bad.jsonl"


def test_skip_leaves_bad_lines_out_and_counts_them(bucket, module_tier_config, module_dataset):
    name, fs = bucket
    rows, line = bad_corpus(fs, f"{name}/skip")
    config = module_tier_config(manifest={"block_bytes": BLOCK, "on_bad_lines": "skip"})
    dataset = module_dataset(f"s3://{name}/skip", config)
    assert dataset.manifest.num_samples == 50
    assert dataset.manifest.extra["bad_lines"] == {f"s3://{name}/skip/bad.jsonl": [line]}
    assert sorted(read_all(dataset), key=lambda r: r["id"]) == rows
