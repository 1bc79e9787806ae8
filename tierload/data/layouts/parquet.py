"""Parquet files where a row is a sample and a row group is a block.

The manifest keeps each file's footer (read once with one or two ranged GETs); a block is
the byte range of one row group's column chunks, which decodes on its own given the footer.
A Parquet file larger than ``manifest.block_bytes`` is therefore cached as one byte-range
block per row group, never as one huge block. A single row group is the smallest unit that
decodes on its own; one larger than ``block_bytes`` stays one block, and the manifest warns
(write such files with smaller row groups, e.g. ``pyarrow.parquet.write_table(...,
row_group_size=...)``).

A row decodes to ``{column: value}``; each value's type is a function of the column's schema
alone, never of what else its row group holds (case B46):

* integer, float and bool columns: Python ``int``/``float``/``bool`` (``None`` for a null);
  integers exact, never promoted to float by a null elsewhere;
* numeric lists (``list``, ``large_list``, ``fixed_size_list`` of ints or floats): a 1-D
  tensor of the value type when the element field is not nullable, else
  ``{"values": tensor, "valid": bool tensor}`` with 0 in ``values`` where ``valid`` is False
  (pyarrow's ``pa.list_(pa.int64())`` has nullable elements; declare
  ``pa.list_(pa.field("item", pa.int64(), nullable=False))`` to get plain tensors); a null
  list is ``None``. ``int64`` stays ``torch.int64``, exact. ``tierload.collate`` stacks
  equal-length rows into ``(batch, length)`` tensors (and masks);
* every other type: what ``pyarrow.Array.to_pylist`` gives (strings, bytes, nested lists,
  structs), ``None`` for nulls.

(:mod:`tierload.data.layouts.table_rows` does this, for the Arrow layout too.)
"""

from __future__ import annotations

import base64
import logging
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from tierload.data.blocks import Block
from tierload.data.layouts.base import LayoutPlan, ManifestView
from tierload.data.layouts.sparse import SparseFile
from tierload.data.layouts.table_rows import table_samples
from tierload.data.packs import PackMembers
from tierload.errors import ConfigError, ManifestError
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.source import ColdSource

_TAIL_GUESS = 64 * 1024
log = logging.getLogger(__name__)


def read_footer(source: ColdSource, obj: ObjectInfo) -> bytes:
    """Return the Parquet footer of ``obj`` (metadata + length + magic), 1-2 ranged GETs.

    Raises:
        ManifestError: The object is not a Parquet file.
    """
    if obj.size < 12:
        raise ManifestError("object is too small to be a Parquet file", tier="cold", url=obj.url)
    tail_len = min(obj.size, _TAIL_GUESS)
    tail = source.read(obj.url, obj.version, obj.size - tail_len, tail_len)
    if tail[-4:] != b"PAR1":
        raise ManifestError("object does not end with the Parquet magic PAR1", tier="cold", url=obj.url)
    footer_len = struct.unpack("<I", tail[-8:-4])[0] + 8
    if footer_len > obj.size - 4:
        raise ManifestError("Parquet footer length is larger than the file", tier="cold", url=obj.url)
    if footer_len > tail_len:
        return source.read(obj.url, obj.version, obj.size - footer_len, footer_len)
    return tail[-footer_len:]


def metadata_from_footer(footer: bytes) -> pq.FileMetaData:
    """Parse a footer returned by :func:`read_footer`."""
    return pq.read_metadata(pa.BufferReader(b"PAR1" + footer))


def row_group_range(row_group: pq.RowGroupMetaData) -> tuple[int, int]:
    """Byte range ``[start, end)`` of a row group's column chunks in its file."""
    spans = [column_chunk_range(row_group.column(j)) for j in range(row_group.num_columns)]
    return min(start for start, _ in spans), max(end for _, end in spans)


