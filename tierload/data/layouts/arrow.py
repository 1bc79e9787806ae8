"""Arrow IPC files and streams read in place (Hugging Face ``datasets`` shards): a row is a sample.

Both IPC formats are read: the *stream* format (what ``datasets``' ``save_to_disk`` writes to
its ``data-*.arrow`` files) and the *file* format (``pa.ipc.new_file``, Feather v2). Objects not
named ``*.arrow`` (``datasets``' ``state.json`` and ``dataset_info.json``) are skipped.

Blocks. Record batches are the unit that decodes alone, so a block is a byte range of
consecutive record batches of one file, about ``manifest.block_bytes`` (a batch larger than
that is a block of its own). To decode, the file's schema message (and its dictionaries) is
kept in the manifest and put before the block's batches.

Listing. The file format's footer gives every batch's offset and length (two small GETs), and
each batch's row count is in its message header (one small GET per batch, all in flight at
once). The stream format has no index, so the listing walks its message headers in windows of
``_WINDOW`` bytes: batches smaller than a window are read in a few large sequential GETs, larger
ones cost one small GET each (their bodies are skipped). Measured with ``plan_arrow`` over
``file://`` (6 MB files, GETs and bytes the listing read): 100 batches of 61 KB, stream 22 GETs
and 5.2 MB, file 104 GETs (in flight together) and 0.29 MB; 20 batches of 300 KB, stream 22 GETs
and 0.42 MB, file 24 GETs and 0.27 MB. One block per file would list for free but cache each
shard (``datasets`` writes up to 500 MB) as one unit and read it whole for any sample of it.
Dictionary batches after the first record batch (delta or replaced dictionaries) are refused:
cast such columns to their value type before writing.

``columns=`` selects columns of the decoded rows (a record batch's body is fetched whole); a
row decodes as a Parquet row does (:mod:`tierload.data.layouts.table_rows`), with
``manifest.label_column`` moved into the label.
"""

from __future__ import annotations

import base64
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import pyarrow as pa

from tierload.data.blocks import Block
from tierload.data.layouts.base import LayoutPlan, ManifestView
from tierload.data.layouts.table_rows import table_samples
from tierload.errors import ConfigError, DecodeError, ManifestError
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.source import ColdSource

_FILE_MAGIC = b"ARROW1"
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
_WINDOW = 256 * 1024
_HEAD = 8 * 1024  # what is read at a message after a large one (its header, most likely)
_PREFIX_LIMIT = 16 * 2**20  # schema + dictionaries kept in the manifest, per file
# Message header types (Arrow's Message.fbs)
_SCHEMA, _DICTIONARY, _RECORD_BATCH = 1, 2, 3


# ---------------------------------------------------------------- flatbuffers, just what is read here
def _u16(buf: bytes, at: int) -> int:
    return struct.unpack_from("<H", buf, at)[0]


def _u32(buf: bytes, at: int) -> int:
    return struct.unpack_from("<I", buf, at)[0]


def _field(buf: bytes, table: int, slot: int) -> int | None:
    """Position of field ``slot`` of the flatbuffer table at ``table``, or None when absent."""
    vtable = table - struct.unpack_from("<i", buf, table)[0]
    entry = 4 + 2 * slot
    if entry >= _u16(buf, vtable):
        return None
    offset = _u16(buf, vtable + entry)
    return table + offset if offset else None


def _message(meta: bytes) -> tuple[int, int, int]:
    """``(header type, body length, rows)`` of an IPC message's flatbuffer (rows: record batches)."""
    root = _u32(meta, 0)
    kind_at, header_at, body_at = _field(meta, root, 1), _field(meta, root, 2), _field(meta, root, 3)
    kind = meta[kind_at] if kind_at is not None else 0
    body = struct.unpack_from("<q", meta, body_at)[0] if body_at is not None else 0
    rows = 0
    if kind == _RECORD_BATCH and header_at is not None:
        batch = header_at + _u32(meta, header_at)
        rows_at = _field(meta, batch, 0)
        rows = struct.unpack_from("<q", meta, rows_at)[0] if rows_at is not None else 0
    return kind, body, rows


def _message_at(read, at: int, url: str) -> tuple[int, int, int, int] | None:
    """``(header type, total bytes, rows, metadata bytes)`` of the message at ``at``; None at end of stream.

    Raises:
        ManifestError: The bytes are not an IPC message.
    """
    head = read(at, 8)
    if len(head) < 4:
        return None
    first = struct.unpack_from("<i", head, 0)[0]
    if first == -1:  # continuation marker, then the metadata length
        if len(head) < 8:
            return None
        size, prefix = struct.unpack_from("<i", head, 4)[0], 8
    else:  # before Arrow 0.15: the length alone
        size, prefix = first, 4
    if size == 0:
        return None
    if size < 0:
        raise ManifestError(f"no Arrow IPC message at byte {at}", tier="cold", url=url)
    try:
        kind, body, rows = _message(read(at + prefix, size))
    except (struct.error, IndexError) as exc:
        raise ManifestError(f"unreadable Arrow IPC message at byte {at}: {exc}", tier="cold", url=url) from exc
    return kind, prefix + size + body, rows, prefix + size


