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
"""

from __future__ import annotations

import base64
import logging
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch

from tierload.data.blocks import Block
from tierload.data.layouts.base import LayoutPlan
from tierload.data.layouts.sparse import SparseFile
from tierload.errors import DecodeError, ManifestError
from tierload.stores.cold.listing import ObjectInfo
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
    starts, ends = [], []
    for j in range(row_group.num_columns):
        column = row_group.column(j)
        start = column.data_page_offset
        if column.has_dictionary_page and column.dictionary_page_offset:
            start = min(start, column.dictionary_page_offset)
        starts.append(start)
        ends.append(start + column.total_compressed_size)
    return min(starts), max(ends)


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
    counts = np.asarray(rows, dtype=np.int64)
    return LayoutPlan(
        blocks=blocks,
        sample_block=np.repeat(np.arange(len(blocks), dtype=np.int32), counts),
        sample_index=np.concatenate([np.arange(n, dtype=np.int32) for n in rows]),
        labels=np.full(int(counts.sum()), -1, dtype=np.int64),
        extra={
            "files": [{"url": obj.url, "size": obj.size, "footer": base64.b64encode(footer).decode("ascii")}
                      for obj, footer in zip(files, footers, strict=True)],
            "row_groups": row_groups,
        },
        skipped=skipped,
    )


def _is_numeric_list(kind: pa.DataType) -> bool:
    return (pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind) or pa.types.is_large_list(kind)) and (
        pa.types.is_integer(kind.value_type) or pa.types.is_floating(kind.value_type))


def _numeric_list_rows(array: pa.Array) -> list[Any]:
    """Per-row values of a numeric list column; the type of a row depends only on the schema.

    * element field not nullable (``pa.list_(pa.field("item", pa.int64(), nullable=False))``):
      a row is a 1-D tensor of the value type (``int64`` -> ``torch.int64``, exact);
    * element field nullable (pyarrow's default for ``pa.list_(pa.int64())``): a row is
      ``{"values": tensor, "valid": bool tensor}`` of the row's length, ``values`` in the
      value type with 0 where ``valid`` is False, whether or not this row group holds a null;
    * a null row (the list itself null) is ``None``.

    Raises:
        DecodeError: The element field is declared not nullable yet holds a null.
    """
    if not len(array):
        return []
    dtype = np.dtype(array.type.value_type.to_pandas_dtype())
    nullable_elements = array.type.value_field.nullable
    flat = array.flatten()  # the valid rows' elements only, slicing offsets applied
    if flat.null_count and not nullable_elements:
        raise DecodeError(f"list column of {array.type} declares its elements not nullable yet holds "
                          f"{flat.null_count} null elements")
    valid = flat.is_valid().to_numpy(zero_copy_only=False)
    values = (flat.fill_null(0) if flat.null_count else flat).to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    lengths = pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False)
    bounds = np.cumsum(lengths)[:-1]
    rows: list[Any] = []
    for row_valid, row_values, row_mask in zip(array.is_valid().to_numpy(zero_copy_only=False),
                                               np.split(values, bounds), np.split(valid, bounds), strict=True):
        if not row_valid:
            rows.append(None)
        elif nullable_elements:
            rows.append({"values": torch.from_numpy(row_values.copy()), "valid": torch.from_numpy(row_mask.copy())})
        else:
            rows.append(torch.from_numpy(row_values.copy()))
    return rows


def _column_values(column: pa.ChunkedArray) -> Sequence[Any]:
    """Per-row values of a column: tensors for numeric lists (see :func:`_numeric_list_rows`), else Python values.

    The type of each value depends only on ``column.type`` (see the module docstring).

    Scalar numbers are Python ``int``/``float``/``bool`` with ``None`` for nulls, whatever the
    rest of the row group holds.
    """
    array = column.combine_chunks()
    kind = array.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        if array.null_count == 0:
            return array.to_numpy(zero_copy_only=False).tolist()
    if _is_numeric_list(kind):
        return _numeric_list_rows(array)
    return array.to_pylist()


class ParquetDecoder:
    """Decodes a row-group block into ``(row_dict, label)`` pairs.

    Args:
        extra: The manifest's Parquet data (file footers, row-group index per block).
        block_offsets: Byte offset of each block in its file.
        label_column: Column moved out of the row into the label (None: label is -1).
        columns: Columns to read (None: all).
    """

    def __init__(self, extra: dict[str, Any], block_offsets: Sequence[int], label_column: str | None,
                 columns: list[str] | None = None) -> None:
        self.files = extra["files"]
        self.block_offsets = list(block_offsets)
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
        sparse = SparseFile(self.files[file_index]["size"], {self.block_offsets[block_index]: data})
        reader = pq.ParquetFile(sparse, metadata=metadata, pre_buffer=False)
        try:
            columns = self.columns
            if columns is not None and self.label_column and self.label_column not in columns:
                columns = [*columns, self.label_column]
            return reader.read_row_group(row_group, columns=columns)
        finally:
            reader.close()
            sparse.close()

    def decode(self, block_index: int, data: bytes) -> Sequence[tuple[Any, int]]:
        table = self.read_table(block_index, data)
        names = [name for name in table.column_names if name != self.label_column]
        values = {name: _column_values(table.column(name)) for name in names}
        if self.label_column and self.label_column in table.column_names:
            labels = [int(v) if v is not None else -1 for v in table.column(self.label_column).to_pylist()]
        else:
            labels = [-1] * table.num_rows
        return [({name: values[name][i] for name in names}, labels[i]) for i in range(table.num_rows)]
