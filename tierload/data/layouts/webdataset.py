"""WebDataset tar shards, read in place: a sample is the run of tar members sharing a basename.

``train-000.tar`` holding ``a/0001.jpg, a/0001.cls, a/0002.jpg, a/0002.cls`` has two samples,
keys ``a/0001`` and ``a/0002`` (the WebDataset rule: the key is the member path up to the first
dot of its base name; the rest is the field name). A sample yields as a dict
``{"__key__": key, "jpg": <uint8 tensor C,H,W>, "cls": 7}``; its label is the ``cls`` field
(-1 without one). Fields are decoded by extension (see :func:`decode_field`). Members of one
sample need not be adjacent: they are grouped by key within the shard (case B36).

A shard no larger than ``manifest.block_bytes`` is one block; a larger one is cut into
byte-range blocks at sample boundaries, each about ``block_bytes`` (a single sample larger
than that is a block of its own). A block always starts at a member's header, so its bytes
are a small tar stream of their own and decode without the rest of the shard.

Indexing reads only headers where members are large: the walker reads a window at a header
(``_WINDOW`` bytes); the next header inside the window costs nothing, one beyond it costs one
ranged GET. Small members are therefore read in a few large sequential GETs, large ones by
their headers alone.
"""

from __future__ import annotations

import io
import json
import logging
import re
import tarfile
from typing import Any, Iterator, Sequence

import numpy as np
import torch

from tierload.data.blocks import Block
from tierload.data.layouts.base import LayoutPlan
from tierload.data.layouts.object_decoders import decode_image
from tierload.errors import DecodeError, ManifestError
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.source import ColdSource

log = logging.getLogger(__name__)

_RECORD = 512
_WINDOW = 1 << 20
_KEY_RE = re.compile(r"^((?:.*/|)[^./][^./]*)\.([^/]*)$")
IMAGE_EXTENSIONS = ("png", "jpg", "jpeg", "ppm", "pgm", "pbm", "bmp", "webp", "tif", "tiff")
INT_EXTENSIONS = ("cls", "cls2", "index", "idx", "label", "id")
TEXT_EXTENSIONS = ("txt", "text", "caption", "transcript")
LABEL_FIELDS = ("cls", "label")


