"""A registered dataset's blocks found by tier key, without a Python object per block.

The node cache is asked for blocks by key (the hot tier's residents, a consumer's ``ds[i]``, the
clairvoyant policy's next-use lookups). A dict from every key to its ``Block`` cost ~800 bytes per
block and built every ``Block`` from the mapped manifest: at 1,281,167 one-object blocks +991 MB of
the cache's RSS and 6.4 s with the cache's lock held (``benchmarks/results/2026-12-03-catalog-scale``).
:class:`KeyIndex` keeps the 64-bit xxh3 hash of each key, sorted, and the block index of each:
16 bytes per block; a lookup is a binary search and one key comparison.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import xxhash

from tierload.data.block_columns import block_key_at, iter_block_keys
from tierload.data.blocks import Block


def key_hash(key: str) -> int:
    """The 64-bit hash a :class:`KeyIndex` files ``key`` under (xxh3-64 of its UTF-8 bytes)."""
    return xxhash.xxh3_64_intdigest(key.encode("utf-8"))


class KeyIndex:
    """Block indexes of one dataset's blocks by tier key.

    Args:
        blocks: The dataset's blocks (a list, or a mapped manifest's columns); kept, and read
            to tell apart two keys whose hashes collide.

    Attributes:
        blocks: The blocks indexed.
    """

    def __init__(self, blocks: Sequence[Block]) -> None:
        self.blocks = blocks
        hashes = np.fromiter((key_hash(key) for key in iter_block_keys(blocks)), np.uint64, len(blocks))
        order = np.argsort(hashes, kind="stable")  # equal hashes keep block order: the first block first
        self._hashes = hashes[order]
        self._indexes = order.astype(np.int32 if len(blocks) < 2**31 else np.int64)

    def __len__(self) -> int:
        return len(self.blocks)

    def indexes(self, key: str) -> Iterator[int]:
        """Every block index whose key is ``key``, lowest first (none: no such block)."""
        wanted = np.uint64(key_hash(key))
        at = int(np.searchsorted(self._hashes, wanted))
        while at < len(self._hashes) and self._hashes[at] == wanted:
            index = int(self._indexes[at])
            if block_key_at(self.blocks, index) == key:
                yield index
            at += 1

    def positions(self, hashes: np.ndarray) -> np.ndarray:
        """int64 (len(hashes),): the lowest block index whose key hashes to each of ``hashes``
        (uint64, :func:`key_hash`), or -1. Matched by hash alone, not checked against the key:
        two keys share a 64-bit hash with odds of about n / 2**64 per lookup, so use it only where
        a wrong match costs a choice, never bytes (:meth:`find` checks)."""
        found = np.full(len(hashes), -1, np.int64)
        if not len(self._hashes):
            return found
        # the first of equal hashes (the lowest block index); past the end: the last, which differs
        at = np.minimum(np.searchsorted(self._hashes, hashes), len(self._hashes) - 1)
        hit = self._hashes[at] == hashes
        found[hit] = self._indexes[at[hit]]
        return found

    def find(self, key: str) -> int | None:
        """The lowest block index whose key is ``key``, or None."""
        return next(self.indexes(key), None)
