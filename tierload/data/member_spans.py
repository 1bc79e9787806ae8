"""Where each sample lies inside its block: a decoder cuts a block's samples with these spans.

A pack's raw bytes are its members' bytes end to end, so member ``i`` of a block spans
``sum(sizes[:i]):sum(sizes[:i + 1])``. :class:`PackIndex` holds those spans for every member of
a manifest planned in this process; a mapped manifest reads each block's from its columns when
the block is decoded (:class:`~tierload.data.block_columns.ColumnSpans`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

if TYPE_CHECKING:
    from tierload.data.blocks import Block


# Members whose offsets PackIndex.of_members computes at once (bounds its int64 temporaries).
_INDEX_WINDOW = 65536


class MemberSpans(Protocol):
    """Where each sample lies inside its block (a decoder cuts a block's samples with it)."""

    def span(self, block_index: int) -> tuple[int, np.ndarray, np.ndarray]:
        """``(first member, starts, ends)`` of block ``block_index``'s members: the sample id of
        its first member, and int (members,) arrays of each member's first byte and one past its
        last byte inside the block."""
        ...


def spans_of_sizes(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)``: int64 (members,) byte ranges of members of ``sizes`` bytes laid end to
    end from byte 0 (a pack's raw bytes are its members' bytes concatenated)."""
    ends = np.cumsum(sizes, dtype=np.int64)
    return ends - sizes, ends


@dataclass(frozen=True)
class PackIndex:
    """Where each sample lies inside its block, for layouts with one sample per object, held as
    arrays over every member (a manifest planned in this process; a mapped one computes each
    block's spans from its columns when asked, :class:`~tierload.data.block_columns.ColumnSpans`).

    A plain block holds one member; a pack holds several, in pack order. Samples and members
    are the same sequence (the manifest's sample order, which follows the pack order), so block
    ``b`` holds samples ``first[b]:first[b+1]``.

    Attributes:
        first: int64 (blocks + 1,): index of each block's first member; the last entry is the
            number of members.
        starts: int32 (int64 when a block reaches 2 GiB) (members,): first byte of each member
            inside its block.
        ends: as ``starts``: one past the last byte of each member inside its block.
    """

    first: np.ndarray
    starts: np.ndarray
    ends: np.ndarray

    @classmethod
    def of(cls, blocks: Sequence[Block]) -> "PackIndex":
        """The index of ``blocks`` (each a plain block of one object, or a pack)."""
        counts = np.fromiter((1 if b.members is None else len(b.members) for b in blocks), np.int64, len(blocks))
        first = np.zeros(len(blocks) + 1, dtype=np.int64)
        np.cumsum(counts, out=first[1:])
        sizes = np.empty(int(first[-1]), dtype=np.int64)
        for index, block in enumerate(blocks):
            sizes[first[index]:first[index + 1]] = block.length if block.members is None else block.members.sizes
        return cls.of_members(counts, sizes)

    @classmethod
    def of_members(cls, counts: np.ndarray, sizes: np.ndarray) -> "PackIndex":
        """The index from columns, a window of members at a time (no int64 copy of every member).

        Args:
            counts: int (blocks,): members per block (1 for a plain block).
            sizes: int (members,): each member's bytes, block after block.
        """
        first = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=first[1:])
        total = int(first[-1])
        # Byte offsets inside a block: int32 unless a block reaches 2 GiB (half the index's
        # memory, which every DataLoader worker holds for the run).
        starts, ends = np.empty(total, np.int32), np.empty(total, np.int32)
        block = 0
        while block < len(counts):
            lo = int(first[block])
            stop = max(block + 1, int(np.searchsorted(first, lo + _INDEX_WINDOW, side="right")) - 1)
            stop = min(stop, len(counts))
            hi = int(first[stop])
            window = sizes[lo:hi].astype(np.int64)
            before = np.zeros(len(window) + 1, np.int64)
            np.cumsum(window, out=before[1:])
            # offsets restart at 0 in every block: subtract the bytes of the window's blocks before it
            local = before[:-1] - np.repeat(before[first[block:stop] - lo], counts[block:stop])
            if len(window) and int((local + window).max()) > np.iinfo(np.int32).max:
                return cls._wide(first, counts, sizes)
            starts[lo:hi] = local
            ends[lo:hi] = local + window
            block = stop
        return cls(first, starts, ends)

    @classmethod
    def _wide(cls, first: np.ndarray, counts: np.ndarray, sizes: np.ndarray) -> "PackIndex":
        """int64 offsets, for blocks of 2 GiB and more."""
        wide = np.asarray(sizes, np.int64)
        before = np.zeros(len(wide) + 1, dtype=np.int64)
        np.cumsum(wide, out=before[1:])
        starts = before[:-1] - np.repeat(before[first[:-1]], counts)
        return cls(first, starts, starts + wide)

    def span(self, block_index: int) -> tuple[int, np.ndarray, np.ndarray]:
        """``(first member, starts, ends)`` of one block's members."""
        lo, hi = int(self.first[block_index]), int(self.first[block_index + 1])
        return lo, self.starts[lo:hi], self.ends[lo:hi]

