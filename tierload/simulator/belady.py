"""Belady's MIN: the most hits any cache of a given capacity can get on a trace (the ceiling).

On every miss, MIN evicts the resident whose next use is furthest in the future, and does
not admit ("bypasses") a block needed no sooner than every resident it would replace (L. A.
Belady, "A study of replacement algorithms for a virtual-storage computer", IBM Systems
Journal 5(2), 1966; optimal with bypass for equal-size blocks). Written independently of
:class:`tierload.policies.clairvoyant.ClairvoyantPolicy` so that the simulator's check
"clairvoyant reaches MIN" compares two implementations, not one with itself.

With blocks of different sizes the optimum is NP-hard to compute (Chrobak et al., "Caching
Is Hard -- Even in the Fault Model", Algorithmica 63, 2012); the same rule, evicting the
furthest-needed residents until the newcomer fits, is then a reference, not a bound:
:func:`min_hits` says which one it computed.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tierload.data.runs import NEVER
from tierload.simulator.oracle import next_use
from tierload.simulator.trace import PROGRESS_EVERY, Progress


@dataclass(frozen=True)
class MinResult:
    """Belady's MIN on a trace.

    Attributes:
        hits: Accesses served by the cache.
        accesses: Accesses in the trace.
        exact: True when every block has the same size, so ``hits`` is the optimum.
        cpu_seconds: CPU time of the computation.
    """

    hits: int
    accesses: int
    exact: bool
    cpu_seconds: float = 0.0

    @property
    def hit_ratio(self) -> float:
        return self.hits / self.accesses if self.accesses else 0.0


def _accesses(blocks: np.ndarray, nexts: np.ndarray, tick: Callable[[int], None] | None):
    """``(block, next use)`` pairs as Python ints, one chunk of lists at a time (bounded memory)."""
    for done in range(0, len(blocks), PROGRESS_EVERY):
        if tick is not None:
            tick(done)
        yield from zip(blocks[done:done + PROGRESS_EVERY].tolist(), nexts[done:done + PROGRESS_EVERY].tolist(),
                       strict=True)


def _min_hits_one_tier(blocks: np.ndarray, nexts: np.ndarray, sizes: list[int], capacity_bytes: int,  # noqa: C901
                       tick: Callable[[int], None] | None, flags: np.ndarray | None = None) -> int:
    """MIN hits of one cache; ``nexts[i]`` is the position of the next use of ``blocks[i]``.
    If ``flags`` is given, ``flags[i]`` is set for every access ``i`` that hits."""
    # C901: one loop over every access, written out: a helper call per access or miss would
    # cost a measurable share of the replay.
    live: dict[int, int] = {}  # resident block -> position of its next use
    heap: list[tuple[int, int]] = []  # (-next use, block); entries go stale when a block moves on
    used = hits = 0
    for position, (block, upcoming) in enumerate(_accesses(blocks, nexts, tick)):
        if block in live:
            hits += 1
            if flags is not None:
                flags[position] = True
            live[block] = upcoming
            heapq.heappush(heap, (-upcoming, block))
            continue
        if upcoming == NEVER:
            continue  # never needed again: bypass
        size = sizes[block]
        if size > capacity_bytes:
            continue
        popped: list[tuple[int, int]] = []
        freed = 0
        while used - freed + size > capacity_bytes:
            entry = heapq.heappop(heap)
            if live.get(entry[1]) != -entry[0]:
                continue  # stale
            if -entry[0] <= upcoming:
                heapq.heappush(heap, entry)
                break  # every resident is needed sooner than the newcomer: bypass
            popped.append(entry)
            freed += sizes[entry[1]]
        if used - freed + size > capacity_bytes:
            for entry in popped:
                heapq.heappush(heap, entry)
            continue
        for _, victim in popped:
            del live[victim]
        used += size - freed
        live[block] = upcoming
        heapq.heappush(heap, (-upcoming, block))
        if len(heap) > 2 * len(live) + 1024:
            heap = [(-position, b) for b, position in live.items()]
            heapq.heapify(heap)
    if tick is not None:
        tick(len(blocks))
    return hits


def min_hits(block: np.ndarray, block_bytes: np.ndarray, capacity_bytes: int, node: np.ndarray | None = None,
             progress: Progress | None = None, *, engine: str = "fast") -> MinResult:
    """Belady's MIN hits on a trace, with one cache of ``capacity_bytes`` per node.

    Args:
        block: int array (accesses,): block index of each access.
        block_bytes: int array (blocks,): size of each block in bytes.
        capacity_bytes: Capacity of each node's cache.
        node: int array (accesses,): node of each access (None: one node).
        progress: Called now and then with the accesses done and the trace's length.
        engine: ``"fast"`` (compiled, :mod:`tierload.simulator.fast`) or ``"reference"``
            (this module's Python heap); the same hits.

    Returns:
        The hits, exact when all blocks touched have the same size.
    """
    started = time.process_time()
    if engine == "fast":
        from tierload.simulator.fast.belady import min_hits_fast

        if progress is not None:
            progress(0, len(block))
        hits = min_hits_fast(block, block_bytes, capacity_bytes, node)
        if progress is not None:
            progress(len(block), len(block))
        return MinResult(hits, len(block), min_is_exact(block, block_bytes), time.process_time() - started)
    block = np.asarray(block, dtype=np.int64)
    nexts = next_use(block, node)
    sizes = np.asarray(block_bytes, dtype=np.int64).tolist()
    exact = min_is_exact(block, block_bytes)
    hits, done = 0, 0
    for positions in _node_groups(block, node):
        tick = None if progress is None else (lambda count, base=done: progress(base + count, len(block)))
        hits += _min_hits_one_tier(block[positions], nexts[positions], sizes, capacity_bytes, tick)
        done += len(positions)
    return MinResult(hits, len(block), exact, time.process_time() - started)


def min_is_exact(block: np.ndarray, block_bytes: np.ndarray) -> bool:
    """Whether every block the trace touches has the same size (MIN is then the optimum)."""
    sizes = np.asarray(block_bytes)
    if not len(block) or not len(sizes):
        return True
    touched = np.zeros(len(sizes), dtype=bool)
    touched[block] = True  # a mask, not np.unique: no sort of the whole trace
    return bool((sizes[touched] == sizes[touched][0]).all())


def _node_groups(block: np.ndarray, node: np.ndarray | None) -> list[np.ndarray]:
    """Positions of each node's accesses, in trace order."""
    if node is None:
        return [np.arange(len(block))]
    by_node = np.argsort(node, kind="stable")
    return np.split(by_node, np.flatnonzero(np.diff(np.asarray(node)[by_node])) + 1)


def min_hit_flags(block: np.ndarray, block_bytes: np.ndarray, capacity_bytes: int,
                  node: np.ndarray | None = None, *, engine: str = "fast") -> np.ndarray:
    """bool (accesses,): whether each access hits under Belady's MIN (as :func:`min_hits` counts).

    For hit ratios over parts of a trace, e.g. per epoch. ``engine`` as :func:`min_hits`'s.
    """
    if engine == "fast":
        from tierload.simulator.fast.belady import min_hits_fast

        marks = np.zeros(len(block), dtype=bool)
        min_hits_fast(block, block_bytes, capacity_bytes, node, marks)
        return marks
    block = np.asarray(block, dtype=np.int64)
    nexts = next_use(block, node)
    sizes = np.asarray(block_bytes, dtype=np.int64).tolist()
    flags = np.zeros(len(block), dtype=bool)
    for positions in _node_groups(block, node):
        part = np.zeros(len(positions), dtype=bool)
        _min_hits_one_tier(block[positions], nexts[positions], sizes, capacity_bytes, None, part)
        flags[positions] = part
    return flags
