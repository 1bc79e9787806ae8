"""Packs: many small objects stored, moved and counted as one tier block.

Objects below ``manifest.pack_threshold_bytes`` are grouped at listing time into packs of about
``manifest.pack_target_bytes``, in ``manifest.pack_order``: ``mixed`` (the default) cuts the
listing in :func:`mixing_order`, so a pack holds objects from across the listing (many classes),
``listing`` packs neighbours in listing order (see docs/packs.md). A pack's raw bytes are its
members' bytes concatenated; its key derives from every member's URL, version and size, so a
changed member gives a new key after a refresh and the old manifest's pack fails with
:class:`tierload.errors.SourceChangedError` like a plain block. The cold read of any block,
plain or pack, is :mod:`tierload.data.cold_read`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pyarrow as pa
import xxhash

from tierload.arrow_values import from_numpy, int64_array, large_strings, string_scalar
from tierload.stores.keys import block_key

if TYPE_CHECKING:
    from tierload.stores.cold.object_info import ObjectInfo


@dataclass(frozen=True, eq=False)
class PackMembers:
    """The source objects of one pack, in pack order, as columns (no Python object per member).

    Attributes:
        urls: Arrow large_string array (members,): source URL of each member.
        versions: Arrow large_string array (members,): source version (ETag or ``mtime-size``) of
            each member at listing time.
        sizes: int64 array (members,): size in bytes of each member (0 for an empty object).
        offsets: int64 array (members,): first byte of each member in its object, for a block made
            of byte ranges (a Parquet row group's projected column chunks: ranges of one object);
            None for whole objects (every offset 0).
    """

    urls: pa.Array
    versions: pa.Array
    sizes: np.ndarray
    offsets: np.ndarray | None = None

    @classmethod
    def of(cls, urls: Sequence[str], versions: Sequence[str], sizes: Sequence[int],
           offsets: Sequence[int] | None = None) -> "PackMembers":
        """Members from Python sequences of equal length (``offsets``: byte ranges, None: whole objects).

        Raises:
            ValueError: The sequences differ in length.
        """
        if not len(urls) == len(versions) == len(sizes) or (offsets is not None and len(offsets) != len(sizes)):
            raise ValueError(f"pack columns differ in length: urls={len(urls)}, versions={len(versions)}, "
                             f"sizes={len(sizes)}, offsets={None if offsets is None else len(offsets)}")
        return cls(large_strings(urls), large_strings(versions), np.asarray(sizes, dtype=np.int64),
                   None if offsets is None else np.asarray(offsets, dtype=np.int64))

    @classmethod
    def ranges(cls, url: str, version: str, spans: Sequence[tuple[int, int]]) -> "PackMembers":
        """Members that are byte ranges ``(offset, length)`` of one object (of ``version``)."""
        return cls.of([url] * len(spans), [version] * len(spans), [length for _, length in spans],
                      [offset for offset, _ in spans])

    def rows(self) -> list[tuple[str, str, int]]:
        """``(url, version, size)`` of each member, as Python values (built on demand)."""
        return list(zip(self.urls.to_pylist(), self.versions.to_pylist(), self.sizes.tolist(), strict=True))

    def requests(self) -> list[tuple[str, str, int, int]]:
        """``(url, version, offset, length)`` of each member: its byte range (whole objects from 0)."""
        offsets = self.offsets.tolist() if self.offsets is not None else [0] * len(self)
        return [(url, version, offset, size) for (url, version, size), offset
                in zip(self.rows(), offsets, strict=True)]

    def __reduce__(self):
        # Compact copies: a slice of a memory-mapped manifest would otherwise pickle the whole column.
        return PackMembers, (pa.concat_arrays([self.urls]), pa.concat_arrays([self.versions]),
                             np.array(self.sizes, dtype=np.int64),
                             None if self.offsets is None else np.array(self.offsets, dtype=np.int64))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PackMembers):
            return NotImplemented
        return (self.urls.equals(other.urls) and self.versions.equals(other.versions)
                and np.array_equal(self.sizes, other.sizes)
                and np.array_equal(self._offsets_or_zeros(), other._offsets_or_zeros()))

    def _offsets_or_zeros(self) -> np.ndarray:
        return self.offsets if self.offsets is not None else np.zeros(len(self), np.int64)

    def __hash__(self) -> int:
        return hash(self.digest())

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def total_bytes(self) -> int:
        """Size of the pack in bytes."""
        return int(self.sizes.sum())

    @property
    def first_url(self) -> str:
        """The first member's URL (a pack's block carries it, for logs and its key's slug)."""
        return str(self.urls[0].as_py())

    def digest(self) -> str:
        """A version of the pack as a whole: changes when any member's URL, version, size or
        offset does (a pack of whole objects keeps the digest it had before offsets existed)."""
        whole = pack_digests(self.urls, self.versions, self.sizes, np.zeros(1, np.int64),
                             np.array([len(self)], np.int64))[0]
        if self.offsets is None or not self.offsets.any():
            return whole
        ranged = xxhash.xxh3_128(whole.encode())
        ranged.update(np.ascontiguousarray(self.offsets, dtype="<i8").tobytes())
        return f"ranges-{ranged.hexdigest()}"

    def key(self) -> str:
        """The pack's tier key (see :mod:`tierload.stores.keys`); its slug is the first member's name."""
        return block_key(self.first_url, self.digest(), 0, self.total_bytes)


class ListedMembers(PackMembers):
    """A pack's members as rows of a listing shared by many packs (no copy of their strings).

    A planner that packs objects out of listing order (``manifest.pack_order: mixed``) and a
    mapped manifest hold one listing and, per pack, its member ids: the columns are gathered
    when asked for (a pack's fetch, a pickle), so a million members cost 4 bytes each, not a
    second copy of every URL and version.

    Args:
        listing: The shared columns (a :class:`PackMembers` of every listed object).
        ids: int32 or int64 (members,): the members' rows in ``listing``, in pack order.
    """

    listing: PackMembers
    ids: np.ndarray

    def __init__(self, listing: PackMembers, ids: np.ndarray) -> None:  # noqa: D107 - see the class
        object.__setattr__(self, "listing", listing)
        object.__setattr__(self, "ids", ids)

    @property
    def urls(self) -> pa.Array:
        return self.listing.urls.take(from_numpy(self.ids))

    @property
    def versions(self) -> pa.Array:
        return self.listing.versions.take(from_numpy(self.ids))

    @property
    def sizes(self) -> np.ndarray:
        return self.listing.sizes[self.ids]

    @property
    def offsets(self) -> np.ndarray | None:
        return None if self.listing.offsets is None else self.listing.offsets[self.ids]

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def first_url(self) -> str:
        return str(self.listing.urls[int(self.ids[0])].as_py())


# Members whose digest lines are built at once by pack_digests (bounds its transient memory).
_DIGEST_WINDOW = 65536


def pack_digests(urls: pa.Array, versions: pa.Array, sizes: np.ndarray, starts: np.ndarray,
                 stops: np.ndarray, order: np.ndarray | None = None) -> list[str]:
    """The :meth:`PackMembers.digest` of many packs of one listing, without a Python row per member.

    Each digest hashes ``f"{url}\\x00{version}\\x00{size}\\n"`` of every member in order; the
    lines are built by Arrow a window of members at a time and each pack hashes its slice.

    Args:
        urls, versions: Arrow string arrays (objects,) of the listing.
        sizes: int64 (objects,): sizes in bytes.
        starts, stops: int64 (packs,): each pack's member range, increasing and disjoint.
        order: int64 (objects,): packs are ranges of ``order`` (rows of the listing) rather than of
            the listing itself; gathered a window at a time.

    Returns:
        ``pack-<hex>`` per pack, in order.
    """
    import pyarrow.compute as pc  # here: a process that only maps a manifest never loads it (~9 MB)

    digests: list[str] = []
    begin = 0
    while begin < len(starts):
        lo = int(starts[begin])
        end = max(begin + 1, int(np.searchsorted(stops, lo + _DIGEST_WINDOW, side="right")))
        hi = int(stops[end - 1])
        if order is None:
            window_urls, window_versions = urls.slice(lo, hi - lo), versions.slice(lo, hi - lo)
            window_sizes = sizes[lo:hi]
        else:
            rows = order[lo:hi]
            window_urls, window_versions = urls.take(from_numpy(rows)), versions.take(from_numpy(rows))
            window_sizes = sizes[rows]
        lines = pc.binary_join_element_wise(
            window_urls.cast(pa.large_string()), window_versions.cast(pa.large_string()),
            int64_array(window_sizes).cast(pa.large_string()), string_scalar("\x00"))
        lines = pc.binary_join_element_wise(lines, string_scalar(""), string_scalar("\n"))
        offsets = np.frombuffer(lines.buffers()[1], np.int64)[lines.offset:lines.offset + len(lines) + 1]
        data = memoryview(lines.buffers()[2])
        for first, stop in zip((starts[begin:end] - lo).tolist(), (stops[begin:end] - lo).tolist(), strict=True):
            digests.append(f"pack-{xxhash.xxh3_128_hexdigest(data[offsets[first]:offsets[stop]])}")
        # Dropped before the next window's are built. (Giving the pool's pages back after each
        # window would save ~15 MB of the build's peak at 1.28 M keys but cost ~17 ms of page
        # faults per window, +0.35 s of CPU; the manifest build releases them once at its end.)
        del lines, data, offsets, window_urls, window_versions
        begin = end
    return digests


def cut_runs(sizes: np.ndarray, threshold_bytes: int, target_bytes: int) -> np.ndarray:
    """Cut a listing into runs: each run is one block (one object, or a pack of small neighbours).

    A pack takes consecutive objects smaller than ``threshold_bytes`` until adding the next
    would pass ``target_bytes``; a larger object closes it and stays a block of its own. Each
    pack's end is found by a binary search in the cumulative sizes (one step per pack, not
    per object).

    Args:
        sizes: int64 (objects,): the kept objects' sizes in bytes, in listing order.
        threshold_bytes: Objects of at least this size are never packed.
        target_bytes: About how large a pack grows; 0 disables packing.

    Returns:
        int64 (runs + 1,): run ``r`` is objects ``bounds[r]:bounds[r + 1]``.
    """
    count = len(sizes)
    if count == 0:
        return np.zeros(1, np.int64)
    packable = (sizes < threshold_bytes) if target_bytes > 0 else np.zeros(count, bool)
    # Segments of consecutive packable objects: [seg_start, seg_stop)
    edges = np.flatnonzero(np.diff(np.concatenate(([False], packable, [False])).astype(np.int8)))
    seg_starts, seg_stops = edges[0::2], edges[1::2]
    bounds = [np.flatnonzero(~packable)]  # every unpackable object starts a run of its own
    filled = np.zeros(count + 1, np.int64)
    np.cumsum(sizes, out=filled[1:])
    for seg_start, seg_stop in zip(seg_starts.tolist(), seg_stops.tolist(), strict=True):
        cuts = []
        start = seg_start
        while start < seg_stop:
            cuts.append(start)
            # the longest run whose bytes stay within the target; at least one object
            stop = int(np.searchsorted(filled, filled[start] + target_bytes, side="right")) - 1
            start = min(seg_stop, max(stop, start + 1))
        bounds.append(np.array(cuts, np.int64))
    return np.concatenate([np.unique(np.concatenate(bounds)).astype(np.int64), [count]])


# The mixing order is part of a manifest's identity through manifest.pack_order; this seed
# never changes, so the same listing always gives the same packs.
MIX_SEED = 0x9AC5


def mixing_order(sizes: np.ndarray, threshold_bytes: int) -> np.ndarray:
    """The order a listing is cut into packs in when ``manifest.pack_order`` is ``mixed``: the
    packable objects (smaller than ``threshold_bytes``) in a fixed pseudo-random order, then the
    others in listing order.

    Why: a listing is sorted by name, so neighbours share a class folder. Packs of neighbours
    would each hold one class, and block-aware shuffle, which mixes the samples of
    ``window_blocks`` packs, would feed batches of a handful of classes (the demo's digits:
    57% held-out accuracy after epoch 1 instead of 96%). Mixed packs hold many classes each, at
    no cost in requests: a pack's members are separate objects, fetched concurrently either way.

    Args:
        sizes: int64 (objects,): object sizes in bytes, in listing order.
        threshold_bytes: Objects of at least this size are never packed.

    Returns:
        int64 (objects,): a permutation of ``range(len(sizes))``.
    """
    small = np.flatnonzero(sizes < threshold_bytes)
    large = np.flatnonzero(sizes >= threshold_bytes)
    shuffled = small[np.random.default_rng(MIX_SEED).permutation(len(small))]
    return np.concatenate([shuffled, large]).astype(np.int64)


def group_objects(objects: Sequence[ObjectInfo], threshold_bytes: int, target_bytes: int) -> list[range]:
    """:func:`cut_runs` of a listing given as objects.

    Returns:
        Index ranges into ``objects`` covering it in order, one per block.
    """
    sizes = np.fromiter((obj.size for obj in objects), np.int64, len(objects))
    bounds = cut_runs(sizes, threshold_bytes, target_bytes).tolist()
    return [range(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
