"""Binary min-heaps in flat arrays, one per tier slot, for the compiled replay.

An entry is ``(prim, tie, ident, key)``: ordered by ``prim`` then ``tie`` (ties are unique
among an entry's live rivals, as in the Python policies' ``(rank, tie, key)`` tuples, so the
minimum never depends on the heap's layout). ``ident`` says which entry of a key is live,
the identity test the Python policies make with ``is``. Slot ``s`` owns positions
``[s * cap, (s + 1) * cap)`` of every array; its length is ``length[s]``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit


class Heaps(NamedTuple):
    """The heaps of every slot of one tier (numba passes a NamedTuple of arrays as one value).

    Attributes:
        prim: float64 (slots * cap,): first sort key.
        tie: int64 (slots * cap,): second sort key.
        ident: int64 (slots * cap,): the entry's identity (compared with the key's live one).
        key: int64 (slots * cap,): the block.
        length: int64 (slots,): entries in each slot's heap.
        cap: int64 (1,): entries a slot's heap holds.
    """

    prim: np.ndarray
    tie: np.ndarray
    ident: np.ndarray
    key: np.ndarray
    length: np.ndarray
    cap: np.ndarray


def new_heaps(slots: int, cap: int) -> Heaps:
    """Empty heaps for ``slots`` slots of ``cap`` entries each (``cap`` 0: no heaps at all)."""
    size = max(slots * cap, 1)
    return Heaps(np.empty(size, np.float64), np.empty(size, np.int64), np.empty(size, np.int64),
                 np.empty(size, np.int64), np.zeros(max(slots, 1), np.int64), np.array([cap], np.int64))


@njit(cache=True, _nrt=False)
def _less(h, i, j):
    return h.prim[i] < h.prim[j] or (h.prim[i] == h.prim[j] and h.tie[i] < h.tie[j])


@njit(cache=True, _nrt=False)
def _swap(h, i, j):
    h.prim[i], h.prim[j] = h.prim[j], h.prim[i]
    h.tie[i], h.tie[j] = h.tie[j], h.tie[i]
    h.ident[i], h.ident[j] = h.ident[j], h.ident[i]
    h.key[i], h.key[j] = h.key[j], h.key[i]


@njit(cache=True, _nrt=False)
def _sift_up(h, base, pos):
    while pos > 0:
        parent = (pos - 1) >> 1
        if not _less(h, base + pos, base + parent):
            return
        _swap(h, base + pos, base + parent)
        pos = parent


@njit(cache=True, _nrt=False)
def sift_down(h, base, pos, length):
    """Restore the heap below ``pos`` of the slot starting at ``base``."""
    while True:
        child = 2 * pos + 1
        if child >= length:
            return
        if child + 1 < length and _less(h, base + child + 1, base + child):
            child += 1
        if not _less(h, base + child, base + pos):
            return
        _swap(h, base + pos, base + child)
        pos = child


@njit(cache=True, _nrt=False)
def push(h, slot, prim, tie, ident, key):
    """Add an entry; the caller makes room first (:func:`compact`) when the slot is full."""
    base = slot * h.cap[0]
    pos = h.length[slot]
    h.prim[base + pos] = prim
    h.tie[base + pos] = tie
    h.ident[base + pos] = ident
    h.key[base + pos] = key
    h.length[slot] = pos + 1
    _sift_up(h, base, pos)


@njit(cache=True, _nrt=False)
def pop(h, slot):
    """Remove the minimum (read it at ``slot * cap`` before)."""
    base = slot * h.cap[0]
    last = h.length[slot] - 1
    h.length[slot] = last
    if last > 0:
        _swap(h, base, base + last)
        sift_down(h, base, 0, last)


@njit(cache=True, _nrt=False)
def compact(h, slot, live, offset):
    """Drop entries that are no longer live (``live[offset + key] != ident``) and re-heapify."""
    base = slot * h.cap[0]
    kept = 0
    for pos in range(h.length[slot]):
        at = base + pos
        if live[offset + h.key[at]] == h.ident[at]:
            if kept != pos:
                _swap(h, base + kept, at)
            kept += 1
    h.length[slot] = kept
    for pos in range(kept // 2 - 1, -1, -1):
        sift_down(h, base, pos, kept)
