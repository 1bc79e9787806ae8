"""Clairvoyant eviction: Belady's MIN over the known future access order.

The training order of a job is a pure function of (seed, epoch, rank, world size, workers),
so the next use of every block is known. MIN evicts the resident whose next use is furthest
in the future and is the optimal offline policy (L. A. Belady, "A study of replacement
algorithms for a virtual-storage computer", IBM Systems Journal 5(2), 1966); with
bypass (a newcomer needed later than every resident is not admitted) it is optimal for
caches that may refuse admission. Clairvoyant prefetching over node-local tiers: Dryden et
al., "Clairvoyant Prefetching for Distributed Machine Learning I/O", SC 2021.

Two ways to ask the future, with the same decisions:

- any :class:`NextUseOracle` (the node cache's, built from every open stream's plan): each
  eviction ranks all unpinned residents, O(residents) per eviction;
- a :class:`PositionalOracle` (one known trace, as the simulator has): a resident's absolute
  next-use position changes only when that block is accessed, so the policy keeps a max-heap
  and an eviction costs O(log residents).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from tierload.policies.base import Key, Policy

NEVER = np.iinfo(np.int64).max


class NextUseOracle(Protocol):
    """Tells how far in the future each key is next needed."""

    def distances(self, keys: Sequence[Key]) -> np.ndarray:
        """int64 array: accesses until the next use of each key (``NEVER`` if not needed again)."""


@runtime_checkable
class PositionalOracle(Protocol):
    """An oracle over one trace that also gives absolute next-use positions.

    ``next_use(key)`` is the trace position of the key's next access (``NEVER`` if none) and
    may change only when ``key`` itself is accessed (the policy re-reads it in
    :meth:`ClairvoyantPolicy.on_access`).
    """

    def distances(self, keys: Sequence[Key]) -> np.ndarray: ...

    def next_use(self, key: Key) -> int: ...


def _no_positions(key: Key) -> int:
    raise TypeError("this oracle gives distances only; the clairvoyant policy uses them without a heap")


class ClairvoyantPolicy(Policy):
    """Evicts residents needed furthest in the future; refuses a newcomer needed sooner than all.

    Among residents needed equally late (only possible when none of them is needed again),
    the one admitted first goes first.

    Args:
        oracle: Source of next-use distances; a :class:`PositionalOracle` enables the heap.
    """

    name = "clairvoyant"

    def __init__(self, oracle: NextUseOracle) -> None:
        self.oracle = oracle
        self._heap_mode = isinstance(oracle, PositionalOracle)
        self._next_use: Callable[[Key], int] = (
            oracle.next_use if isinstance(oracle, PositionalOracle) else _no_positions)
        # Heap mode: entries (-next_use, admission order, key). An entry is never updated in
        # place: an access pushes a new one, and _live maps each resident to its one valid
        # entry (checked by identity, the cheapest test there is).
        self._heap: list[tuple[int, int, Key]] = []
        self._live: dict[Key, tuple[int, int, Key]] = {}
        self._admitted = itertools.count()

    def on_access(self, key: Key, now: float) -> None:
        live = self._live
        entry = live.get(key)
        if entry is not None:  # only residents, and only in heap mode, are in _live
            # _push written out (this runs for every hit): same admission order, so ties
            # still go oldest first.
            entry = (-self._next_use(key), entry[1], key)
            live[key] = entry
            heap = self._heap
            heapq.heappush(heap, entry)
            if len(heap) > 2 * len(live) + 64:
                self._compact()

    def on_insert(self, key: Key, size: int, now: float) -> None:
        if self._heap_mode:
            self._push(key, next(self._admitted))

    def on_remove(self, key: Key) -> None:
        self._live.pop(key, None)

    def _push(self, key: Key, order: int) -> None:
        entry = (-self._next_use(key), order, key)
        self._live[key] = entry
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 2 * len(self._live) + 64:
            self._compact()

    def _compact(self) -> None:
        """Drop stale heap entries (keeps memory bounded by live residents)."""
        self._heap = list(self._live.values())
        heapq.heapify(self._heap)

    def victims(self, key, size, need_bytes, resident, is_pinned, now):
        if self._heap_mode:
            return self._heap_victims(key, need_bytes, resident, is_pinned)
        candidates = [k for k in resident if not is_pinned(k)]
        if not candidates:
            return None
        newcomer = int(self.oracle.distances([key])[0])
        if newcomer == NEVER:
            return None  # never needed again: admitting it could only displace something useful
        distance = self.oracle.distances(candidates)
        order = np.argsort(-distance, kind="stable")
        chosen, freed = [], 0
        for index in order:
            if distance[index] <= newcomer and distance[index] != NEVER:
                break  # every remaining resident is needed no later than the newcomer
            chosen.append(candidates[index])
            freed += resident[candidates[index]]
            if freed >= need_bytes:
                return chosen
        return None

    def _heap_victims(self, key, need_bytes, resident, is_pinned) -> list | None:
        newcomer = self._next_use(key)
        if newcomer == NEVER:
            return None  # never needed again: admitting it could only displace something useful
        heap, live = self._heap, self._live
        while heap and live.get(heap[0][2]) is not heap[0]:
            heapq.heappop(heap)  # stale: the block was accessed again or left the tier
        if heap and not is_pinned(heap[0][2]):
            top = heap[0]
            if -top[0] <= newcomer and top[0] != -NEVER:
                return None  # bypass, decided from the top of the heap without popping it
            if resident[top[2]] >= need_bytes:  # the usual case: one victim frees enough
                heapq.heappop(heap)  # its entry would go stale once the index removes it
                return [top[2]]
        kept, chosen, freed = [], [], 0
        while heap and freed < need_bytes:
            entry = heapq.heappop(heap)
            if live.get(entry[2]) is not entry:
                continue  # stale
            if is_pinned(entry[2]):
                kept.append(entry)
                continue
            if -entry[0] <= newcomer and entry[0] != -NEVER:
                kept.append(entry)
                break  # every remaining resident is needed no later than the newcomer
            chosen.append(entry)
            freed += resident[entry[2]]
        admitted = freed >= need_bytes
        for entry in kept if admitted else kept + chosen:
            heapq.heappush(heap, entry)
        return [entry[2] for entry in chosen] if admitted else None
