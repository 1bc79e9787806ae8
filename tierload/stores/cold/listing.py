"""A cold-tier listing as columns: URLs, sizes and versions in Arrow/numpy arrays.

A listing of millions of objects must not cost a Python object per object: pages are turned
into Arrow arrays as they arrive and only the arrays are kept (an S3 listing's are written to
disk page by page and read back memory-mapped: :mod:`tierload.stores.cold.listing_spill`). S3 is listed with
ListObjectsV2 through s3fs's client; ``file://`` by walking with ``os.scandir``; any other
fsspec store through its ``find``.

Why S3 is listed per folder, concurrently: the pages of one prefix are sequential (each
needs the previous page's continuation token), so 1,281 pages at 20 ms each take 26 s of
latency alone. The prefix is listed once with delimiter ``/``; every folder it names (an
image folder's classes) is then listed on its own, up to :data:`FOLDERS_IN_FLIGHT` at once.
A prefix with a single folder gets no speed-up, and costs one extra request.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, overload

import numpy as np
import pyarrow as pa

from tierload.arrow_values import from_numpy, int64_array, large_strings, to_numpy
from tierload.process_memory import map_large_allocations, release_freed_memory
from tierload.stores.cold.listing_spill import SpilledPages
from tierload.stores.cold.object_info import ObjectInfo
from tierload.stores.cold.request_rate import RequestRate
from tierload.stores.local import TIER_MARKER

log = logging.getLogger(__name__)


def _pc() -> Any:
    """``pyarrow.compute``, imported when a listing is made: a process that only maps a manifest
    never loads it (~9 MB)."""
    import pyarrow.compute as pc

    return pc

__all__ = ["FOLDERS_IN_FLIGHT", "ObjectListing", "list_fsspec", "list_local", "list_s3",
           "release_freed_memory", "map_large_allocations"]

# Folders listed at once on S3: enough to hide ~20-50 ms per page behind parsing the others;
# more only holds more pages in memory at once.
FOLDERS_IN_FLIGHT = 16

_STRINGS = pa.large_string()
# Base names of tierload's own files (the tier marker, keys, the published endpoint): never samples.
_OWN_FILES = r"^(\.tierload|\.endpoint\.json$)"


class _Page:
    """The columns of one page (or one folder) of a listing, before filtering and sorting.

    Built from Python lists as they arrive and held as arrays, so a listing in progress
    keeps no Python object per object.
    """

    __slots__ = ("urls", "sizes", "versions", "first", "last", "in_order")

    def __init__(self, urls: list[str], sizes: list[int], versions: list[str]) -> None:
        self._set(large_strings(urls), np.asarray(sizes, np.int64), large_strings(versions))

    @classmethod
    def of(cls, urls: pa.Array, sizes: np.ndarray, versions: pa.Array) -> "_Page":
        """A page of columns already built."""
        page = cls.__new__(cls)
        page._set(urls, sizes, versions)
        return page

    def _set(self, urls: pa.Array, sizes: np.ndarray, versions: pa.Array) -> None:
        self.urls, self.sizes, self.versions = urls, sizes, versions
        self.first = str(urls[0].as_py()) if len(urls) else ""
        self.last = str(urls[-1].as_py()) if len(urls) else ""
        # strictly increasing URLs: this page needs no sort
        pc = _pc()
        self.in_order = len(urls) < 2 or bool(pc.all(pc.less(urls.slice(0, len(urls) - 1), urls.slice(1))).as_py())


@dataclass(frozen=True, eq=False)
class ObjectListing(Sequence[ObjectInfo]):
    """Every object under a prefix, in sorted URL order, as columns.

    Indexing gives an :class:`ObjectInfo` (built on demand), so code that walks a listing
    object by object keeps working; planners of many small objects use the columns.

    Attributes:
        urls: Arrow large_string array (objects,): full URL of each object.
        sizes: int64 array (objects,): size in bytes.
        versions: Arrow large_string array (objects,): ETag (S3) or ``mtime-size``.
    """

    urls: pa.Array
    sizes: np.ndarray
    versions: pa.Array
    # {printable URL: reason} of objects found but not listed (a local file name that is not
    # UTF-8); the manifest records them in its ``skipped``.
    unreadable: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, objects: Iterable[ObjectInfo]) -> "ObjectListing":
        """A listing of ``objects`` as given (neither sorted nor filtered)."""
        objects = list(objects)
        return cls(large_strings([o.url for o in objects]), np.array([o.size for o in objects], np.int64),
                   large_strings([o.version for o in objects]))

    @classmethod
    def from_pages(cls, pages: list[_Page], exclude: Sequence[str] = ()) -> "ObjectListing":
        """Concatenate pages, drop directory markers and excluded base names, sort by URL.

        Consumes ``pages`` (the list is emptied): each page is dropped as soon as its columns
        are copied into the listing's, so a listing of millions of objects is held once, not
        twice, while it is assembled.
        """
        kept = [page for page in (_filtered(page, exclude) for page in pages) if len(page.sizes)]
        pages.clear()
        if not kept:
            return cls(large_strings([]), np.zeros(0, np.int64), large_strings([]))
        # Pages in order of their first URL: a listing whose pages do not overlap and are each
        # sorted (S3's folders) is then sorted already and needs no reordering copy.
        kept.sort(key=lambda page: page.first)
        in_order = all(page.in_order for page in kept) and all(
            before.last < after.first for before, after in zip(kept[:-1], kept[1:], strict=False))
        sizes = np.concatenate(_take_column(kept, "sizes"))
        versions = _concat_strings(_take_column(kept, "versions"))
        urls = _concat_strings(_take_column(kept, "urls"))
        listing = cls(urls, sizes, versions)
        if not in_order:
            listing = listing.take(to_numpy(_pc().sort_indices(listing.urls)))  # UTF-8 = sorted()
        release_freed_memory()  # the pages' columns
        return listing

    @classmethod
    def from_spill(cls, spill: SpilledPages) -> "ObjectListing":
        """The pages of ``spill`` (already filtered) as one sorted listing; removes its files.

        Pages that are each sorted and do not overlap are copied in order into memory-mapped
        columns (see :mod:`tierload.stores.cold.listing_spill`); others are sorted in memory.
        """
        if not len(spill):
            spill.discard()
            return cls(large_strings([]), np.zeros(0, np.int64), large_strings([]))
        order = spill.sorted_pages()
        listing = cls(*spill.columns(order))
        if order is None:
            listing = listing.take(to_numpy(_pc().sort_indices(listing.urls)))  # UTF-8 = sorted()
        release_freed_memory()
        return listing

    def take(self, indices: np.ndarray) -> "ObjectListing":
        """The objects at ``indices`` (int64), in that order."""
        positions = int64_array(indices)
        return ObjectListing(self.urls.take(positions), self.sizes[indices], self.versions.take(positions))

    def __len__(self) -> int:
        return len(self.sizes)

    @overload
    def __getitem__(self, index: int) -> ObjectInfo: ...

    @overload
    def __getitem__(self, index: slice) -> "ObjectListing": ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            return self.take(np.arange(start, stop, step, dtype=np.int64))
        if not -len(self) <= index < len(self):
            raise IndexError(f"object {index} out of range of a listing of {len(self)}")
        index %= len(self)
        return ObjectInfo(str(self.urls[index].as_py()), int(self.sizes[index]), str(self.versions[index].as_py()))

    def __iter__(self) -> Iterator[ObjectInfo]:
        step = 65536  # Python values a chunk at a time, not the whole listing at once
        for lo in range(0, len(self), step):
            yield from map(ObjectInfo, self.urls.slice(lo, step).to_pylist(), self.sizes[lo:lo + step].tolist(),
                           self.versions.slice(lo, step).to_pylist())


def _filtered(page: _Page, exclude: Sequence[str]) -> _Page:
    """``page`` without directory markers, tierload's own files and excluded base names (a page at
    a time: small temporaries)."""
    names = _pc().replace_substring_regex(page.urls, pattern=r"^.*/", replacement="")
    drop = to_numpy(_pc().utf8_length(names)) == 0  # a directory marker ("a/") or an empty name
    drop |= to_numpy(_pc().match_substring_regex(names, _OWN_FILES))
    if exclude:
        drop |= to_numpy(_pc().is_in(names, value_set=large_strings(list(exclude))))
    if not drop.any():
        return page
    keep = from_numpy(~drop)
    return _Page.of(page.urls.filter(keep), page.sizes[~drop], page.versions.filter(keep))


def _take_column(pages: list[_Page], name: str) -> list[Any]:
    """The column ``name`` of every page, removed from the pages (the list is then its only holder)."""
    column = [getattr(page, name) for page in pages]
    for page in pages:
        setattr(page, name, None)
    return column


def _string_span(chunk: pa.Array) -> tuple[np.ndarray, int, int]:
    """A large_string chunk's offsets (len + 1,) and the first and last byte of its characters."""
    bounds = np.frombuffer(chunk.buffers()[1], np.int64)[chunk.offset:chunk.offset + len(chunk) + 1]
    return bounds, int(bounds[0]), int(bounds[-1])


