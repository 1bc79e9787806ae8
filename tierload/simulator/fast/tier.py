"""One tier's state for the compiled replay: residency, capacity and its policy's bookkeeping.

A tier has one *slot* per copy: the hot tier one per node, the warm tier one. Per-block
arrays are indexed ``slot * nblocks + block``. What :class:`tierload.policies.tierindex.TierIndex`
does with no pins (the simulator has none): refuse blocks larger than the tier or read too
rarely, ask the policy for victims, remove them, admit.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tierload.simulator.fast import bitset, clairvoyant, heap, lfu, lru
from tierload.simulator.fast import counter as decay
from tierload.simulator.fast.jit import inlined

KEEP, LRU, LFU, LFU_SIZE, CLAIRVOYANT = 0, 1, 2, 3, 4
POLICY_CODES = {"keep": KEEP, "lru": LRU, "lfu": LFU, "lfu-size": LFU_SIZE, "clairvoyant": CLAIRVOYANT}
HEAP_POLICIES = (LFU, LFU_SIZE, CLAIRVOYANT)
LIVE_POLICIES = (LFU, LFU_SIZE)  # heaps with stale entries, told apart by ``live``


class Tier(NamedTuple):
    """Arrays of one tier (numba takes the tuple as one argument).

    Attributes:
        policy: One of the policy codes above.
        counts: Whether accesses are counted (the policy reads counts, or admission does).
        admit_min: ``admit_min_count`` (0.0: no threshold).
        half_life: Decay half-life, in the clock's unit.
        get_cost: ``get_cost_bytes`` (lfu-size).
        capacity: Bytes per slot.
        nblocks: Blocks in the trace.
        used: int64 (slots,): bytes resident per slot.
        order: int64 (slots,): the LFU tie counter, or clairvoyant's admission counter.
        head, tail: int64 (slots,): ends of each LRU list (-1: empty).
        resident: int8 (slots * nblocks,): 1 where the block is in the slot.
        live: int64: identity of the block's live LFU heap entry (-1: none).
        aux: int64: clairvoyant's admission order of each resident.
        counts_state: float64 (slots * nblocks, 3): the decayed counter, a row per block (see
            :mod:`.counter`; one row, one cache line).
        prev, nxt: int64: LRU list links (-1: none).
        victims: int64: the victims of the latest admission.
        stash_prim, stash_tie, stash_ident, stash_key: heap entries popped during a victim search.
        heaps: The policy's heaps (:class:`tierload.simulator.fast.heap.Heaps`); clairvoyant's
            hold only residents never needed again.
        marks: Clairvoyant's residents needed again, by next use
            (:class:`tierload.simulator.fast.bitset.Bitsets` over trace positions).
    """

    policy: int
    counts: bool
    admit_min: float
    half_life: float
    get_cost: int
    capacity: int
    nblocks: int
    used: np.ndarray
    order: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    resident: np.ndarray
    live: np.ndarray
    aux: np.ndarray
    counts_state: np.ndarray
    prev: np.ndarray
    nxt: np.ndarray
    victims: np.ndarray
    stash_prim: np.ndarray
    stash_tie: np.ndarray
    stash_ident: np.ndarray
    stash_key: np.ndarray
    heaps: heap.Heaps
    marks: bitset.Bitsets


def _most_residents(capacity_bytes: int, sizes: np.ndarray) -> int:
    """An upper bound of the blocks one slot can hold."""
    smallest = int(sizes.min()) if len(sizes) else 1
    if smallest <= 0:
        return len(sizes)
    return int(min(len(sizes), capacity_bytes // smallest))


def new_tier(policy: str, slots: int, capacity_bytes: int, sizes: np.ndarray, *, counts: bool,
             admit_min_count: float, half_life: float, get_cost_bytes: int, positions: int = 0) -> Tier:
    """An empty tier of ``slots`` slots over blocks of ``sizes`` (int64, bytes).

    ``positions``: the trace's length (clairvoyant files residents by trace position;
    its bitsets take ``slots * positions / 8`` bytes).

    Arrays a policy does not use have one element, so every tier has the same numba type.
    """
    code = POLICY_CODES[policy]
    blocks = len(sizes)
    cells = slots * blocks

    def per_block(dtype, fill, needed: bool) -> np.ndarray:
        return np.full(cells if needed else 1, fill, dtype=dtype)

    most = _most_residents(capacity_bytes, sizes)
    # Clairvoyant's heap holds live entries only; an LFU heap also stale ones until compacted.
    heap_cap = (most + most // 2 + 64 if code in LIVE_POLICIES else most + 64) if code in HEAP_POLICIES else 0
    scratch = most + 2
    return Tier(code, counts, float(admit_min_count), float(half_life), int(get_cost_bytes), int(capacity_bytes),
                blocks, np.zeros(slots, np.int64), np.zeros(slots, np.int64),
                np.full(slots, -1, np.int64), np.full(slots, -1, np.int64), np.zeros(cells, np.int8),
                per_block(np.int64, -1, code in LIVE_POLICIES), per_block(np.int64, 0, code == CLAIRVOYANT),
                np.zeros((cells if counts else 1, 3), np.float64), per_block(np.int64, -1, code == LRU),
                per_block(np.int64, -1, code == LRU), np.zeros(scratch, np.int64), np.zeros(scratch, np.float64),
                np.zeros(scratch, np.int64), np.zeros(scratch, np.int64), np.zeros(scratch, np.int64),
                heap.new_heaps(slots, heap_cap), bitset.new_bitsets(slots if code == CLAIRVOYANT else 1,
                                                                     positions if code == CLAIRVOYANT else 0))


@inlined
def on_access(t, slot, key, here, now, upcoming, never):
    """Count an access (at trace position ``here``) and tell the policy (``TierIndex.record_access``
    as the simulator binds it)."""
    idx = slot * t.nblocks + key
    if t.counts:
        decay.add(t, idx, now)
    if t.resident[idx] == 0:
        return
    if t.policy == LRU:
        lru.unlink(t, slot, idx)
        lru.append(t, slot, idx)
    elif t.policy == CLAIRVOYANT:
        clairvoyant.on_access(t, slot, key, here, upcoming, never)


@inlined
def _remove(t, slot, key, size):
    idx = slot * t.nblocks + key
    t.resident[idx] = 0
    t.used[slot] -= size
    if t.policy == LRU:
        lru.unlink(t, slot, idx)
    elif t.policy == LFU or t.policy == LFU_SIZE:
        t.live[idx] = -1


@inlined
def _insert(t, slot, key, size, upcoming, never):
    idx = slot * t.nblocks + key
    t.resident[idx] = 1
    t.used[slot] += size
    if t.policy == LRU:
        lru.append(t, slot, idx)
    elif t.policy == CLAIRVOYANT:
        order = t.order[slot]
        t.order[slot] = order + 1
        clairvoyant.push(t, slot, key, order, upcoming, never)
    elif t.policy != KEEP:
        lfu.push(t, slot, key, size)


@inlined
def _victims(t, slot, key, size, need, now, upcoming, never, sizes, block):
    if t.policy == LRU:
        return lru.victims(t, slot, need, sizes)
    if t.policy == CLAIRVOYANT:
        return clairvoyant.victims(t, slot, upcoming, need, never, sizes, block)
    if t.policy == KEEP:
        return -1
    return lfu.victims(t, slot, key, size, need, now, sizes)


@inlined
def admit(t, slot, key, now, upcoming, never, sizes, block):
    """Offer ``key`` to the slot (``TierIndex.reserve`` then ``commit``); ``block``: the trace's blocks.

    Returns:
        -1 if refused, else the number of victims (in ``t.victims``), already removed.
    """
    size = sizes[key]
    if size > t.capacity:
        return -1
    if t.admit_min > 0 and t.counts_state[slot * t.nblocks + key, 0] < t.admit_min:
        return -1
    need = t.used[slot] + size - t.capacity
    chosen = 0
    if need > 0:
        chosen = _victims(t, slot, key, size, need, now, upcoming, never, sizes, block)
        if chosen < 0:
            return -1
        for at in range(chosen):
            victim = t.victims[at]
            _remove(t, slot, victim, sizes[victim])
    _insert(t, slot, key, size, upcoming, never)
    return chosen
