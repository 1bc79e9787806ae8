"""Least-frequently-used eviction with aging, and frequency-based admission.

Frequencies come from a :class:`DecayingCounter` shared with the caller (so counts survive a
block's eviction and keep aging). A newcomer is admitted only if it is strictly more
frequent than every victim it would displace (the TinyLFU admission rule, Einziger et al.,
"TinyLFU: A Highly Efficient Cache Admission Policy", ACM ToS 2017); with equal counts
this keeps what it admitted, which is right under uniform random access. The newcomer is
judged by its count before the access that brought it (see :meth:`LFUPolicy.victims`).
"""

from __future__ import annotations

import heapq
import itertools

from tierload.policies.base import Key, Policy
from tierload.policies.frequency import DecayingCounter


class LFUPolicy(Policy):
    """Evicts the resident with the lowest decayed access count.

    Args:
        counter: The access counter (the caller records accesses into it).
    """

    name = "lfu"

    def __init__(self, counter: DecayingCounter) -> None:
        self.counter = counter
        self._heap: list[tuple[float, int, Key]] = []
        self._score: dict[Key, float] = {}
        self._tie = itertools.count()

    def _push(self, key: Key) -> None:
        score = self.counter.score(key)
        self._score[key] = score
        heapq.heappush(self._heap, (score, next(self._tie), key))
        if len(self._heap) > 4 * len(self._score) + 64:
            self._compact()

    def on_access(self, key: Key, now: float) -> None:
        if key in self._score:
            self._push(key)

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._push(key)

    def on_remove(self, key: Key) -> None:
        self._score.pop(key, None)

    def victims(self, key, size, need_bytes, resident, is_pinned, now):
        # The newcomer's count before the access that brought it here: under uniform random
        # epochs a block read this epoch would otherwise always beat one not read yet, and
        # the tier would churn like LRU.
        newcomer = self.counter.count(key, now) - 1.0
        chosen, skipped, freed = [], [], 0
        while self._heap and freed < need_bytes:
            score, tie, candidate = heapq.heappop(self._heap)
            if self._score.get(candidate) != score or candidate not in resident:
                continue  # stale heap entry
            if is_pinned(candidate):
                skipped.append((score, tie, candidate))
                continue
            if self.counter.count(candidate, now) >= newcomer:
                skipped.append((score, tie, candidate))
                break
            chosen.append((score, tie, candidate))
            freed += resident[candidate]
        for entry in skipped:
            heapq.heappush(self._heap, entry)
        if freed < need_bytes:
            for entry in chosen:
                heapq.heappush(self._heap, entry)
            return None
        return [candidate for _, _, candidate in chosen]

    def _compact(self) -> None:
        """Drop stale heap entries (keeps memory bounded by live residents)."""
        self._heap = [(s, t, k) for s, t, k in self._heap if self._score.get(k) == s]
        heapq.heapify(self._heap)
