"""Least-recently-used eviction; admits every block."""

from __future__ import annotations

from collections import OrderedDict

from tierload.policies.base import Key, Policy, take_until


class LRUPolicy(Policy):
    """Evicts the resident read longest ago. Thrashes under uniform random access to a dataset
    larger than the tier (Mohan et al., VLDB 2021); kept as the familiar baseline."""

    name = "lru"

    def __init__(self) -> None:
        self._order: OrderedDict[Key, None] = OrderedDict()

    def on_access(self, key: Key, now: float) -> None:
        if key in self._order:
            self._order.move_to_end(key)

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._order[key] = None
        self._order.move_to_end(key)

    def on_remove(self, key: Key) -> None:
        self._order.pop(key, None)

    def victims(self, key, size, need_bytes, resident, is_pinned, now):
        return take_until(iter(self._order), need_bytes, resident, is_pinned)
