"""4-ary min-heaps in flat arrays, one per tier slot, for the compiled replay.

An entry is ``(prim, tie, ident, key)``: ordered by ``prim`` then ``tie`` (ties are unique
among an entry's live rivals, as in the Python policies' ``(rank, tie, key)`` tuples, so the
minimum never depends on the heap's layout). ``ident`` says which entry of a key is live,
the identity test the Python policies make with ``is``. Slot ``s`` owns entries
``[s * cap, (s + 1) * cap)``; its length is ``length[s]``. An entry's four fields lie
together (a record, 32 bytes), and a node's four children are adjacent (two cache lines):
half the depth of a binary heap, and a step down touches two lines, not four arrays.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tierload.simulator.fast.jit import kernel

ENTRY = np.dtype([("prim", np.float64), ("tie", np.int64), ("ident", np.int64), ("key", np.int64)])


class Heaps(NamedTuple):
    """The heaps of every slot of one tier (numba passes a NamedTuple of arrays as one value).

    Attributes:
        entries: :data:`ENTRY` (slots * cap,): the heaps' entries.
        length: int64 (slots,): entries in each slot's heap.
        cap: int64 (1,): entries a slot's heap holds.
    """

    entries: np.ndarray
    length: np.ndarray
    cap: np.ndarray


def new_heaps(slots: int, cap: int) -> Heaps:
    """Empty heaps for ``slots`` slots of ``cap`` entries each (``cap`` 0: no heaps at all)."""
    return Heaps(np.empty(max(slots * cap, 1), ENTRY), np.zeros(max(slots, 1), np.int64), np.array([cap], np.int64))


@kernel
def _less(e, i, j):
    return e[i].prim < e[j].prim or (e[i].prim == e[j].prim and e[i].tie < e[j].tie)


@kernel
def _swap(e, i, j):
    prim, tie, ident, key = e[i].prim, e[i].tie, e[i].ident, e[i].key
    e[i].prim, e[i].tie, e[i].ident, e[i].key = e[j].prim, e[j].tie, e[j].ident, e[j].key
    e[j].prim, e[j].tie, e[j].ident, e[j].key = prim, tie, ident, key


@kernel
def _sift_up(e, base, pos):
    while pos > 0:
        parent = (pos - 1) >> 2
        if not _less(e, base + pos, base + parent):
            return
        _swap(e, base + pos, base + parent)
        pos = parent


@kernel
def sift_down(h, base, pos, length):
    """Restore the heap below ``pos`` of the slot starting at ``base``."""
    e = h.entries
    while True:
        first = 4 * pos + 1
        if first >= length:
            return
        child = first
        for other in range(first + 1, min(first + 4, length)):
            if _less(e, base + other, base + child):
                child = other
        if not _less(e, base + child, base + pos):
            return
        _swap(e, base + pos, base + child)
        pos = child


@kernel
def push(h, slot, prim, tie, ident, key):
    """Add an entry; the caller makes room first (:func:`compact`) when the slot is full."""
    base = slot * h.cap[0]
    pos = h.length[slot]
    e = h.entries
    e[base + pos].prim, e[base + pos].tie, e[base + pos].ident, e[base + pos].key = prim, tie, ident, key
    h.length[slot] = pos + 1
    _sift_up(e, base, pos)


@kernel
def pop(h, slot):
    """Remove the minimum (read it with :func:`top` before)."""
    base = slot * h.cap[0]
    last = h.length[slot] - 1
    h.length[slot] = last
    if last > 0:
        _swap(h.entries, base, base + last)
        sift_down(h, base, 0, last)


@kernel
def top(h, slot):
    """The minimum entry of the slot (a record: ``.prim``, ``.tie``, ``.ident``, ``.key``)."""
    return h.entries[slot * h.cap[0]]


@kernel
def replace_top(h, slot, prim, tie, ident):
    """Give the minimum entry a new ``prim``, ``tie`` and ``ident`` (same key) and let it sink."""
    base = slot * h.cap[0]
    e = h.entries
    e[base].prim, e[base].tie, e[base].ident = prim, tie, ident
    sift_down(h, base, 0, h.length[slot])


@kernel
def compact(h, slot, live, offset):
    """Drop entries that are no longer live (``live[offset + key] != ident``) and re-heapify."""
    base = slot * h.cap[0]
    e = h.entries
    kept = 0
    for pos in range(h.length[slot]):
        at = base + pos
        if live[offset + e[at].key] == e[at].ident:
            if kept != pos:
                _swap(e, base + kept, at)
            kept += 1
    h.length[slot] = kept
    for pos in range((kept - 2) // 4, -1, -1):
        sift_down(h, base, pos, kept)