def column_chunk_range(column: pq.ColumnChunkMetaData) -> tuple[int, int]:
    """Byte range ``[start, end)`` of one column chunk (its dictionary page, if any, included)."""
    start = column.data_page_offset
    if column.has_dictionary_page and column.dictionary_page_offset:
        start = min(start, column.dictionary_page_offset)
    return start, start + column.total_compressed_size


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``[start, end)`` spans sorted, with touching or overlapping ones joined (one GET each)."""
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def project_blocks(manifest: ManifestView, columns: list[str], label_column: str | None) -> list[Block]:
    """The blocks of ``manifest`` (a Parquet manifest) holding only the chunks of ``columns``.

    A row group whose every column is wanted keeps its block (and its cache entry); any other
    becomes a block made of the byte ranges of the wanted column chunks in its file (touching
    chunks joined), a :class:`~tierload.data.packs.PackMembers` of ranges: fetched with one
    ranged GET per range, cached and counted as one block whose key derives from those ranges,
    so two projections never share a cache entry. ``label_column`` is read too when the file
    has it.

    Raises:
        ConfigError: A column of ``columns`` is in no file's schema (the message lists them).
    """
    files, row_groups = manifest.extra["files"], manifest.extra["row_groups"]
    metadata = [metadata_from_footer(base64.b64decode(f["footer"])) for f in files]
    known = {name for meta in metadata for name in meta.schema.to_arrow_schema().names}
    missing = [name for name in columns if name not in known]
    if missing:
        raise ConfigError(f"columns={columns!r}: {missing} in no Parquet file under {manifest.url}; "
                          f"the files have {sorted(known)}")
    wanted = [*columns, *([label_column] if label_column and label_column not in columns else [])]
    blocks: list[Block] = []
    for block, (file_index, rg) in zip(manifest.blocks, row_groups, strict=True):
        group = metadata[file_index].row_group(rg)
        leaves = [group.column(j) for j in range(group.num_columns)
                  if any(group.column(j).path_in_schema == name or group.column(j).path_in_schema.startswith(name + ".")
                         for name in wanted)]
        if len(leaves) == group.num_columns or not leaves:
            blocks.append(block)
            continue
        spans = _merged([column_chunk_range(column) for column in leaves])
        blocks.append(Block.pack(PackMembers.ranges(block.url, block.version,
                                                    [(start, end - start) for start, end in spans])))
    return blocks


def plan_parquet(source: ColdSource, objects: list[ObjectInfo], *, block_bytes: int | None = None) -> LayoutPlan:
    """Blocks = row groups of every ``.parquet`` object; samples = rows.

    Args:
        source: The cold tier under the dataset prefix.
        objects: The listing.
        block_bytes: Row groups larger than this are reported (they cannot be split).

    Raises:
        ManifestError: No Parquet file holds a row.
    """
    files = [obj for obj in objects if obj.url.lower().endswith(".parquet")]
    skipped = {obj.url: "not a .parquet file" for obj in objects if obj not in files}
    with ThreadPoolExecutor(max_workers=16) as pool:
        footers = list(pool.map(lambda obj: read_footer(source, obj), files))
    blocks: list[Block] = []
    rows: list[int] = []
    row_groups: list[list[int]] = []
    oversized = 0
    for file_index, (obj, footer) in enumerate(zip(files, footers, strict=True)):
        metadata = metadata_from_footer(footer)
        if metadata.num_rows == 0:
            skipped[obj.url] = "Parquet file with no rows"
        for rg in range(metadata.num_row_groups):
            group = metadata.row_group(rg)
            if group.num_rows == 0:
                continue
            start, end = row_group_range(group)
            oversized += bool(block_bytes and end - start > block_bytes)
            blocks.append(Block.of(obj.url, obj.version, start, end - start))
            rows.append(group.num_rows)
            row_groups.append([file_index, rg])
    if oversized:
        log.warning("%d Parquet row groups under %s are larger than manifest.block_bytes=%d; each stays one "
                    "block (a row group is the smallest part that decodes alone): write smaller row groups",
                    oversized, source.url, block_bytes)
    if not blocks:
        raise ManifestError(f"no Parquet rows under the prefix ({len(files)} .parquet files)", tier="cold",
                            url=source.url)
    described = [{"url": obj.url, "size": obj.size, "footer": base64.b64encode(footer).decode("ascii")}
                 for obj, footer in zip(files, footers, strict=True)]
    return LayoutPlan.of_counts(blocks, rows, extra={"files": described, "row_groups": row_groups}, skipped=skipped)


class ParquetDecoder:
    """Decodes a row-group block into ``(row_dict, label)`` pairs.

    Args:
        extra: The manifest's Parquet data (file footers, row-group index per block).
        block_ranges: Each block's ``(offset, length)`` byte ranges in its file, in the order
            its bytes are concatenated (one range; several for a column projection).
        label_column: Column moved out of the row into the label (None: label is -1).
        columns: Columns to read (None: all).
    """

    def __init__(self, extra: dict[str, Any], block_ranges: Sequence[Sequence[tuple[int, int]]],
                 label_column: str | None, columns: list[str] | None = None) -> None:
        self.files = extra["files"]
        self.block_ranges = [list(ranges) for ranges in block_ranges]
        self.row_groups = extra["row_groups"]
        self.label_column = label_column
        self.columns = columns
        self._metadata: dict[int, pq.FileMetaData] = {}

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_metadata"] = {}
        return state

    def _file_metadata(self, file_index: int) -> pq.FileMetaData:
        if file_index not in self._metadata:
            self._metadata[file_index] = metadata_from_footer(base64.b64decode(self.files[file_index]["footer"]))
        return self._metadata[file_index]

    def read_table(self, block_index: int, data: bytes) -> pa.Table:
        """Decode a block's bytes into an Arrow table of its rows."""
        file_index, row_group = self.row_groups[block_index]
        metadata = self._file_metadata(file_index)
        parts, at = {}, 0
        for offset, length in self.block_ranges[block_index]:
            parts[offset] = data[at:at + length]
            at += length
        sparse = SparseFile(self.files[file_index]["size"], parts)
        reader = pq.ParquetFile(sparse, metadata=metadata, pre_buffer=False)
        try:
            columns = self.columns
            if (columns is not None and self.label_column and self.label_column not in columns
                    and self.label_column in reader.schema_arrow.names):
                columns = [*columns, self.label_column]
            return reader.read_row_group(row_group, columns=columns)
        finally:
            reader.close()
            sparse.close()

    def decode(self, block_index: int, data: bytes) -> Sequence[tuple[Any, int]]:
        return table_samples(self.read_table(block_index, data), self.label_column)
