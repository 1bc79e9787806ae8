"""JSONL and text files read in place: every line is a sample.

Two layouts share this module: ``jsonl`` yields each line parsed as JSON (a ``dict`` for an
object line), ``lines`` each line's raw bytes. Files may be plain (``.jsonl``, ``.ndjson``,
``.txt``) or compressed (the same names ending ``.zst`` or ``.gz``); other objects are skipped.

Blocks. A plain file is cut at multiples of ``manifest.block_bytes``, and a block owns the lines
that *start* in its cut: its byte range begins at its first such line (a partial first line
belongs to the block before) and runs on past the cut to the end of its last line. So records
are whole and each is in exactly one block, however the cuts fall. A compressed file cannot be
split (a byte range of a zstd or gzip stream does not decode alone), so it is one block, and
its whole text is decompressed in memory when decoded: keep compressed files to a few hundred
MB (most corpora ship shards of that size).

Listing. Line numbers and counts must be known before the first epoch (they are the samples),
so the manifest build reads every file once, sequentially in large ranged GETs (a compressed
file is decompressed as it streams past), and caches the result like any manifest.

Lines. ``\\n`` ends a line; a ``\\r`` before it is dropped; the last line needs no newline.
Blank lines (nothing, or only ``\\r``) are not records. Line numbers count every line of the
(decompressed) file from 1, blank ones included, as an editor shows them.

Bad lines (``jsonl``). With ``manifest.on_bad_lines: error`` (the default) a line that is not
JSON raises :class:`tierload.errors.BadLineError` naming the file and line when its block is
decoded. With ``skip`` the manifest build parses every line, leaves the bad ones out of the
samples, logs them and counts them in ``manifest.extra["bad_lines"]`` (``{file: [line, ...]}``):
no record is dropped silently either way.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any, Iterator, Sequence, cast

import numpy as np
import zstandard

from tierload.data.blocks import Block
from tierload.data.layouts.base import LayoutPlan
from tierload.errors import BadLineError, DecodeError, ManifestError
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.source import ColdSource

log = logging.getLogger(__name__)

JSONL_SUFFIXES = (".jsonl", ".ndjson")
TEXT_SUFFIXES = (".txt",)
CODECS = {".zst": "zstd", ".gz": "gzip"}
SCAN_BYTES = 8 * 2**20  # one ranged GET (and one decompressed chunk) of the listing's scan
_NEWLINE, _CR = 10, 13
_NOT_DECOMPRESSED = (zstandard.ZstdError, gzip.BadGzipFile, EOFError, zlib.error)


def codec_of(url: str, suffixes: Sequence[str]) -> str | None:
    """``"none"``, ``"zstd"`` or ``"gzip"`` for a name ending in one of ``suffixes`` (optionally
    followed by ``.zst``/``.gz``); None for any other name."""
    name = url.lower()
    codec = "none"
    for ending, kind in CODECS.items():
        if name.endswith(ending):
            name, codec = name[:-len(ending)], kind
            break
    return codec if name.endswith(tuple(suffixes)) else None


class _ColdStream(io.RawIOBase):
    """An object of the cold tier as a sequential, read-only stream (ranged GETs of ``SCAN_BYTES``)."""

    def __init__(self, source: ColdSource, obj: ObjectInfo) -> None:
        super().__init__()
        self._source, self._obj, self._pos = source, obj, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        want = min(len(buffer), SCAN_BYTES, self._obj.size - self._pos)
        if want <= 0:
            return 0
        data = self._source.read(self._obj.url, self._obj.version, self._pos, want)
        buffer[:len(data)] = data
        self._pos += len(data)
        return len(data)


def _text_chunks(source: ColdSource, obj: ObjectInfo, codec: str) -> Iterator[bytes]:
    """The file's (decompressed) text in chunks of about ``SCAN_BYTES``, in order.

    Raises:
        ManifestError: A compressed file does not decompress.
    """
    raw = cast(IO[bytes], _ColdStream(source, obj))
    stream: Any
    if codec == "zstd":
        stream = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    elif codec == "gzip":
        stream = gzip.GzipFile(fileobj=raw)
    else:
        stream = io.BufferedReader(raw, SCAN_BYTES)
    try:
        while chunk := stream.read(SCAN_BYTES):
            yield chunk
    except _NOT_DECOMPRESSED as exc:  # a cold read's own errors (BackendError ...) pass through
        raise ManifestError(f"{codec} file does not decompress: {exc}", tier="cold", url=obj.url) from exc


@dataclass
class _BlockLines:
    """What the scan learnt about one block: its byte range, records and line numbers."""

    start: int
    end: int
    records: int
    first_line: int
    bad: list[int] = field(default_factory=list)


class _LineScan:
    """Lines of one file as its text streams past, each given to the block its start falls in.

    Args:
        block_bytes: Cut size in bytes (None: the whole file is one block).
        check_json: Parse every line and record the ones that are not JSON (``on_bad_lines: skip``).
    """

    def __init__(self, block_bytes: int | None, check_json: bool) -> None:
        self.block_bytes = block_bytes
        self.check_json = check_json
        self.blocks: dict[int, _BlockLines] = {}
        self._carry = b""
        self._carry_at = 0  # offset of the carried partial line in the file's text
        self._line = 1  # number of the next line

    def feed(self, data: bytes) -> None:
        buf = self._carry + data
        ends = np.flatnonzero(np.frombuffer(buf, np.uint8) == _NEWLINE)
        if len(ends):
            self._lines(buf, ends)
            cut = int(ends[-1]) + 1
            self._carry, self._carry_at = buf[cut:], self._carry_at + cut
        else:
            self._carry = buf

    def finish(self) -> list[_BlockLines]:
        """The blocks, in file order; blocks with neither a record nor a bad line are left out
        (a block of bad lines alone is kept so that its lines are counted; it plans no block)."""
        if self._carry:  # a last line without a newline
            size = self._carry_at + len(self._carry)
            self._lines(self._carry + b"\n", np.array([len(self._carry)], np.int64))
            for block in self.blocks.values():
                block.end = min(block.end, size)
        return [block for _, block in sorted(self.blocks.items()) if block.records or block.bad]

    def _lines(self, buf: bytes, ends: np.ndarray) -> None:
        """Account the lines of ``buf`` that end at the newlines ``ends`` (``buf`` starts a line)."""
        starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
        lengths = ends - starts
        last = np.frombuffer(buf, np.uint8)[np.maximum(ends - 1, 0)]
        records = ~((lengths == 0) | ((lengths == 1) & (last == _CR)))
        numbers = self._line + np.arange(len(ends), dtype=np.int64)
        bad: set[int] = set()
        if self.check_json:
            for i in np.flatnonzero(records).tolist():
                try:
                    json.loads(buf[starts[i]:ends[i]])
                except ValueError:
                    bad.add(i)
            if bad:
                records[sorted(bad)] = False
        at = self._carry_at + starts
        owners = at // self.block_bytes if self.block_bytes else np.zeros(len(at), np.int64)
        cuts = np.flatnonzero(np.diff(owners)) + 1
        for lo, hi in zip(np.concatenate(([0], cuts)).tolist(), np.concatenate((cuts, [len(at)])).tolist(),
                          strict=True):
            owner = int(owners[lo])
            block = self.blocks.get(owner)
            if block is None:
                block = self.blocks[owner] = _BlockLines(int(at[lo]), 0, 0, int(numbers[lo]))
            block.end = self._carry_at + int(ends[hi - 1]) + 1
            block.records += int(records[lo:hi].sum())
            block.bad.extend(int(numbers[i]) for i in sorted(bad) if lo <= i < hi)
        self._line += len(ends)


def _scan(source: ColdSource, obj: ObjectInfo, codec: str, block_bytes: int,
          check_json: bool) -> list[_BlockLines]:
    scan = _LineScan(block_bytes if codec == "none" else None, check_json)
    for chunk in _text_chunks(source, obj, codec):
        scan.feed(chunk)
    blocks = scan.finish()
    if codec != "none":  # the block is the whole compressed object, whatever its text's length
        for block in blocks:
            block.start, block.end = 0, obj.size
    return blocks


def plan_lines(source: ColdSource, objects: list[ObjectInfo], *, block_bytes: int, parse: bool,
               on_bad_lines: str = "error") -> LayoutPlan:
    """Blocks = runs of whole lines (a compressed file: all of it); samples = non-blank lines.

    Args:
        source: The cold tier under the dataset prefix.
        objects: The listing.
        block_bytes: Where plain files are cut (bytes); a block owns the lines starting in its cut.
        parse: ``jsonl`` (lines are JSON: ``.jsonl``/``.ndjson`` files) rather than ``lines``
            (``.txt`` files, raw bytes).
        on_bad_lines: ``"skip"``: parse every line now and leave the bad ones out (counted in
            ``extra["bad_lines"]``); ``"error"``: decoding raises on them.

    Raises:
        ManifestError: No file holds a line, or a compressed file does not decompress.
    """
    suffixes = JSONL_SUFFIXES if parse else TEXT_SUFFIXES
    files: list[tuple[ObjectInfo, str]] = []
    skipped: dict[str, str] = {}
    for obj in objects:
        codec = codec_of(obj.url, suffixes)
        if codec is None:
            skipped[obj.url] = f"not a {'/'.join(suffixes)} file (optionally .zst or .gz)"
        elif obj.size == 0:
            skipped[obj.url] = "zero-byte file holds no lines"
        else:
            files.append((obj, codec))
    check_json = parse and on_bad_lines == "skip"
    with ThreadPoolExecutor(max_workers=8) as pool:
        scans = list(pool.map(lambda item: _scan(source, item[0], item[1], block_bytes, check_json), files))
    blocks: list[Block] = []
    counts: list[int] = []
    block_lines: list[list[Any]] = []
    bad_lines: dict[str, list[int]] = {}
    for file_index, ((obj, _codec), scanned) in enumerate(zip(files, scans, strict=True)):
        if not any(block.records for block in scanned):
            skipped[obj.url] = ("holds no record: only blank lines and lines that are not JSON (see bad_lines)"
                                if any(block.bad for block in scanned) else "holds only blank lines")
        for block in scanned:
            if block.bad:  # counted even where the block holds no record and plans no block
                bad_lines.setdefault(obj.url, []).extend(block.bad)
            if not block.records:
                continue
            blocks.append(Block.of(obj.url, obj.version, block.start, block.end - block.start))
            counts.append(block.records)
            block_lines.append([file_index, block.first_line, block.bad])
    for url, numbers in bad_lines.items():
        log.warning("%s: %d lines are not JSON and are left out (manifest.on_bad_lines: skip): lines %s%s", url,
                    len(numbers), numbers[:10], " ..." if len(numbers) > 10 else "")
    if not blocks:
        raise ManifestError(f"no lines under the prefix ({len(files)} {'/'.join(suffixes)} files)", tier="cold",
                            url=source.url)
    extra = {"files": [{"url": obj.url, "codec": codec} for obj, codec in files], "blocks": block_lines,
             "bad_lines": bad_lines}
    return LayoutPlan.of_counts(blocks, counts, extra=extra, skipped=skipped)


def _decompressed(data: bytes, codec: str, url: str) -> bytes:
    try:
        if codec == "zstd":
            return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True).read()
        if codec == "gzip":
            return gzip.decompress(data)
    except _NOT_DECOMPRESSED as exc:
        raise DecodeError(f"{codec} block does not decompress: {exc}", url=url) from exc
    return data


class LinesDecoder:
    """Splits a block into its lines: ``(record, -1)`` pairs, a record being the line parsed as
    JSON (``parse``) or its raw bytes.

    Args:
        extra: The manifest's data of this layout (files, each block's first line number and
            the bad lines left out).
        parse: Parse each line as JSON.
    """

    def __init__(self, extra: dict[str, Any], parse: bool) -> None:
        self.files = extra["files"]
        self.blocks = extra["blocks"]
        self.parse = parse

    def decode(self, block_index: int, data: bytes) -> Sequence[tuple[Any, int]]:
        """Raises:
            BadLineError: A line is not JSON (names the file and the line number).
            DecodeError: A compressed block does not decompress.
        """
        file_index, first_line, bad = self.blocks[block_index]
        file = self.files[file_index]
        lines = _decompressed(bytes(data), file["codec"], file["url"]).split(b"\n")
        if lines[-1] == b"":
            lines.pop()  # the text ends with a newline
        left_out = set(bad)
        samples: list[tuple[Any, int]] = []
        for number, line in enumerate(lines, start=first_line):
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line or number in left_out:
                continue
            if not self.parse:
                samples.append((line, -1))
                continue
            try:
                samples.append((json.loads(line), -1))
            except ValueError as exc:
                raise BadLineError(f"{file['url']} line {number} is not JSON ({exc}); fix or remove it, or set "
                                   f"manifest.on_bad_lines: skip to leave such lines out (they are counted in "
                                   f"manifest.extra['bad_lines'])", line=number, url=file["url"]) from None
        return samples