def _concat_strings(chunks: list[pa.Array]) -> pa.Array:
    """One large_string array of ``chunks`` (no nulls), each chunk released once copied.

    ``pa.concat_arrays`` would hold every chunk and the result at once; here the result's
    buffers are allocated once and the list is emptied as it is copied.
    """
    chunks[:] = [chunk.cast(_STRINGS) for chunk in chunks]
    count = sum(len(chunk) for chunk in chunks)
    total = 0
    for chunk in chunks:
        _, low, high = _string_span(chunk)
        total += high - low
    offsets = np.empty(count + 1, np.int64)
    data = np.empty(total, np.uint8)
    offsets[0] = at = row = 0
    chunks.reverse()
    while chunks:
        chunk = chunks.pop()
        if chunk.null_count:
            raise ValueError(f"a listing column holds {chunk.null_count} nulls")
        bounds, low, high = _string_span(chunk)
        data[at:at + high - low] = np.frombuffer(chunk.buffers()[2], np.uint8)[low:high] if high > low else 0
        offsets[row + 1:row + len(chunk) + 1] = bounds[1:] - low + at
        at += high - low
        row += len(chunk)
    return pa.Array.from_buffers(_STRINGS, count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _timestamp(value: Any) -> Any:
    """botocore's timestamp parser, with a fast path for S3's ISO 8601 ``...Z`` times.

    botocore parses every ``LastModified`` of a listing with dateutil (~40 us each: 40% of a
    listing's CPU); the result here is the same tz-aware UTC datetime.
    """
    from botocore.utils import parse_timestamp
    from dateutil.tz import tzutc

    if isinstance(value, str) and value.endswith("Z") and "T" in value:
        try:
            return datetime.fromisoformat(value[:-1]).replace(tzinfo=tzutc())
        except ValueError:
            pass
    return parse_timestamp(value)


def _fast_timestamps(client: Any) -> None:
    """Give ``client``'s response parsers :func:`_timestamp` (same values, a fraction of the cost)."""
    factory = getattr(getattr(client, "_endpoint", None), "_response_parser_factory", None)
    if factory is not None and hasattr(factory, "set_parser_defaults"):
        factory.set_parser_defaults(timestamp_parser=_timestamp)


async def _list_pages(fs: Any, bucket: str, prefix: str, delimiter: str, url_base: str, pages: SpilledPages,
                      exclude: Sequence[str], rate: RequestRate | None = None) -> list[str]:
    """Write every page of one prefix to ``pages`` (filtered); return the folders (common prefixes)
    named. Each page's request takes a turn of ``rate`` first (``cold.max_requests_per_s``)."""
    request: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, **fs.req_kw}
    if delimiter:
        request["Delimiter"] = delimiter
    folders: list[str] = []
    while True:
        if rate is not None:
            await rate.wait_async()
        reply = await fs._call_s3("list_objects_v2", **request)
        contents = reply.get("Contents", [])
        page = _filtered(_Page([url_base + entry["Key"] for entry in contents],
                               [int(entry.get("Size") or 0) for entry in contents],
                               [str(entry.get("ETag") or f"{entry.get('LastModified', '')}-{entry.get('Size')}")
                                for entry in contents]), exclude)
        reply.pop("Contents", None)  # the parsed page: only its columns go on, to disk
        del contents
        if len(page.sizes):
            pages.add(page.urls, page.sizes, page.versions, page.first, page.last, page.in_order)
        folders.extend(folder["Prefix"] for folder in reply.get("CommonPrefixes", []))
        if not reply.get("IsTruncated"):
            return folders
        request["ContinuationToken"] = reply["NextContinuationToken"]


