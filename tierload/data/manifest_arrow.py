"""The manifest as an Arrow IPC file: written once by the process that lists, read with pyarrow
when its column index cannot be used.

Every process maps the file; most through its column index with numpy alone
(:mod:`tierload.data.manifest_columns`). This module is the writer, which also derives that index,
and the reader for a file without a usable index.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa

from tierload.arrow_values import from_numpy, int64_array, large_strings, to_numpy
from tierload.data.manifest import FORMAT_VERSION, Manifest, partial_path
from tierload.data.manifest_columns import INDEX_DTYPES, FileColumns, file_identity, index_path, write_index
from tierload.data.packs import ListedMembers, PackMembers
from tierload.data.string_column import StringColumn
from tierload.errors import ManifestError
from tierload.stores.dir_trust import make_private_dirs, open_new_file


def _one_row(values: pa.Array) -> pa.Array:
    """``values`` as the single row of a large-list column (columns of any length share one table)."""
    return pa.LargeListArray.from_arrays(int64_array([0, len(values)]), values)


def _joined(slices: list[pa.Array]) -> pa.Array:
    """``slices`` as one large_string array; without a copy when they are consecutive slices of one array.

    The planner cuts every pack's members out of one listing in order, so at a million keys this
    saves writing the manifest with a second copy of every URL and version in memory.
    """
    strings = pa.large_string()
    if not slices:
        return large_strings([])
    first = slices[0]
    shared = [b.address if b is not None else None for b in first.buffers()]
    contiguous = first.type == strings and all(
        s.type == strings and [b.address if b is not None else None for b in s.buffers()] == shared
        and s.offset == before.offset + len(before) for before, s in zip(slices[:-1], slices[1:], strict=True))
    if contiguous and first.null_count == 0:
        return pa.Array.from_buffers(strings, sum(len(s) for s in slices), first.buffers(), offset=first.offset)
    return pa.concat_arrays([s.cast(strings) for s in slices])


def _member_columns(members: list[PackMembers]) -> tuple[PackMembers, np.ndarray]:
    """The listing that ``members`` refer to, and their rows in it (concatenated, pack order).

    Packs planned out of listing order share one listing (:class:`~tierload.data.packs.ListedMembers`):
    it is written once, as it is, with each member's row. Others are written as their
    concatenation, row ``i`` being member ``i``.
    """
    listings = {id(m.listing): m.listing for m in members if isinstance(m, ListedMembers)}
    if members and len(listings) == 1 and all(isinstance(m, ListedMembers) for m in members):
        ids = np.concatenate([m.ids for m in members if isinstance(m, ListedMembers)])
        return next(iter(listings.values())), ids
    offsets = (np.concatenate([m._offsets_or_zeros() for m in members])
               if any(m.offsets is not None for m in members) else None)
    joined = PackMembers(_joined([m.urls for m in members]), _joined([m.versions for m in members]),
                         np.concatenate([m.sizes for m in members] or [np.zeros(0, np.int64)]), offsets)
    count = len(joined.sizes)
    return joined, np.arange(count, dtype=np.int32 if count < 2**31 else np.int64)


def save_manifest(manifest: Manifest, path: Path) -> None:
    """Write ``manifest`` as an Arrow IPC file (one row; every column a list), atomically.

    The file is what :func:`~tierload.data.manifest.open_manifest` maps: sample arrays and pack
    members are read from it in place, never parsed. Pack members are rows of one member listing
    (``member_*``): ``member_id`` (int32) gives each pack's rows, packs ``pack_first`` apart.
    Its column index is written beside it (:mod:`tierload.data.manifest_columns`), renamed into
    place after the file.
    """
    packs = [index for index, block in enumerate(manifest.blocks) if block.members is not None]
    members = [member for member in (manifest.blocks[index].members for index in packs) if member is not None]
    pack_first = np.zeros(len(packs) + 1, dtype=np.int64)
    np.cumsum([len(m) for m in members], out=pack_first[1:])
    listing, member_ids = _member_columns(members)
    strings = pa.large_string()
    columns = {
        "sample_block": from_numpy(np.asarray(manifest.sample_block, np.int32)),
        "sample_index": from_numpy(np.asarray(manifest.sample_index, np.int32)),
        "labels": int64_array(manifest.labels),
        "block_key": large_strings([b.key for b in manifest.blocks]),
        "block_url": large_strings([b.url for b in manifest.blocks]),
        "block_version": large_strings([b.version for b in manifest.blocks]),
        "block_offset": int64_array(b.offset for b in manifest.blocks),
        "block_length": int64_array(b.length for b in manifest.blocks),
        "pack_block": int64_array(packs),
        "pack_first": int64_array(pack_first),
        "member_id": from_numpy(member_ids),
        "member_url": listing.urls.cast(strings),
        "member_version": listing.versions.cast(strings),
        "member_size": int64_array(listing.sizes),
    }
    if listing.offsets is not None:  # members that are byte ranges of their objects
        columns["member_offset"] = int64_array(listing.offsets)
    # dataset_id too: a process that maps the file then never reads the key column to digest it
    # (tens of MB of its pages at a million blocks).
    meta = {"format": FORMAT_VERSION, "url": manifest.url, "layout": manifest.layout,
            "created_at": manifest.created_at, "classes": manifest.classes, "extra": manifest.extra,
            "skipped": manifest.skipped, "dataset_id": manifest.dataset_id}
    table = pa.table({name: _one_row(values) for name, values in columns.items()},
                     metadata={"tierload": json.dumps(meta)})
    # A listing names every object of the dataset: owner-only, as the tiers (issue 26 item 3).
    make_private_dirs(path.parent)
    tmp = partial_path(path, os.getpid())  # renamed when whole: a reader never maps a partial file
    open_new_file(tmp).close()  # created 0600; Arrow's writer below truncates it and keeps its mode
    with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    del table, columns
    index = index_path(path)
    index_tmp = partial_path(index, os.getpid())
    indexed = _write_index(tmp, index_tmp)
    os.replace(tmp, path)
    if indexed:
        os.replace(index_tmp, index)
    else:  # an older index names another file and would be ignored; removed so nothing reads it
        with contextlib.suppress(FileNotFoundError):
            index.unlink()


def index_manifest(path: Path) -> bool:
    """Write the column index of manifest file ``path`` (one cached before indexes existed), so a
    process maps it without pyarrow from then on.

    Returns:
        Whether it was written (not when a column lies outside the file, or the file was replaced
        while it was read: the next reader reads it with pyarrow, as without an index).

    Raises:
        OSError: The file cannot be read.
        ManifestError: It is not a tierload manifest.
    """
    index = index_path(path)
    index_tmp = partial_path(index, os.getpid())
    if not _write_index(path, index_tmp):
        return False
    os.replace(index_tmp, index)
    return True


def _write_index(path: Path, index: Path) -> bool:
    """Write the column index of Arrow file ``path`` at ``index``; whether it could be (see
    :func:`_column_locations`; the file is stat'ed before and after, so an index never names a
    file other than the one its offsets and metadata were read from).

    Raises:
        ManifestError: ``path`` is not a tierload manifest.
    """
    identity = file_identity(path)
    read = _column_locations(path)
    if read is None or file_identity(path) != identity:
        return False
    meta, located = read
    write_index(index, identity, meta, located)
    return True


# Arrow's integer types a column index may name, as numpy dtypes.
_NUMPY_OF = {"int32": "<i4", "int64": "<i8"}


def _column_locations(path: Path) -> tuple[dict, dict[str, object]] | None:
    """The manifest's metadata and where each column's buffers lie in the Arrow IPC file ``path``
    (for its column index), read from pyarrow's mapping of it: a buffer's address minus the
    mapping's start is its file offset.

    Returns:
        ``(meta, name -> location)`` (see :func:`~tierload.data.manifest_columns.write_index`), or
        None when a column is not an unmasked buffer of the file (an index then is not written).

    Raises:
        ManifestError: ``path`` is not a tierload manifest.
    """
    size = os.path.getsize(path)
    with pa.memory_map(str(path), "r") as mapped:
        start = mapped.read_buffer(1).address
        mapped.seek(0)
        table, meta = _read_table(mapped, path)

        def at(buffer: pa.Buffer, skip: int, width: int, count: int) -> int | None:
            offset = buffer.address - start + skip * width
            return offset if 0 <= offset and offset + count * width <= size else None

        located: dict[str, object] = {}
        for name in table.column_names:
            values = table.column(name).chunk(0).values
            buffers = values.buffers()
            if values.null_count:
                return None
            # An empty column's buffers may be empty allocations outside the file: it needs none.
            if values.type == pa.large_string():
                if not len(values):
                    located[name] = {"offsets": None, "data": None}
                    continue
                offsets = at(buffers[1], values.offset, 8, len(values) + 1)
                empty = buffers[2] is None or buffers[2].size == 0  # every string empty
                data = None if empty else at(buffers[2], 0, 1, buffers[2].size)
                if offsets is None or (not empty and data is None):
                    return None
                located[name] = {"offsets": {"offset": offsets, "count": len(values) + 1},
                                 "data": None if empty else {"offset": data, "bytes": buffers[2].size}}
            else:
                dtype = _NUMPY_OF.get(str(values.type))
                if dtype is None or dtype not in INDEX_DTYPES:
                    return None
                offset = at(buffers[1], values.offset, np.dtype(dtype).itemsize, len(values)) if len(values) else 0
                if offset is None:
                    return None
                located[name] = {"dtype": dtype, "offset": offset, "count": len(values)}
        return meta, located


def arrow_columns(path: str | os.PathLike) -> FileColumns:
    """The columns of manifest file ``path``, mapped by pyarrow (a file without a usable index).

    Raises:
        OSError: The file cannot be read.
        ManifestError: It is not a tierload manifest.
    """
    table, meta = _read_table(pa.memory_map(str(path), "r"), path)
    columns = FileColumns(meta)
    for name in table.column_names:
        values = table.column(name).chunk(0).values
        if values.type == pa.large_string():
            columns.strings[name] = StringColumn.of_arrow(values)
        else:
            columns.numbers[name] = to_numpy(values)
    return columns


def _read_table(mapped: pa.MemoryMappedFile, path: str | os.PathLike) -> tuple[pa.Table, dict]:
    """The manifest's table (columns over ``mapped``, no copy) and its tierload metadata.

    Raises:
        ManifestError: ``path`` is not a tierload manifest.
    """
    try:
        table = pa.ipc.open_file(mapped).read_all()
        return table, json.loads((table.schema.metadata or {})[b"tierload"])
    except (pa.ArrowInvalid, KeyError, ValueError) as exc:
        raise ManifestError(f"{str(path)!r} is not a tierload manifest: {exc}") from None
