"""Belady's MIN for one cache, compiled: :func:`tierload.simulator.belady._min_hits_one_tier` on arrays.

The same steps: a hit moves the block's next use on; a miss is bypassed when the block is
never needed again, larger than the cache, or needed no sooner than every resident it would
displace; else the residents needed furthest in the future leave until it fits. The heap is
a max-heap of next uses; among residents never needed again the lowest block goes first, as
the reference's ``(-next use, block)`` tuples order them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

NEVER = np.iinfo(np.int64).max


@njit(cache=True, inline="always")
def _before(heap_pos, heap_key, i, j):
    """Entry ``i`` leaves before entry ``j``."""
    return heap_pos[i] > heap_pos[j] or (heap_pos[i] == heap_pos[j] and heap_key[i] < heap_key[j])


@njit(cache=True)
def _sift_down(heap_pos, heap_key, pos, length):
    while True:
        child = 2 * pos + 1
        if child >= length:
            return
        if child + 1 < length and _before(heap_pos, heap_key, child + 1, child):
            child += 1
        if not _before(heap_pos, heap_key, child, pos):
            return
        heap_pos[pos], heap_pos[child] = heap_pos[child], heap_pos[pos]
        heap_key[pos], heap_key[child] = heap_key[child], heap_key[pos]
        pos = child


@njit(cache=True)
def _push(heap_pos, heap_key, length, upcoming, key):
    pos = length
    heap_pos[pos], heap_key[pos] = upcoming, key
    while pos > 0:
        parent = (pos - 1) >> 1
        if not _before(heap_pos, heap_key, pos, parent):
            break
        heap_pos[pos], heap_pos[parent] = heap_pos[parent], heap_pos[pos]
        heap_key[pos], heap_key[parent] = heap_key[parent], heap_key[pos]
        pos = parent
    return length + 1


@njit(cache=True)
def _pop(heap_pos, heap_key, length):
    length -= 1
    heap_pos[0], heap_key[0] = heap_pos[length], heap_key[length]
    _sift_down(heap_pos, heap_key, 0, length)
    return length


@njit(cache=True)
def _compact(live, heap_pos, heap_key, length):
    kept = 0
    for pos in range(length):
        if live[heap_key[pos]] == heap_pos[pos]:
            heap_pos[kept], heap_key[kept] = heap_pos[pos], heap_key[pos]
            kept += 1
    for pos in range(kept // 2 - 1, -1, -1):
        _sift_down(heap_pos, heap_key, pos, kept)
    return kept


@njit(cache=True)
def _make_room(live, heap_pos, heap_key, length, popped, size, upcoming, room, sizes):
    """Pop residents needed later than ``upcoming`` until ``size`` bytes fit in ``room``.

    Returns:
        ``(heap length, victims popped into popped[:count], bytes they free)``.
    """
    count = freed = 0
    while room + freed < size and length > 0:
        key, at = heap_key[0], heap_pos[0]
        if live[key] != at:
            length = _pop(heap_pos, heap_key, length)
            continue  # stale
        if at <= upcoming:
            break  # every resident is needed sooner than the newcomer: bypass
        length = _pop(heap_pos, heap_key, length)
        popped[count] = key
        count += 1
        freed += sizes[key]
    return length, count, freed


@njit(cache=True)
def min_hits_one_tier(positions, block, nexts, sizes, capacity, flags, heap_cap):
    """MIN hits of one cache over the accesses at ``positions``; sets ``flags`` at hits (if non-empty)."""
    live = np.full(len(sizes), -1, np.int64)  # resident block -> its next use; -1: not resident
    heap_pos = np.empty(heap_cap, np.int64)
    heap_key = np.empty(heap_cap, np.int64)
    popped = np.empty(heap_cap, np.int64)
    record = len(flags) > 0
    length = used = hits = 0
    for i in positions:
        key, upcoming = block[i], nexts[i]
        if live[key] >= 0:
            hits += 1
            if record:
                flags[i] = True
        else:
            size = sizes[key]
            if upcoming == NEVER or size > capacity:
                continue
            length, count, freed = _make_room(live, heap_pos, heap_key, length, popped, size, upcoming,
                                              capacity - used, sizes)
            if used - freed + size > capacity:
                for at in range(count):
                    length = _push(heap_pos, heap_key, length, live[popped[at]], popped[at])
                continue
            for at in range(count):
                live[popped[at]] = -1
            used += size - freed
        live[key] = upcoming
        if length == heap_cap:
            length = _compact(live, heap_pos, heap_key, length)
        length = _push(heap_pos, heap_key, length, upcoming, key)
    return hits
