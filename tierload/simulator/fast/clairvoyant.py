"""Clairvoyant (Belady) victims over residents ordered by next use (:class:`ClairvoyantPolicy`, compiled).

The reference orders residents by ``(-next use, admission order)``, a next use of ``NEVER``
first. Next uses are trace positions, unique among a node's residents, so a resident needed
again is kept as the bit of its next use in a hierarchical bitset (:mod:`.bitset`): its key
is the trace's block at that position, and when the access at that position comes, the bit
moves to the access's next use. Residents never needed again go to a heap ordered by
admission order (they are never accessed again, so the heap has no stale entries). Victims:
never-needed residents oldest first, then the furthest next uses, until one is needed no
later than the newcomer.
"""

from __future__ import annotations

from tierload.simulator.fast import bitset, heap
from tierload.simulator.fast.jit import inlined


@inlined
def push(t, slot, key, order, upcoming, never):
    """File a resident under its next use (``ClairvoyantPolicy._push``)."""
    t.aux[slot * t.nblocks + key] = order
    if upcoming == never:
        heap.push(t.heaps, slot, 0.0, order, order, key)
    else:
        bitset.add(t.marks, slot, upcoming)


@inlined
def on_access(t, slot, key, here, upcoming, never):
    """A resident is read at trace position ``here`` (its filed next use): refile it."""
    bitset.discard(t.marks, slot, here)
    push(t, slot, key, t.aux[slot * t.nblocks + key], upcoming, never)


@inlined
def victims(t, slot, upcoming, need, never, sizes, block):
    """``ClairvoyantPolicy._heap_victims`` (no pins): the victims' count, or -1 to refuse.

    ``t.stash_key`` holds the candidates in the reference's order; ``t.stash_tie`` the
    never-needed ones' admission order, ``t.stash_ident`` the others' next use.
    """
    if upcoming == never:
        return -1
    h = t.heaps
    base = slot * h.cap[0]
    chosen = freed = 0
    while freed < need and h.length[slot] > 0:
        key = h.entries[base].key
        t.stash_key[chosen], t.stash_tie[chosen] = key, h.entries[base].tie
        heap.pop(h, slot)
        chosen += 1
        freed += sizes[key]
    never_needed = chosen
    position = len(block)
    while freed < need:
        position = bitset.highest_below(t.marks, slot, position)
        if position < upcoming:  # needed no later than the newcomer (or none left): keep it
            break
        key = block[position]
        t.stash_key[chosen], t.stash_ident[chosen] = key, position
        chosen += 1
        freed += sizes[key]
    if freed < need:
        for at in range(never_needed):
            heap.push(h, slot, 0.0, t.stash_tie[at], t.stash_tie[at], t.stash_key[at])
        return -1
    for at in range(chosen):
        t.victims[at] = t.stash_key[at]
        if at >= never_needed:
            bitset.discard(t.marks, slot, t.stash_ident[at])
    return chosen
