"""Clairvoyant (Belady) victims over a next-use heap (:class:`ClairvoyantPolicy`, compiled).

Entries are ``(-next use, admission order)``; a next use of ``NEVER`` is ``-inf``. A
resident's entry is replaced at each of its accesses, keeping its admission order, so ties
(residents never needed again) still go oldest first.
"""

from __future__ import annotations

import math

from tierload.simulator.fast import heap
from tierload.simulator.fast.jit import kernel


@kernel
def _prim(upcoming, never):
    return -math.inf if upcoming == never else -float(upcoming)


@kernel
def push(t, slot, key, order, upcoming, never):
    """Add or replace a resident's entry (``ClairvoyantPolicy._push``)."""
    h = t.heaps
    offset = slot * t.nblocks
    if h.length[slot] == h.cap[0]:
        heap.compact(h, slot, t.live, offset)
    ident = t.idents[slot]
    t.idents[slot] = ident + 1
    t.live[offset + key] = ident
    t.aux[offset + key] = order
    heap.push(h, slot, _prim(upcoming, never), order, ident, key)


@kernel
def _drop_stale(t, slot, base, offset):
    h = t.heaps
    while h.length[slot] > 0 and t.live[offset + h.entries[base].key] != h.entries[base].ident:
        heap.pop(h, slot)


@kernel
def _bypass(prim, newcomer):
    """The resident is needed no later than the newcomer (and is needed at all)."""
    return -prim <= newcomer and prim != -math.inf


@kernel
def _unstash(t, slot, first, stop):
    for at in range(first, stop):
        heap.push(t.heaps, slot, t.stash_prim[at], t.stash_tie[at], t.stash_ident[at], t.stash_key[at])


@kernel
def victims(t, slot, upcoming, need, never, sizes):
    """``ClairvoyantPolicy._heap_victims`` (no pins): the victims' count, or -1 to refuse."""
    if upcoming == never:
        return -1
    h = t.heaps
    base, offset = slot * h.cap[0], slot * t.nblocks
    newcomer = float(upcoming)
    _drop_stale(t, slot, base, offset)
    if h.length[slot] > 0:
        if _bypass(h.entries[base].prim, newcomer):
            return -1
        if sizes[h.entries[base].key] >= need:
            t.victims[0] = h.entries[base].key
            heap.pop(h, slot)
            return 1
    # Chosen entries are stashed from 1 on; the one kept (it ends the search) at 0.
    chosen = freed = 0
    kept = False
    while h.length[slot] > 0 and freed < need:
        at = 0 if _bypass(h.entries[base].prim, newcomer) else chosen + 1
        stale = t.live[offset + h.entries[base].key] != h.entries[base].ident
        t.stash_prim[at], t.stash_tie[at] = h.entries[base].prim, h.entries[base].tie
        t.stash_ident[at], t.stash_key[at] = h.entries[base].ident, h.entries[base].key
        heap.pop(h, slot)
        if stale:
            continue
        if at == 0:
            kept = True
            break
        chosen += 1
        freed += sizes[t.stash_key[at]]
    admitted = freed >= need
    if kept:
        _unstash(t, slot, 0, 1)
    if not admitted:
        _unstash(t, slot, 1, chosen + 1)
        return -1
    for at in range(chosen):
        t.victims[at] = t.stash_key[at + 1]
    return chosen
