"""Least-recently-used order as a doubly linked list over block ids (:class:`LRUPolicy`, compiled)."""

from __future__ import annotations

from tierload.simulator.fast.jit import kernel


@kernel
def unlink(t, slot, idx):
    """Take index ``idx`` out of the slot's list."""
    before, after = t.prev[idx], t.nxt[idx]
    if before >= 0:
        t.nxt[before] = after
    else:
        t.head[slot] = after
    if after >= 0:
        t.prev[after] = before
    else:
        t.tail[slot] = before


@kernel
def append(t, slot, idx):
    """Put index ``idx`` last (most recently used)."""
    last = t.tail[slot]
    t.prev[idx] = last
    t.nxt[idx] = -1
    if last >= 0:
        t.nxt[last] = idx
    else:
        t.head[slot] = idx
    t.tail[slot] = idx


@kernel
def victims(t, slot, need, sizes):
    """Least recently used residents until ``need`` bytes are freed; their count, or -1 to refuse."""
    offset = slot * t.nblocks
    chosen = freed = 0
    idx = t.head[slot]
    while idx >= 0:
        key = idx - offset
        t.victims[chosen] = key
        chosen += 1
        freed += sizes[key]
        if freed >= need:
            return chosen
        idx = t.nxt[idx]
    return -1