def _padded(size: int) -> int:
    return -(-size // _RECORD) * _RECORD


def _pax_fields(data: bytes) -> dict[str, str]:
    fields, pos = {}, 0
    while pos < len(data):
        space = data.find(b" ", pos)
        if space < 0:
            break
        length = int(data[pos:space])
        record = data[space + 1:pos + length - 1]  # drop the trailing newline
        key, _, value = record.partition(b"=")
        fields[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return fields


def walk_members(read, size: int) -> Iterator[tuple[int, int, int, str]]:
    """Regular-file members of a tar stream: ``(record_start, data_offset, data_size, name)``.

    Args:
        read: ``read(offset, length) -> bytes`` over the tar stream (may return fewer bytes at its end).
        size: Length of the stream in bytes.

    ``record_start`` is where the member's first header (a GNU long-name or pax header, if
    any) begins, so ``[record_start, data_offset + padded size)`` holds the whole member.

    Raises:
        ValueError: A header is corrupt (bad checksum) or the stream ends inside a member.
    """
    pax: dict[str, str] = {}
    pos, record_start, long_name = 0, None, None
    while pos + _RECORD <= size:
        header = read(pos, _RECORD)
        if len(header) < _RECORD:
            raise ValueError(f"tar stream ends inside the header at byte {pos}")
        if header == bytes(_RECORD):
            return  # end-of-archive marker
        try:
            info = tarfile.TarInfo.frombuf(header, "utf-8", "surrogateescape")
        except tarfile.HeaderError as exc:
            raise ValueError(f"bad tar header at byte {pos}: {exc}") from exc
        if record_start is None:
            record_start = pos
        data_offset = pos + _RECORD
        member_size = int(pax.get("size", info.size))
        if data_offset + member_size > size:
            raise ValueError(f"tar member at byte {pos} runs past the end of the stream")
        kind = info.type
        if kind == tarfile.GNUTYPE_LONGNAME:
            long_name = read(data_offset, info.size).rstrip(b"\0").decode("utf-8", "surrogateescape")
        elif kind == tarfile.XHDTYPE:
            pax = _pax_fields(read(data_offset, info.size))
        elif kind == tarfile.XGLTYPE or kind == tarfile.GNUTYPE_LONGLINK:
            pass  # global pax header, long link target: nothing about the next member's name
        else:
            name = pax.get("path") or long_name or info.name
            if kind in tarfile.REGULAR_TYPES:
                yield record_start, data_offset, member_size, name
            record_start, long_name, pax = None, None, {}
        pos = data_offset + _padded(member_size if kind not in (tarfile.GNUTYPE_LONGNAME, tarfile.XHDTYPE,
                                                                tarfile.XGLTYPE) else info.size)


def split_name(name: str) -> tuple[str, str] | None:
    """``"a/0001.seg.png"`` -> ``("a/0001", "seg.png")``; None for names WebDataset skips."""
    match = _KEY_RE.match(name)
    return (match.group(1), match.group(2).lower()) if match else None


class _WindowReader:
    """``read(offset, length)`` over one cold object, in windows of ``_WINDOW`` bytes."""

    def __init__(self, source: ColdSource, obj: ObjectInfo) -> None:
        self.source, self.obj = source, obj
        self.base, self.data = 0, b""
        self.gets = 0

    def __call__(self, offset: int, length: int) -> bytes:
        end = offset + length
        if not (self.base <= offset and end <= self.base + len(self.data)):
            want = min(max(length, _WINDOW), self.obj.size - offset)
            self.base = offset
            self.data = self.source.read(self.obj.url, self.obj.version, offset, want)
            self.gets += 1
        return self.data[offset - self.base:end - self.base]


def _sample_spans(members: list[tuple[int, int, int, str]]) -> list[tuple[int, int, int]]:
    """Byte spans of a shard that hold whole samples: ``(start, end, number of samples)``.

    Members of one key are usually adjacent and a span is one sample. A key whose members are
    not adjacent (``0.a, 1.a, 0.b, 1.b``) merges every span from its first member to this one,
    so a block cut at span boundaries never holds part of a sample (the decoder groups members
    by key within its block).
    """
    spans: list[list[Any]] = []  # [start, end, keys]
    span_of: dict[str, int] = {}
    for record_start, data_offset, size, name in members:
        parts = split_name(name)
        if parts is None:
            continue
        key, end = parts[0], data_offset + _padded(size)
        first = span_of.get(key)
        if first is None:
            span_of[key] = len(spans)
            spans.append([record_start, end, [key]])
            continue
        if first < len(spans) - 1:
            merged_keys = [k for span in spans[first:] for k in span[2]]
            spans[first:] = [[spans[first][0], end, merged_keys]]
            span_of.update((k, first) for k in merged_keys)
        spans[-1][1] = end
    return [(start, end, len(keys)) for start, end, keys in spans]


def _shard_blocks(obj: ObjectInfo, members: list[tuple[int, int, int, str]],
                  block_bytes: int) -> tuple[list[Block], list[int]]:
    """Group members into samples and samples into blocks: ``(blocks, samples per block)``."""
    blocks, counts = [], []
    group_start, group_end, count = None, 0, 0
    for start, end, samples in _sample_spans(members):
        if group_start is not None and end - group_start > block_bytes:
            blocks.append(Block.of(obj.url, obj.version, group_start, group_end - group_start))
            counts.append(count)
            group_start, count = None, 0
        if group_start is None:
            group_start = start
        group_end, count = end, count + samples
    if group_start is not None:
        blocks.append(Block.of(obj.url, obj.version, group_start, group_end - group_start))
        counts.append(count)
    return blocks, counts


def plan_webdataset(source: ColdSource, objects: list[ObjectInfo], *, block_bytes: int) -> LayoutPlan:
    """Blocks = byte ranges of ``.tar`` shards (whole samples, about ``block_bytes`` each); samples = keys.

    Raises:
        ManifestError: No shard holds a sample, or a shard is not a valid tar.
    """
    skipped: dict[str, str] = {}
    blocks: list[Block] = []
    counts: list[int] = []
    for obj in objects:
        if not obj.url.lower().endswith(".tar"):
            skipped[obj.url] = "not a .tar shard"
            continue
        if obj.size == 0:
            skipped[obj.url] = "zero-byte object is not a tar shard"
            continue
        reader = _WindowReader(source, obj)
        try:
            members = list(walk_members(reader, obj.size))
        except ValueError as exc:
            raise ManifestError(f"not a readable tar shard: {exc}", tier="cold", url=obj.url) from exc
        shard_blocks, shard_counts = _shard_blocks(obj, members, block_bytes)
        if not shard_blocks:
            skipped[obj.url] = "tar shard without samples"
        log.debug("indexed %s: %d members, %d blocks, %d GETs", obj.url, len(members), len(shard_blocks),
                  reader.gets)
        blocks.extend(shard_blocks)
        counts.extend(shard_counts)
    if not blocks:
        raise ManifestError(f"no WebDataset samples under the prefix ({len(objects)} objects)", tier="cold",
                            url=source.url)
    return LayoutPlan.of_counts(blocks, counts, skipped=skipped)


def decode_field(extension: str, data: bytes) -> Any:
    """Decode one member by the last part of its extension.

    Images -> uint8 tensor (C, H, W); ``cls``/``index``/... -> int; ``txt`` -> str; ``json`` ->
    parsed JSON; ``npy`` -> tensor; ``pt``/``pth`` -> ``torch.load(weights_only=True)``;
    anything else -> ``bytes``.
    """
    kind = extension.rsplit(".", 1)[-1]
    if kind in IMAGE_EXTENSIONS:
        return decode_image(data)
    if kind in INT_EXTENSIONS:
        return int(data.decode("utf-8").strip())
    if kind in TEXT_EXTENSIONS:
        return data.decode("utf-8")
    if kind == "json":
        return json.loads(data)
    if kind == "npy":
        return torch.from_numpy(np.load(io.BytesIO(data), allow_pickle=False))
    if kind in ("pt", "pth"):
        return torch.load(io.BytesIO(data), weights_only=True)
    return bytes(data)


class WebDatasetDecoder:
    """Decodes a block (a run of whole samples of one tar shard) into ``(sample_dict, label)`` pairs.

    A field that appears twice in one sample (``dir/base.txt``, ``dir/base.json``, ``dir/base.txt``)
    is a :class:`~tierload.errors.DecodeError`: keeping either copy would drop bytes the shard holds.

    Args:
        decode: Decode fields by extension (True) or yield every field as ``bytes`` (False).
        shards: The shard URL of each block, by block index (named in errors); None: unknown.
    """

    def __init__(self, decode: bool = True, shards: Sequence[str] | None = None) -> None:
        self.decode_fields = decode
        self.shards = shards

    def _shard(self, block_index: int) -> str | None:
        shards = self.shards
        return shards[block_index] if shards is not None and 0 <= block_index < len(shards) else None

    def decode(self, block_index: int, data: bytes) -> Sequence[tuple[Any, int]]:
        """The block's samples in order of each key's first member.

        Raises:
            DecodeError: The bytes are not a run of tar members, a field does not decode, or a
                sample holds the same field twice (the message names the shard, key and field).
        """
        view = memoryview(data)

        def read(offset: int, length: int) -> bytes:
            return bytes(view[offset:offset + length])

        samples: dict[str, dict[str, Any]] = {}  # by key, in order of first member: members need not be adjacent
        repeated: tuple[str, str] | None = None  # (key, field) met twice
        try:
            for _start, offset, size, name in walk_members(read, len(data)):
                parts = split_name(name)
                if parts is None:
                    continue
                key, extension = parts
                raw = read(offset, size)
                sample = samples.setdefault(key, {"__key__": key})
                if extension in sample:
                    repeated = (key, extension)
                    break
                sample[extension] = decode_field(extension, raw) if self.decode_fields else raw
        except (ValueError, UnicodeDecodeError) as exc:
            raise DecodeError(f"block {block_index} is not a readable run of tar members: {exc}",
                              url=self._shard(block_index)) from exc
        if repeated is not None:
            raise DecodeError(f"sample {repeated[0]!r} holds field {repeated[1]!r} twice (tar members "
                              f"{repeated[0]}.{repeated[1]} repeated); one sample has one member per field: "
                              "rename or remove the duplicate member in the shard", url=self._shard(block_index))
        out = []
        for sample in samples.values():
            label = next((sample[f] for f in LABEL_FIELDS if isinstance(sample.get(f), int)), -1)
            out.append((sample, int(label)))
        return out
