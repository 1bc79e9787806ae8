"""Least-frequently-used eviction with aging, and frequency-based admission.

Frequencies come from a :class:`DecayingCounter` shared with the caller (so counts survive a
block's eviction and keep aging). A newcomer is admitted only if it is strictly more
frequent than every victim it would displace (the TinyLFU admission rule, Einziger et al.,
"TinyLFU: A Highly Efficient Cache Admission Policy", ACM ToS 2017); with equal counts
this keeps what it admitted, which is right under uniform random access. Newcomer and
victims are compared by their counts from before the current time, i.e. over completed
epochs (see :meth:`DecayingCounter.count_before` and the note above
:meth:`LFUPolicy._value`); the heap orders residents by their full counts.
"""

from __future__ import annotations

import heapq
import itertools

from tierload.policies.base import Key, Policy
from tierload.policies.frequency import DecayingCounter, at_least


class LFUPolicy(Policy):
    """Evicts the resident with the lowest decayed access count.

    Args:
        counter: The access counter (the caller records accesses into it).
    """

    name = "lfu"

    def __init__(self, counter: DecayingCounter) -> None:
        self.counter = counter
        self._heap: list[tuple[float, int, Key]] = []
        # key -> its one valid heap entry (checked by identity). An access costs no heap work:
        # an entry whose rank is out of date is replaced when it reaches the top (see _top).
        self._live: dict[Key, tuple[float, int, Key]] = {}
        self._tie = itertools.count()
        if type(self)._rank is LFUPolicy._rank:
            # The counter's own method in place of _rank's frame: _top calls it for every
            # resident refreshed, about once per resident access.
            self._rank = counter.score  # type: ignore[method-assign]

    def _rank(self, key: Key) -> float:
        """Heap order of a resident (lowest is evicted first).

        It must not change as time passes and may only grow with accesses (see :meth:`_top`).
        """
        return self.counter.score(key)

    # Both sides are judged by their counts from before the current time (with time in epochs:
    # over completed epochs). Within an epoch, how often a block was read *so far* says where
    # the shuffle put it, not how often it is read: counting it, a block read this epoch beats
    # one not read yet and the tier churns like LRU, and with several jobs on one dataset a
    # block two jobs have reached displaces residents they are about to read. A block with no
    # history before now is judged by its count so far (less the access that brought it).
    def _value(self, key: Key, now: float) -> float:
        """What keeping a resident is worth at ``now`` (compared with :meth:`_newcomer_value`)."""
        before = self.counter.count_before(key, now)
        return before if before > 0 else self.counter.count(key, now)

    def _newcomer_value(self, key: Key, size: int, now: float) -> float:
        """What admitting ``key`` is worth at ``now``."""
        before = self.counter.count_before(key, now)
        return before if before > 0 else self.counter.count(key, now) - 1.0

    def _push(self, key: Key) -> None:
        entry = (self._rank(key), next(self._tie), key)
        self._live[key] = entry
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 4 * len(self._live) + 64:
            self._compact()

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._push(key)

    def on_remove(self, key: Key) -> None:
        self._live.pop(key, None)

    def _top(self, resident) -> tuple | None:
        """The resident with the lowest rank now (its entry at the top of the heap), or None.

        Ranks only grow with accesses, so an entry's rank is a lower bound of its key's: an
        entry found below its key's rank is refreshed in place and sinks, and the first entry
        that is up to date is the true minimum (a lazy increase-key; accesses cost no heap work).
        """
        heap, live = self._heap, self._live
        while heap:
            entry = heap[0]
            key = entry[2]
            if live.get(key) is not entry or key not in resident:
                heapq.heappop(heap)  # the key left the tier
                continue
            rank = self._rank(key)
            if rank == entry[0]:
                return entry
            fresh = (rank, next(self._tie), key)
            live[key] = fresh
            heapq.heapreplace(heap, fresh)
        return None

    def victims(self, key, size, need_bytes, resident, is_pinned, now):
        newcomer = self._newcomer_value(key, size, now)
        heap = self._heap
        # The common cases, decided from the top of the heap: refusal (the tier is full and
        # frequencies are even), or one victim that frees enough.
        top = self._top(resident)
        if top is not None and not is_pinned(top[2]):
            if at_least(self._value(top[2], now), newcomer):
                return None
            if resident[top[2]] >= need_bytes:
                heapq.heappop(heap)  # its entry would go stale once the index removes it
                return [top[2]]
        chosen, skipped, freed = [], [], 0
        while freed < need_bytes:
            entry = self._top(resident)
            if entry is None:
                break
            heapq.heappop(heap)
            candidate = entry[2]
            if is_pinned(candidate):
                skipped.append(entry)
                continue
            if at_least(self._value(candidate, now), newcomer):
                skipped.append(entry)
                break
            chosen.append(entry)
            freed += resident[candidate]
        for entry in skipped:
            heapq.heappush(heap, entry)
        if freed < need_bytes:
            for entry in chosen:
                heapq.heappush(heap, entry)
            return None
        return [candidate for _, _, candidate in chosen]

    def _compact(self) -> None:
        """Drop stale heap entries (keeps memory bounded by live residents)."""
        self._heap = list(self._live.values())
        heapq.heapify(self._heap)
