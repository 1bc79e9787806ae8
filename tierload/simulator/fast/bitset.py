"""Ordered sets of small integers as hierarchical bitsets, one per slot, for the compiled replay.

A set over ``[0, universe)`` is a bit per member (level 0) plus a summary bit per level-0
word (level 1: "this word has a member"), and so on up to one word. Adding or removing a
member touches one word per level and usually stops at level 0 or 1; the highest member
below a bound costs one word per level up and down, with the upper levels (1/64, 1/4096
of the size) staying in cache. Clairvoyant keeps its residents keyed by next use here
instead of in a heap: no sift through ten levels of cache misses per access, no stale entries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, cast

import numpy as np
from numba.cpython.unsafe import numbers

from tierload.simulator.fast.jit import kernel

# LLVM's ctlz / cttz on an int64 (numba intrinsics; typed here as the functions they compile to).
leading_zeros = cast(Callable[[int], int], numbers.leading_zeros)
trailing_zeros = cast(Callable[[int], int], numbers.trailing_zeros)


class Bitsets(NamedTuple):
    """One hierarchical bitset per slot (numba passes a NamedTuple of arrays as one value).

    Attributes:
        words: int64 (slots * per_slot,): every level of every slot; slot ``s`` owns
            ``[s * per_slot, (s + 1) * per_slot)``.
        levels: int64 (depth,): where each level starts within a slot's words (level 0 first).
        per_slot: int64 (1,): words per slot.
    """

    words: np.ndarray
    levels: np.ndarray
    per_slot: np.ndarray


def new_bitsets(slots: int, universe: int) -> Bitsets:
    """Empty sets over ``[0, universe)`` for ``slots`` slots (``universe`` 0: a placeholder)."""
    starts, size, total = [], max(universe, 0) + 1, 0
    while True:
        words = (size >> 6) + 1  # one spare word: a bound equal to the universe stays in range
        starts.append(total)
        total += words
        if words == 1:
            break
        size = words
    return Bitsets(np.zeros(max(slots, 1) * total, np.int64), np.array(starts, np.int64), np.array([total], np.int64))


@kernel
def add(b, slot, member):
    """Add ``member`` to the slot's set."""
    base = slot * b.per_slot[0]
    pos = member
    for level in range(len(b.levels)):
        at = base + b.levels[level] + (pos >> 6)
        old = b.words[at]
        b.words[at] = old | (1 << (pos & 63))
        if old != 0:
            return
        pos >>= 6


@kernel
def discard(b, slot, member):
    """Remove ``member`` from the slot's set (a no-op when absent)."""
    base = slot * b.per_slot[0]
    pos = member
    for level in range(len(b.levels)):
        at = base + b.levels[level] + (pos >> 6)
        word = b.words[at] & ~(1 << (pos & 63))
        b.words[at] = word
        if word != 0:
            return
        pos >>= 6


@kernel
def highest_below(b, slot, bound):
    """The slot's largest member below ``bound`` (at most the universe), or -1."""
    base = slot * b.per_slot[0]
    depth = len(b.levels)
    pos = bound
    level = 0
    while True:
        if level == depth:
            return -1
        word = b.words[base + b.levels[level] + (pos >> 6)] & ((1 << (pos & 63)) - 1)
        if word != 0:
            pos = (pos & ~63) + 63 - leading_zeros(word)
            break
        pos >>= 6
        level += 1
    while level > 0:
        level -= 1
        word = b.words[base + b.levels[level] + pos]
        pos = (pos << 6) + 63 - leading_zeros(word)
    return pos


@kernel
def lowest(b, slot):
    """The slot's smallest member, or -1 (used by tests and checks)."""
    base = slot * b.per_slot[0]
    level = len(b.levels) - 1
    word = b.words[base + b.levels[level]]
    if word == 0:
        return -1
    pos = trailing_zeros(word)
    while level > 0:
        level -= 1
        pos = (pos << 6) + trailing_zeros(b.words[base + b.levels[level] + pos])
    return pos
