"""LFU and size-aware LFU victims over a lazily refreshed heap (:class:`LFUPolicy`, compiled).

The same steps as the Python policy, in the same order, so the tie counter advances alike:
an entry whose rank is out of date is refreshed (with a new tie) when it reaches the top.
"""

from __future__ import annotations

import math

from tierload.simulator.fast import counter, heap
from tierload.simulator.fast.jit import inlined, kernel

LFU_SIZE = 3  # the policy code of lfu-size (see tierload.simulator.fast.tier)


@inlined
def _weight(t, size):
    return (t.get_cost + size) / max(size, 1)


@inlined
def rank(t, idx, size):
    """Heap order of a resident (``LFUPolicy._rank`` / ``SizeAwareLFUPolicy._rank``)."""
    value = counter.score(t, idx)
    if t.policy == LFU_SIZE:
        return value + math.log2(_weight(t, size))
    return value


@inlined
def _value(t, idx, size, now):
    before = counter.count_before(t, idx, now)
    value = before if before > 0 else counter.count(t, idx, now)
    return value * _weight(t, size) if t.policy == LFU_SIZE else value


@inlined
def _newcomer_value(t, idx, size, now):
    before = counter.count_before(t, idx, now)
    value = before if before > 0 else counter.count(t, idx, now) - 1.0
    return value * _weight(t, size) if t.policy == LFU_SIZE else value


@inlined
def push(t, slot, key, size):
    """Add a resident's entry (``LFUPolicy._push``)."""
    h = t.heaps
    offset = slot * t.nblocks
    if h.length[slot] == h.cap[0]:
        heap.compact(h, slot, t.live, offset)
    tie = t.order[slot]
    t.order[slot] = tie + 1
    t.live[offset + key] = tie
    heap.push(h, slot, rank(t, offset + key, size), tie, tie, key)


@inlined
def _top(t, slot, sizes):
    """Whether the slot has a resident; if so its lowest-ranked one is at the heap's root."""
    h = t.heaps
    base, offset = slot * h.cap[0], slot * t.nblocks
    while h.length[slot] > 0:
        key = h.entries[base].key
        if t.live[offset + key] != h.entries[base].ident:
            heap.pop(h, slot)
            continue
        current = rank(t, offset + key, sizes[key])
        if current == h.entries[base].prim:
            return True
        tie = t.order[slot]
        t.order[slot] = tie + 1
        t.live[offset + key] = tie
        h.entries[base].prim, h.entries[base].tie, h.entries[base].ident = current, tie, tie
        heap.sift_down(h, base, 0, h.length[slot])
    return False


@kernel
def _stash(t, at, base):
    h = t.heaps
    t.stash_prim[at], t.stash_tie[at], t.stash_key[at] = h.entries[base].prim, h.entries[base].tie, h.entries[base].key


@kernel
def _unstash(t, slot, first, stop):
    for at in range(first, stop):
        heap.push(t.heaps, slot, t.stash_prim[at], t.stash_tie[at], t.stash_tie[at], t.stash_key[at])


@inlined
def victims(t, slot, key, size, need, now, sizes):
    """``LFUPolicy.victims`` (no pins): the victims' count (in ``t.victims``), or -1 to refuse."""
    h = t.heaps
    base, offset = slot * h.cap[0], slot * t.nblocks
    newcomer = _newcomer_value(t, offset + key, size, now)
    if _top(t, slot, sizes):
        top = h.entries[base].key
        if counter.at_least(_value(t, offset + top, sizes[top], now), newcomer):
            return -1
        if sizes[top] >= need:
            heap.pop(h, slot)
            t.victims[0] = top
            return 1
    # Chosen entries are stashed from 1 on; the one skipped (it ends the search) at 0.
    chosen = freed = 0
    skipped = False
    while freed < need:
        if not _top(t, slot, sizes):
            break
        candidate = h.entries[base].key
        if counter.at_least(_value(t, offset + candidate, sizes[candidate], now), newcomer):
            _stash(t, 0, base)
            heap.pop(h, slot)
            skipped = True
            break
        _stash(t, chosen + 1, base)
        heap.pop(h, slot)
        chosen += 1
        freed += sizes[candidate]
    if skipped:
        _unstash(t, slot, 0, 1)
    if freed < need:
        _unstash(t, slot, 1, chosen + 1)
        return -1
    for at in range(chosen):
        t.victims[at] = t.stash_key[at + 1]
    return chosen
