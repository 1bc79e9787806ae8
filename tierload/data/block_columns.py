"""A mapped manifest's blocks as columns: a :class:`~tierload.data.blocks.Block` is made only when asked for.

:func:`tierload.data.manifest.open_manifest` hands the training process (and the node cache) a
:class:`BlockColumns` instead of a list of ``Block`` objects: keys, URLs and versions stay Arrow
string arrays over the mapped file, offsets and lengths numpy views of it, and a pack's members
rows of the one member listing. At 1.28 M blocks a list cost ~300 bytes of Python objects per
block and 6.8 CPU-s to build; the columns cost nothing until a page is read, and forked
DataLoader workers share those pages.

Code that needs a column over every block (sizes, keys, the dataset digest) asks for it through
the functions below, which take any ``Sequence[Block]`` (a planner's list or these columns).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

import numpy as np

from tierload.data.blocks import Block
from tierload.data.member_spans import spans_of_sizes
from tierload.data.string_column import StringColumn

if TYPE_CHECKING:
    from tierload.data.packs import PackMembers

# Blocks made at once when iterating (bounds the transient Python strings of one window).
_ITER_WINDOW = 4096


@dataclass(frozen=True, eq=False)
class MemberColumns:
    """Every pack member of a mapped manifest, as columns: the one listing packs' members are rows of.

    Attributes:
        urls, versions: (members,) each member's source URL and version at listing time.
        sizes: int64 (members,): each member's size in bytes.
        offsets: int64 (members,): each member's first byte in its object (byte-range members),
            or None for whole objects.
    """

    urls: StringColumn
    versions: StringColumn
    sizes: np.ndarray
    offsets: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.sizes)

    @functools.cached_property
    def pack_members(self) -> PackMembers:
        """The same columns as :class:`~tierload.data.packs.PackMembers` (Arrow arrays over the same
        memory, no copy), made once: a pack's members are gathered from it for a cold fetch."""
        # Imported here: packs (and so pyarrow) load only in a process that reads a pack's
        # members (the node cache, a direct read); a training process reads keys and sizes.
        from tierload.data.packs import PackMembers

        return PackMembers(self.urls.to_arrow(), self.versions.to_arrow(), self.sizes, self.offsets)


