"""NumPy ``.npy`` files, read in place: every row along the first axis is a sample.

``x.npy`` of shape ``(N, 3, 32, 32)`` holds N samples of shape ``(3, 32, 32)`` (a 0-d array is
one sample). The manifest reads each file's header with one small ranged GET; a block is a
byte range of whole rows, about ``manifest.block_bytes`` (a row larger than that is a block
of its own), so a large file is never one huge block. Rows decode by reinterpreting the
block's bytes (no parse), on the host or, with kvikio, straight in GPU memory. Labels are -1
(keep labels in a Parquet column, or in the rows themselves).

C-ordered arrays only: a Fortran-ordered array's rows are not contiguous byte ranges.
Arrays of Python objects (pickles) are refused.
"""

from __future__ import annotations

import ast
import math
import struct
from typing import Any, Sequence

import numpy as np
import torch

from tierload.data.blocks import Block
from tierload.data.layouts.base import LayoutPlan
from tierload.errors import ManifestError
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.source import ColdSource

_MAGIC = b"\x93NUMPY"
_HEAD_GUESS = 4096


def parse_npy_header(head: bytes, url: str = "") -> tuple[np.dtype, tuple[int, ...], int]:
    """``(dtype, shape, data_offset)`` of a ``.npy`` file from its first bytes.

    Raises:
        ManifestError: Not a .npy file, a Fortran-ordered or object array, or ``head`` is too short.
    """
    if len(head) < 10 or not head.startswith(_MAGIC):
        raise ManifestError("not a .npy file (no \\x93NUMPY magic)", tier="cold", url=url)
    major = head[6]
    if major == 1:
        header_len, start = struct.unpack("<H", head[8:10])[0], 10
    elif major in (2, 3):
        header_len, start = struct.unpack("<I", head[8:12])[0], 12
    else:
        raise ManifestError(f".npy format version {major} is not supported", tier="cold", url=url)
    if len(head) < start + header_len:
        raise ManifestError("short read of the .npy header", tier="cold", url=url)
    encoding = "utf-8" if major == 3 else "latin1"
    try:
        header = ast.literal_eval(head[start:start + header_len].decode(encoding))
        dtype = np.lib.format.descr_to_dtype(header["descr"])
        shape = tuple(int(n) for n in header["shape"])
        fortran = bool(header["fortran_order"])
    except (ValueError, SyntaxError, KeyError, TypeError) as exc:
        raise ManifestError(f"unreadable .npy header: {exc}", tier="cold", url=url) from exc
    if dtype.hasobject:
        raise ManifestError(".npy array of Python objects (pickles) is not read", tier="cold", url=url)
    if fortran and len(shape) > 1:
        raise ManifestError("Fortran-ordered .npy: rows are not contiguous; save it C-ordered "
                            "(np.ascontiguousarray)", tier="cold", url=url)
    return dtype, shape, start + header_len


def read_npy_header(source: ColdSource, obj: ObjectInfo) -> tuple[np.dtype, tuple[int, ...], int]:
    """``(dtype, shape, data_offset)`` of the ``.npy`` object ``obj``: one small ranged GET (two for
    a header longer than 4 KiB), pinned to the listed version.

    Raises:
        ManifestError: Not a readable .npy (see :func:`parse_npy_header`).
        SourceChangedError: The object changed since it was listed.
    """
    head = source.read(obj.url, obj.version, 0, min(obj.size, _HEAD_GUESS))
    if len(head) >= 12 and head.startswith(_MAGIC):
        need = (struct.unpack("<H", head[8:10])[0] + 10 if head[6] == 1
                else struct.unpack("<I", head[8:12])[0] + 12)
        if need > len(head):
            head = source.read(obj.url, obj.version, 0, min(obj.size, need))
    return parse_npy_header(head, obj.url)


def plan_npy(source: ColdSource, objects: list[ObjectInfo], *, block_bytes: int) -> LayoutPlan:
    """Blocks = byte ranges of whole rows of every ``.npy`` file; samples = rows.

    Raises:
        ManifestError: No file holds a row, or a file is not a readable .npy.
    """
    skipped: dict[str, str] = {}
    blocks: list[Block] = []
    counts: list[int] = []
    arrays: list[dict[str, Any]] = []
    block_array: list[int] = []
    for obj in objects:
        if not obj.url.lower().endswith(".npy"):
            skipped[obj.url] = "not a .npy file"
            continue
        if obj.size == 0:
            skipped[obj.url] = "zero-byte object is not a .npy file"
            continue
        dtype, shape, offset = read_npy_header(source, obj)
        rows = shape[0] if shape else 1
        row_shape = list(shape[1:]) if shape else []
        row_bytes = int(math.prod(row_shape)) * dtype.itemsize
        if rows == 0 or row_bytes == 0:
            skipped[obj.url] = f"array of shape {shape} holds no bytes"
            continue
        if offset + rows * row_bytes > obj.size:
            raise ManifestError(f".npy header says {rows} rows of {row_bytes} bytes, the file has "
                                f"{obj.size - offset} data bytes", tier="cold", url=obj.url)
        per_block = max(1, block_bytes // row_bytes)
        array_index = len(arrays)
        arrays.append({"url": obj.url, "descr": np.lib.format.dtype_to_descr(dtype), "row_shape": row_shape})
        for first in range(0, rows, per_block):
            take = min(per_block, rows - first)
            blocks.append(Block.of(obj.url, obj.version, offset + first * row_bytes, take * row_bytes))
            counts.append(take)
            block_array.append(array_index)
    if not blocks:
        raise ManifestError(f"no .npy rows under the prefix ({len(objects)} objects)", tier="cold", url=source.url)
    return LayoutPlan.of_counts(blocks, counts, extra={"arrays": arrays, "block_array": block_array}, skipped=skipped)


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    """The torch dtype with the same bytes as a numpy dtype (native byte order)."""
    return torch.from_numpy(np.empty(0, dtype=dtype.newbyteorder("="))).dtype


class NpyDecoder:
    """Reinterprets a block's bytes as rows: ``(row_tensor, -1)`` pairs.

    Accepts ``bytes`` (rows become CPU tensors) or a uint8 ``torch.Tensor`` on any device (rows
    become views of it: the kvikio path decodes on the GPU without a copy).
    """

    def __init__(self, extra: dict[str, Any]) -> None:
        self.arrays = extra["arrays"]
        self.block_array = extra["block_array"]

    def decode(self, block_index: int, data: bytes | torch.Tensor) -> Sequence[tuple[Any, int]]:
        array = self.arrays[self.block_array[block_index]]
        dtype = np.lib.format.descr_to_dtype(array["descr"])
        row_shape = tuple(array["row_shape"])
        if isinstance(data, torch.Tensor):
            if dtype.isnative:
                return [(row, -1) for row in data.view(torch_dtype(dtype)).reshape(-1, *row_shape)]
            data = data.cpu().numpy().tobytes()  # a byte swap happens on the host
        values = np.frombuffer(bytearray(data), dtype=dtype).reshape(-1, *row_shape)
        if not values.dtype.isnative:
            values = values.astype(values.dtype.newbyteorder("="))
        rows = torch.from_numpy(values)
        return [(row, -1) for row in rows]