async def list_s3(fs: Any, protocol: str, root: str, exclude: Sequence[str] = (),
                  in_flight: int = FOLDERS_IN_FLIGHT, spill_dir: str | None = None,
                  rate: RequestRate | None = None) -> ObjectListing:
    """List ``root`` (``bucket/prefix``, no protocol) with ListObjectsV2 through s3fs's client.

    Runs on s3fs's event loop. The prefix is listed with delimiter ``/``, then each folder it
    names recursively, ``in_flight`` folders at once (see the module docstring). Each page is
    written to disk as it arrives and the listing's columns are memory-mapped
    (:mod:`tierload.stores.cold.listing_spill`).

    Args:
        spill_dir: Where the pages are written (a temporary directory inside it, removed before
            returning); None: the system's temporary directory.
        rate: The store's ``cold.max_requests_per_s`` limit (every page's request takes a turn);
            None: no limit.

    Raises:
        The client's errors, untranslated (the caller translates them in one place).
        OSError: ``spill_dir`` cannot be written.
    """
    bucket, _, key = root.partition("/")
    prefix = f"{key.rstrip('/')}/" if key else ""
    url_base = f"{protocol}://{bucket}/"
    _fast_timestamps(await fs.set_session())
    pages = SpilledPages(spill_dir)
    try:
        folders = await _list_pages(fs, bucket, prefix, "/", url_base, pages, exclude, rate)
        gate = asyncio.Semaphore(max(1, in_flight))

        async def list_folder(folder: str) -> None:
            async with gate:
                await _list_pages(fs, bucket, folder, "", url_base, pages, exclude, rate)

        await asyncio.gather(*(list_folder(folder) for folder in folders))
    except BaseException:
        pages.discard()
        raise
    return ObjectListing.from_spill(pages)