class BlockColumns(Sequence[Block]):
    """Every block of a manifest, as columns in block-index order (no Python object per block).

    Args:
        keys, urls, versions: (blocks,) each block's tier key, source URL and source version (see
            :class:`~tierload.data.blocks.Block`).
        offsets, lengths: int64 arrays (blocks,): each block's byte range in its object (bytes).
        pack_block: int64 array (packs,), increasing: the block index of each pack.
        pack_first: int64 array (packs + 1,): pack ``p``'s members are ``member_ids[pack_first[p]:
            pack_first[p + 1]]``.
        member_ids: int32 or int64 array (members,): rows of ``listing``, in pack order.
        listing: The member listing the packs' members are rows of.

    Indexing with an int makes one ``Block`` (its ``members`` a
    :class:`~tierload.data.packs.ListedMembers` view);
    a slice makes a list. Nothing is cached: a caller that needs a block often keeps it.

    Raises:
        ValueError: The columns differ in length (at construction).
    """

    def __init__(self, keys: StringColumn, urls: StringColumn, versions: StringColumn, offsets: np.ndarray,
                 lengths: np.ndarray, pack_block: np.ndarray, pack_first: np.ndarray, member_ids: np.ndarray,
                 listing: MemberColumns) -> None:
        if not len(keys) == len(urls) == len(versions) == len(offsets) == len(lengths):
            raise ValueError(f"block columns differ in length: keys={len(keys)}, urls={len(urls)}, "
                             f"versions={len(versions)}, offsets={len(offsets)}, lengths={len(lengths)}")
        if len(pack_first) != len(pack_block) + 1:
            raise ValueError(f"pack_first has {len(pack_first)} entries; {len(pack_block) + 1} expected "
                             "(one per pack, and the end)")
        self.keys, self.urls, self.versions = keys, urls, versions
        self.offsets, self.lengths = offsets, lengths
        self.pack_block, self.pack_first, self.member_ids, self.listing = pack_block, pack_first, member_ids, listing

    def __len__(self) -> int:
        return len(self.lengths)

    @overload
    def __getitem__(self, index: int) -> Block: ...

    @overload
    def __getitem__(self, index: slice) -> list[Block]: ...

    def __getitem__(self, index: int | slice) -> Block | list[Block]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        count = len(self)
        at = int(index)
        if at < 0:
            at += count
        if not 0 <= at < count:
            raise IndexError(f"block index {index} outside 0..{count - 1}")
        return Block(self.keys[at], self.urls[at], self.versions[at], int(self.offsets[at]), int(self.lengths[at]),
                     self.members(at))

    def __iter__(self) -> Iterator[Block]:
        # A window of rows converted at once: as fast as a list's iteration, without holding one.
        for lo in range(0, len(self), _ITER_WINDOW):
            hi = min(lo + _ITER_WINDOW, len(self))
            rows = zip(self.keys.window(lo, hi), self.urls.window(lo, hi), self.versions.window(lo, hi),
                       self.offsets[lo:hi].tolist(), self.lengths[lo:hi].tolist(), strict=True)
            for at, (key, url, version, offset, length) in enumerate(rows, lo):
                yield Block(key, url, version, offset, length, self.members(at))

    def __eq__(self, other: object) -> bool:
        # Equal to any sequence of the same blocks (a planner's list of them, or another mapping).
        if not isinstance(other, (BlockColumns, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # unhashable, as a list

    def key(self, index: int) -> str:
        """The tier key of block ``index`` (no ``Block`` made)."""
        return self.keys[int(index)]

    def members(self, index: int) -> PackMembers | None:
        """Block ``index``'s pack members (a view of the listing's rows), or None for a plain block."""
        pack = int(np.searchsorted(self.pack_block, index))
        if pack == len(self.pack_block) or int(self.pack_block[pack]) != index:
            return None
        lo, hi = int(self.pack_first[pack]), int(self.pack_first[pack + 1])
        from tierload.data.packs import ListedMembers  # see MemberColumns.pack_members

        return ListedMembers(self.listing.pack_members, self.member_ids[lo:hi])


class ColumnSpans:
    """Where each sample lies inside its block, read from a mapped manifest's columns when a
    block is decoded (:class:`~tierload.data.packs.MemberSpans`).

    Nothing is built over every member: at 1.28 M samples an index of every member's byte range
    (:class:`~tierload.data.packs.PackIndex`) is 10 MB that each DataLoader worker of each rank
    would hold for the run; a block's spans are one cumulative sum over its members' sizes (a
    pack holds tens to hundreds), read from pages the workers share.

    Args:
        columns: The manifest's blocks.
    """

    def __init__(self, columns: BlockColumns) -> None:
        self.columns = columns

    def span(self, block_index: int) -> tuple[int, np.ndarray, np.ndarray]:
        """``(first member, starts, ends)`` of block ``block_index`` (int64 byte ranges inside it).

        Raises:
            IndexError: ``block_index`` is outside the manifest's blocks.
        """
        columns = self.columns
        if not 0 <= block_index < len(columns):
            raise IndexError(f"block index {block_index} outside 0..{len(columns) - 1}")
        pack = int(np.searchsorted(columns.pack_block, block_index))
        # the members before this block: one per plain block, and every member of the packs before it
        first = block_index - pack + int(columns.pack_first[pack])
        if pack == len(columns.pack_block) or int(columns.pack_block[pack]) != block_index:
            return first, np.zeros(1, np.int64), np.array([int(columns.lengths[block_index])], np.int64)
        lo, hi = int(columns.pack_first[pack]), int(columns.pack_first[pack + 1])
        starts, ends = spans_of_sizes(columns.listing.sizes[columns.member_ids[lo:hi]])
        return first, starts, ends


def block_lengths(blocks: Sequence[Block]) -> np.ndarray:
    """int64 (blocks,): each block's length in bytes (a view for :class:`BlockColumns`)."""
    if isinstance(blocks, BlockColumns):
        return blocks.lengths
    return np.fromiter((block.length for block in blocks), np.int64, len(blocks))


def block_key_at(blocks: Sequence[Block], index: int) -> str:
    """The tier key of ``blocks[index]``, without making a ``Block`` when they are columns."""
    if isinstance(blocks, BlockColumns):
        return blocks.key(index)
    return blocks[index].key


def block_url_at(blocks: Sequence[Block], index: int) -> str:
    """The source URL of ``blocks[index]`` (a pack's: its first member's), without making a
    ``Block`` (nor its members) when they are columns."""
    if isinstance(blocks, BlockColumns):
        return blocks.urls[int(index)]
    return blocks[index].url


def block_keys(blocks: Sequence[Block]) -> list[str]:
    """Every block's tier key, in order (Python strings: for the few callers that need a set)."""
    if isinstance(blocks, BlockColumns):
        return blocks.keys.to_list()
    return [block.key for block in blocks]


def iter_block_keys(blocks: Sequence[Block]) -> Iterator[str]:
    """Every block's tier key, in order, a window at a time (no list of them all held)."""
    if isinstance(blocks, BlockColumns):
        yield from blocks.keys
        return
    for block in blocks:
        yield block.key


def pack_count(blocks: Sequence[Block]) -> int:
    """How many of ``blocks`` are packs."""
    if isinstance(blocks, BlockColumns):
        return len(blocks.pack_block)
    return sum(1 for block in blocks if block.members is not None)


def digest_keys(digest, blocks: Sequence[Block]) -> None:  # noqa: ANN001 - any hashlib-like object
    """Feed every block's key to ``digest`` (``update`` per key, or the key column's bytes at once:
    the same digest, as a streaming hash of the concatenation)."""
    if isinstance(blocks, BlockColumns):
        if len(blocks.keys):
            digest.update(blocks.keys.joined_bytes())
        return
    for block in blocks:
        digest.update(block.key.encode())


class BlocksByKey(Mapping[str, Block]):
    """``blocks`` by tier key, for reads that name a block by key (a direct read while no node cache
    answers). The key index is built at the first lookup, not when the mapping is made: most runs
    never look one up.

    Args:
        blocks: A manifest's blocks (a list or :class:`BlockColumns`).
    """

    def __init__(self, blocks: Sequence[Block]) -> None:
        self.blocks = blocks
        self._index: dict[str, int] | None = None

    def _positions(self) -> dict[str, int]:
        if self._index is None:
            self._index = {key: at for at, key in enumerate(block_keys(self.blocks))}
        return self._index

    def __getitem__(self, key: str) -> Block:
        return self.blocks[self._positions()[key]]

    def __contains__(self, key: object) -> bool:
        return key in self._positions()

    def __iter__(self) -> Iterator[str]:
        return iter(self._positions())

    def __len__(self) -> int:
        return len(self.blocks)
