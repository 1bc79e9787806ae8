"""Clairvoyant eviction: Belady's MIN over the known future access order.

The training order of a job is a pure function of (seed, epoch, rank, world size, workers),
so the next use of every block is known. MIN evicts the resident whose next use is furthest
in the future and is the optimal offline policy (L. A. Belady, "A study of replacement
algorithms for a virtual-storage computer", IBM Systems Journal 5(2), 1966); with
bypass (a newcomer needed later than every resident is not admitted) it is optimal for
caches that may refuse admission. Clairvoyant prefetching over node-local tiers: Dryden et
al., "Clairvoyant Prefetching for Distributed Machine Learning I/O", SC 2021.
"""

from __future__ import annotations

from typing import Protocol, Sequence

import numpy as np

from tierload.policies.base import Key, Policy

NEVER = np.iinfo(np.int64).max


class NextUseOracle(Protocol):
    """Tells how far in the future each key is next needed."""

    def distances(self, keys: Sequence[Key]) -> np.ndarray:
        """int64 array: accesses until the next use of each key (``NEVER`` if not needed again)."""


class ClairvoyantPolicy(Policy):
    """Evicts residents needed furthest in the future; refuses a newcomer needed later than all.

    Args:
        oracle: Source of next-use distances.
    """

    name = "clairvoyant"

    def __init__(self, oracle: NextUseOracle) -> None:
        self.oracle = oracle

    def victims(self, key, size, need_bytes, resident, is_pinned, now):
        candidates = [k for k in resident if not is_pinned(k)]
        if not candidates:
            return None
        distance = self.oracle.distances(candidates)
        newcomer = int(self.oracle.distances([key])[0])
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
