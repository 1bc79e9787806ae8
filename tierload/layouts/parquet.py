"""Parquet files where a row is a sample and a row group is a block.

The manifest keeps each file's footer (read once with one or two ranged GETs); a block is
the byte range of one row group's column chunks, which decodes on its own given the footer.
A Parquet file larger than ``manifest.block_bytes`` is therefore cached as one byte-range
block per row group, never as one huge block. A single row group is the smallest unit that
decodes on its own; one larger than ``block_bytes`` stays one block, and the manifest warns
(write such files with smaller row groups, e.g. ``pyarrow.parquet.write_table(...,
row_group_size=...)``).
"""

from __future__ import annotations

import base64
import logging
import struct
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from tierload.blocks import Block
from tierload.errors import ManifestError
from tierload.layouts.base import LayoutPlan
from tierload.layouts.sparse import SparseFile
from tierload.stores.cold import ColdSource, ObjectInfo

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

    Each row is a 1-D tensor of the schema's value type (``list<int64>`` -> ``torch.int64``,
    never promoted to float by a null elsewhere in the row group); a null row is ``None``; a
    row holding null elements cannot be a tensor and comes as a Python list with ``None`` at
    the nulls (integers exact).
    """
    dtype = np.dtype(array.type.value_type.to_pandas_dtype())
    flat = array.flatten()
    if array.null_count == 0 and flat.null_count == 0 and len(array):
        lengths = array.value_lengths().to_numpy(zero_copy_only=False)
        if (lengths == lengths[0]).all():
            values = flat.to_numpy(zero_copy_only=False).astype(dtype, copy=False).reshape(len(array), -1)
            return [torch.from_numpy(row.copy()) for row in values]
    rows: list[Any] = []
    for row in array:
        if not row.is_valid:
            rows.append(None)
        elif row.values.null_count:
            rows.append(row.values.to_pylist())
        else:
            rows.append(torch.from_numpy(row.values.to_numpy(zero_copy_only=False).astype(dtype, copy=True)))
    return rows


def _column_values(column: pa.ChunkedArray) -> Sequence[Any]:
    """Per-row values of a column: tensors for numeric lists (see :func:`_numeric_list_rows`), else Python values.

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