class _WindowReader:
    """``read(offset, length)`` over one cold object, in windows of ``window`` bytes (the walker
    lowers it to ``_HEAD`` after a message larger than ``_WINDOW``: the next is likely large too)."""

    def __init__(self, source: ColdSource, obj: ObjectInfo) -> None:
        self.source, self.obj = source, obj
        self.base, self.data = 0, b""
        self.window = _WINDOW

    def __call__(self, offset: int, length: int) -> bytes:
        end = min(offset + length, self.obj.size)
        if not (self.base <= offset and end <= self.base + len(self.data)):
            want = min(max(length, self.window), self.obj.size - offset)
            self.base = offset
            self.data = self.source.read(self.obj.url, self.obj.version, offset, want) if want > 0 else b""
        return self.data[offset - self.base:end - self.base]


# ------------------------------------------------------------------ batches of one file
def _stream_batches(read, obj: ObjectInfo, start: int) -> tuple[int, list[tuple[int, int, int]]]:
    """``(first batch offset, [(offset, bytes, rows) of each record batch])`` of a stream at ``start``.

    Raises:
        ManifestError: Not an IPC stream, or a dictionary batch after the first record batch.
    """
    at, first, batches = start, None, []
    while at < obj.size:
        message = _message_at(read, at, obj.url)
        if message is None:
            break
        kind, total, rows, _ = message
        if isinstance(read, _WindowReader):
            read.window = _HEAD if total > _WINDOW else _WINDOW
        if kind == _RECORD_BATCH:
            first = at if first is None else first
            batches.append((at, total, rows))
        elif kind == _DICTIONARY and first is not None:
            raise ManifestError("dictionary batch after the first record batch (a delta or replaced dictionary) "
                                "is not read; cast dictionary columns to their value type before writing",
                                tier="cold", url=obj.url)
        elif kind not in (_SCHEMA, _DICTIONARY):
            raise ManifestError(f"Arrow IPC message of type {kind} is not a table's", tier="cold", url=obj.url)
        at += total
    return (first if first is not None else at), batches


def _file_batches(source: ColdSource, obj: ObjectInfo) -> tuple[int, list[tuple[int, int, int]]]:
    """As :func:`_stream_batches`, for the IPC file format: the footer's batch offsets, each
    batch's rows from its message header (read concurrently)."""
    tail = source.read(obj.url, obj.version, max(0, obj.size - 10), min(obj.size, 10))
    if len(tail) < 10 or tail[-6:] != _FILE_MAGIC:
        raise ManifestError("Arrow IPC file without its ARROW1 trailer", tier="cold", url=obj.url)
    footer_len = struct.unpack_from("<i", tail, 0)[0]
    if not 0 < footer_len <= obj.size - 18:
        raise ManifestError(f"Arrow IPC footer length {footer_len} does not fit the file", tier="cold", url=obj.url)
    footer = source.read(obj.url, obj.version, obj.size - 10 - footer_len, footer_len)
    root = _u32(footer, 0)

    def blocks(slot: int) -> list[tuple[int, int, int]]:
        at = _field(footer, root, slot)
        if at is None:
            return []
        vector = at + _u32(footer, at)
        count = _u32(footer, vector)
        return [struct.unpack_from("<qi4xq", footer, vector + 4 + 24 * i) for i in range(count)]

    dictionaries, batches = blocks(2), blocks(3)
    if not batches:
        return obj.size, []
    first = min(offset for offset, _, _ in batches)
    if any(offset > first for offset, _, _ in dictionaries):
        raise ManifestError("dictionary batch after the first record batch is not read; cast dictionary columns "
                            "to their value type before writing", tier="cold", url=obj.url)
    heads = source.read_ranges([(obj.url, obj.version, offset, meta) for offset, meta, _ in batches])
    found = []
    for (offset, meta, body), head in zip(batches, heads, strict=True):
        message = _message_at(lambda at, n, head=head, base=offset: head[at - base:at - base + n], offset, obj.url)
        if message is None or message[0] != _RECORD_BATCH:
            raise ManifestError(f"the footer's record batch at byte {offset} is not one", tier="cold", url=obj.url)
        found.append((offset, meta + body, message[2]))
    return first, sorted(found)


