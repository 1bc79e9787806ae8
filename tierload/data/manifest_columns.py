"""A manifest file's columns, and the index that lets a process map them without pyarrow.

The manifest is one Arrow IPC file (:func:`tierload.data.manifest_arrow.save_manifest`). Beside it
the writer puts its column index (``<file>.columns.json``): where each column's buffers lie in
the file (byte offset, count, dtype), the manifest's metadata, and the file's identity (inode,
size, modification time). Arrow's IPC file stores uncompressed buffers as they are in memory, so
a column is a numpy view of the mapped file at that offset: :func:`indexed_columns` maps them
with numpy alone. A training process then never imports pyarrow, which is 25 MB of its RSS
(measured at 1.28 M keys, issue 25), and pages stay shared with every process mapping the file.

The index is derived by the writer from pyarrow's own view of the file it wrote (the buffer
addresses of the mapped columns), never by parsing Arrow's metadata here. An index that is
missing (a file written before it existed), names another file (a crash between the two renames)
or does not fit the file is not used: the file is then read with pyarrow.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tierload.data.string_column import StringColumn
from tierload.stores.dir_trust import open_new_file

log = logging.getLogger(__name__)

# 1: numbers (dtype, offset, count) and strings (offsets, data) of large_list<...> columns' values
INDEX_FORMAT = 1
# The dtypes an index may name (little-endian, as Arrow writes them on every platform we run on).
INDEX_DTYPES = frozenset({"<i4", "<i8"})


@dataclass(frozen=True)
class FileColumns:
    """The columns of one manifest file, however they were mapped.

    Attributes:
        meta: The manifest's metadata (``format``, ``url``, ``layout``, ``classes`` ...; see
            :func:`tierload.data.manifest_arrow.save_manifest`).
        numbers: name -> a read-only numpy view (int32 or int64) of the mapped file.
        strings: name -> a :class:`~tierload.data.string_column.StringColumn` over the mapped file.
    """

    meta: dict[str, Any]
    numbers: dict[str, np.ndarray] = field(default_factory=dict)
    strings: dict[str, StringColumn] = field(default_factory=dict)


def index_path(path: Path) -> Path:
    """Where the column index of manifest file ``path`` lives."""
    return path.with_name(path.name + ".columns.json")


def file_identity(path: str | os.PathLike | int) -> list[int]:
    """``[inode, size, mtime_ns]`` of ``path`` (or of an open file descriptor): what an index must
    name to be used with it (a rename keeps all three)."""
    stat = os.stat(path)
    return [stat.st_ino, stat.st_size, stat.st_mtime_ns]


def write_index(index: Path, identity: list[int], meta: dict[str, Any], columns: dict[str, Any]) -> None:
    """Write a column index file (created owner-only, like the manifest).

    Args:
        index: Where to write it (the caller renames it into place after the manifest).
        identity: :func:`file_identity` of the manifest file it describes.
        meta: The manifest's metadata.
        columns: name -> ``{"dtype", "offset", "count"}`` (numbers, offset in bytes, count in
            values) or ``{"offsets": {"offset", "count"}, "data": {"offset", "bytes"}}`` (strings;
            ``offsets`` None for an empty column, ``data`` None when every string is empty).
    """
    with open_new_file(index) as handle:
        handle.write(json.dumps({"index_format": INDEX_FORMAT, "file": identity, "meta": meta,
                                 "columns": columns}).encode())


def index_fits(path: str | os.PathLike) -> bool:
    """Whether manifest file ``path`` has a column index naming it (not whether every entry is
    sound: :func:`indexed_columns` checks those when it maps them).

    Raises:
        OSError: The manifest file cannot be read.
    """
    try:
        index = _read_index(path)
    except ValueError:
        return False
    return index is not None and _names(index, file_identity(path))


def _read_index(path: str | os.PathLike) -> dict[str, Any] | None:
    """The column index of manifest file ``path`` as written, or None when there is none.

    Raises:
        ValueError: It is not a JSON object.
    """
    try:
        index = json.loads(index_path(Path(path)).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    if not isinstance(index, dict):
        raise ValueError(f"the index is a JSON {type(index).__name__}, not an object")
    return index


def _names(index: dict[str, Any], identity: list[int]) -> bool:
    """Whether ``index`` is of this format and of the file of ``identity`` (not another file
    written at the same path)."""
    return index.get("index_format") == INDEX_FORMAT and index.get("file") == identity


def indexed_columns(path: str | os.PathLike) -> FileColumns | None:
    """The columns of manifest file ``path``, mapped through its index with numpy (no pyarrow).

    Returns:
        The columns, or None when there is no index usable with this file (none written, one of
        another file, or one that does not fit it: logged): the caller reads it with pyarrow.

    Raises:
        OSError: The manifest file cannot be read.
    """
    try:
        index = _read_index(path)
    except ValueError as exc:
        log.warning("the column index of %s is unreadable (%s); reading the file with pyarrow", path, exc)
        return None
    if index is None:
        return None
    # The file is opened, then its identity checked and mapped through that one descriptor: a
    # manifest replaced meanwhile is either this index's file or not used with it, never mixed.
    with open(path, "rb") as handle:
        if not _names(index, file_identity(handle.fileno())):
            return None  # an index of another format or another file (a rewrite between its renames)
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        columns = FileColumns(dict(index["meta"]))
        for name, where in index["columns"].items():
            if "dtype" in where:
                columns.numbers[name] = _numbers(mapped, where["dtype"], where["offset"], where["count"])
            elif where["offsets"] is None:  # an empty column
                columns.strings[name] = StringColumn(np.zeros(1, np.int64), np.zeros(0, np.uint8))
            else:
                offsets = _numbers(mapped, "<i8", where["offsets"]["offset"], where["offsets"]["count"])
                data = where["data"]
                strings = (np.zeros(0, np.uint8) if data is None
                           else _numbers(mapped, "|u1", data["offset"], data["bytes"]))
                columns.strings[name] = StringColumn(offsets, strings)
        return columns
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("the column index of %s is unreadable (%s); reading the file with pyarrow", path, exc)
        return None


def _numbers(mapped: mmap.mmap, dtype: str, offset: int, count: int) -> np.ndarray:
    """``count`` values of ``dtype`` at byte ``offset`` of ``mapped``, as a read-only view.

    Raises:
        ValueError: An unknown dtype, or a range outside the file.
    """
    if dtype not in INDEX_DTYPES and dtype != "|u1":
        raise ValueError(f"dtype {dtype!r} is not one an index names ({sorted(INDEX_DTYPES)} or '|u1')")
    kind = np.dtype(dtype)
    if offset < 0 or count < 0 or offset + count * kind.itemsize > len(mapped):
        raise ValueError(f"{count} values of {dtype} at byte {offset} pass the end of the {len(mapped)}-byte file")
    return np.frombuffer(mapped, kind, count, offset)
