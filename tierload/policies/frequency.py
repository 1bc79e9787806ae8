"""Access counts that age: an access weighs half as much every ``half_life`` units of time.

Time is whatever the caller measures it in (epochs or seconds). The count of a key at time
``t`` is ``sum(2 ** -((t - t_i) / half_life))`` over its accesses at ``t_i``. For ranking,
:meth:`DecayingCounter.score` returns ``log2(count) + t_last / half_life``, which orders
keys the same way at every ``t``, so a heap keyed on it never needs re-sorting as time passes.
"""

from __future__ import annotations

import math


class DecayingCounter:
    """Exponentially decayed access counts per key.

    Args:
        half_life: Time after which an access counts half (> 0, in the caller's unit).
    """

    def __init__(self, half_life: float) -> None:
        if half_life <= 0:
            raise ValueError(f"half_life={half_life}; it must be > 0")
        self.half_life = half_life
        self._state: dict = {}

    def add(self, key, now: float, amount: float = 1.0) -> float:
        """Record ``amount`` accesses of ``key`` at time ``now``; return the new count."""
        value = self.count(key, now) + amount
        self._state[key] = (value, now)
        return value

    def count(self, key, now: float) -> float:
        """Decayed count of ``key`` at time ``now`` (0.0 if never seen)."""
        state = self._state.get(key)
        if state is None:
            return 0.0
        value, then = state
        return value * 2.0 ** (-(now - then) / self.half_life) if now > then else value

    def at_last_access(self, key) -> float:
        """Decayed count of ``key`` as of its latest access (0.0 if never seen).

        Admission thresholds compare this value: "accessed at least N times (decayed)" should
        not start failing a moment after the access just because time moved on.
        """
        state = self._state.get(key)
        return 0.0 if state is None else state[0]

    def score(self, key) -> float:
        """Time-invariant rank of ``key`` (higher = more frequent); ``-inf`` if never seen."""
        state = self._state.get(key)
        if state is None or state[0] <= 0:
            return -math.inf
        value, then = state
        return math.log2(value) + then / self.half_life

    def forget(self, key) -> None:
        self._state.pop(key, None)

    def __len__(self) -> int:
        return len(self._state)

    def items(self):
        """``(key, (count_at_last_update, last_update_time))`` pairs."""
        return self._state.items()