def plan_arrow(source: ColdSource, objects: list[ObjectInfo], *, block_bytes: int) -> LayoutPlan:
    """Blocks = runs of consecutive record batches of every ``.arrow`` file; samples = rows.

    Raises:
        ManifestError: No file holds a row, or a file is not Arrow IPC (file or stream format).
    """
    files = [obj for obj in objects if obj.url.lower().endswith(".arrow") and obj.size > 0]
    skipped = {obj.url: "not a non-empty .arrow file" for obj in objects if obj not in files}

    def scan(obj: ObjectInfo) -> tuple[str, bytes, list[tuple[int, int, int]]]:
        read = _WindowReader(source, obj)
        if read(0, 6) == _FILE_MAGIC:
            first, batches = _file_batches(source, obj)
            start, kind = 8, "file"
        else:
            first, batches = _stream_batches(read, obj, 0)
            start, kind = 0, "stream"
        if first - start > _PREFIX_LIMIT:
            raise ManifestError(f"{first - start} bytes of schema and dictionaries before the first record batch "
                                f"(at most {_PREFIX_LIMIT})", tier="cold", url=obj.url)
        prefix = source.read(obj.url, obj.version, start, first - start) if first > start else b""
        return kind, prefix, batches

    with ThreadPoolExecutor(max_workers=16) as pool:
        scans = list(pool.map(scan, files))
    blocks: list[Block] = []
    counts: list[int] = []
    block_file: list[int] = []
    described: list[dict[str, Any]] = []
    for obj, (kind, prefix, batches) in zip(files, scans, strict=True):
        try:
            names = pa.ipc.open_stream(pa.py_buffer(prefix + _EOS)).schema.names
        except pa.ArrowInvalid as exc:
            raise ManifestError(f"not an Arrow IPC {kind}: {exc}", tier="cold", url=obj.url) from exc
        file_index = len(described)
        described.append({"url": obj.url, "format": kind, "prefix": base64.b64encode(prefix).decode("ascii"),
                          "columns": names})
        run: list[tuple[int, int, int]] = []
        for batch in [*batches, None]:
            if run and (batch is None or batch[0] != run[-1][0] + run[-1][1]
                        or batch[0] + batch[1] - run[0][0] > block_bytes):
                rows = sum(r for _, _, r in run)
                if rows:
                    blocks.append(Block.of(obj.url, obj.version, run[0][0], run[-1][0] + run[-1][1] - run[0][0]))
                    counts.append(rows)
                    block_file.append(file_index)
                run = []
            if batch is not None:
                run.append(batch)
        if not batches or not any(rows for _, _, rows in batches):
            skipped[obj.url] = f"Arrow IPC {kind} with no rows"
    if not blocks:
        raise ManifestError(f"no Arrow rows under the prefix ({len(files)} .arrow files)", tier="cold",
                            url=source.url)
    return LayoutPlan.of_counts(blocks, counts, extra={"files": described, "block_file": block_file}, skipped=skipped)


def check_columns(manifest: ManifestView, columns: list[str], label_column: str | None) -> Sequence[Block]:
    """The manifest's blocks, unchanged, once ``columns`` are known to be in the files' schemas.

    Raises:
        ConfigError: A column is in no file's schema (the message lists the known ones).
    """
    known = {name for file in manifest.extra["files"] for name in file["columns"]}
    missing = [name for name in columns if name not in known]
    if missing:
        raise ConfigError(f"columns={columns!r}: {missing} in no Arrow file under {manifest.url}; "
                          f"the files have {sorted(known)}")
    return manifest.blocks


class ArrowDecoder:
    """Decodes a block of record batches into ``(row_dict, label)`` pairs.

    Args:
        extra: The manifest's Arrow data (each file's schema prefix; the file of each block).
        label_column: Column moved out of the row into the label (None: label is -1).
        columns: Columns to keep (None: all).
    """

    def __init__(self, extra: dict[str, Any], label_column: str | None, columns: list[str] | None = None) -> None:
        self.files = extra["files"]
        self.block_file = extra["block_file"]
        self.label_column = label_column
        self.columns = columns

    def decode(self, block_index: int, data: bytes) -> Sequence[tuple[Any, int]]:
        """Raises:
            DecodeError: The bytes are not a run of record batches of the file's schema.
        """
        file = self.files[self.block_file[block_index]]
        stream = base64.b64decode(file["prefix"]) + bytes(data) + _EOS
        try:
            table = pa.ipc.open_stream(pa.py_buffer(stream)).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise DecodeError(f"block {block_index} is not a run of Arrow record batches: {exc}",
                              url=file["url"]) from exc
        if self.columns is not None:
            keep = [*self.columns, *([self.label_column] if self.label_column and self.label_column
                                     not in self.columns and self.label_column in table.column_names else [])]
            table = table.select(keep)
        return table_samples(table, self.label_column)