def list_local(root: str, protocol: str = "file", exclude: Sequence[str] = ()) -> ObjectListing:
    """Walk a local directory with ``os.scandir`` (symbolic links followed, as ``fs.info`` does).

    Versions are ``mtime-size`` exactly as :meth:`tierload.stores.cold.source.ColdSource.head` gives
    them. A missing directory lists as empty; a file lists as itself.

    Raises:
        OSError: A directory cannot be read.
    """
    urls: list[str] = []
    sizes: list[int] = []
    versions: list[str] = []
    url_base = f"{protocol}://"
    if os.path.isfile(root):
        status = os.stat(root)
        return ObjectListing.from_pages([_Page([url_base + root], [status.st_size],
                                               [f"{status.st_mtime}-{status.st_size}"])], exclude)
    pending = [root] if os.path.isdir(root) else []
    unreadable: dict[str, str] = {}
    while pending:
        folder = pending.pop()
        if os.path.exists(os.path.join(folder, TIER_MARKER)):
            continue  # a tier directory: every file in it is tierload's own
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir():
                    pending.append(entry.path)
                elif not entry.is_file():
                    continue
                elif not _is_utf8(entry.path):
                    unreadable[url_base + _printable(entry.path)] = NOT_UTF8
                else:
                    status = entry.stat()
                    urls.append(url_base + entry.path)
                    sizes.append(status.st_size)
                    versions.append(f"{status.st_mtime}-{status.st_size}")
    listing = ObjectListing.from_pages([_Page(urls, sizes, versions)], exclude)
    if unreadable:
        log.warning("%d files under %s have names that are not UTF-8 and were skipped (see manifest.skipped), "
                    "e.g. %s; rename them to read them", len(unreadable), root, next(iter(unreadable)))
        listing = replace(listing, unreadable=unreadable)
    return listing


# A URL, a tier key and the manifest's Arrow columns are text: a name that is not UTF-8 cannot
# be any of them, and a guessed decoding (Latin-1?) would name another file on the next listing.
NOT_UTF8 = "file name is not valid UTF-8; rename it (e.g. with convmv) to read it"


def _is_utf8(path: str) -> bool:
    """Whether ``path`` (as ``os.scandir`` gives it: bad bytes as lone surrogates) is valid UTF-8."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _printable(path: str) -> str:
    """``path`` with its bytes that are not UTF-8 written as ``\\xNN`` (valid text, for logs and the manifest)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def list_fsspec(fs: Any, root: str, protocol: str, version_of: Any, exclude: Sequence[str] = ()) -> ObjectListing:
    """Any other fsspec store: its ``find``, turned into columns one entry at a time.

    Args:
        fs: The filesystem.
        root: The prefix, protocol stripped.
        protocol: Written before each path to make its URL.
        version_of: ``version_of(info) -> str``.
        exclude: Base names to skip.
    """
    urls: list[str] = []
    sizes: list[int] = []
    versions: list[str] = []
    for path, info in fs.find(root, detail=True, withdirs=False).items():
        if info.get("type") != "directory":
            urls.append(f"{protocol}://{path}")
            sizes.append(int(info.get("size") or 0))
            versions.append(version_of(info))
    return ObjectListing.from_pages([_Page(urls, sizes, versions)], exclude)
