"""The coordinator: one per cluster, owns the warm tier and the cluster-wide access counts.

Node caches report access counts and propose warm writes in batched calls
(:class:`tierload.cache.warm_sync.WarmSync`); the coordinator admits a proposal only if
the block's decayed count passes ``policy.warm.admit_min_count`` and the warm policy finds
room (evicting, and deleting, its victims first), so the warm tier's capacity is never
exceeded. Nodes read warm blocks directly from the shared store.

This is a plain class; :mod:`tierload.cache.runtime` makes it a named Ray actor.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from tierload.config import TierloadConfig, as_config
from tierload.errors import ConfigError
from tierload.policies.frequency import DecayingCounter
from tierload.policies.registry import make_policy
from tierload.stores.registry import open_store
from tierload.tierindex import TierIndex

log = logging.getLogger(__name__)


class Coordinator:
    """Warm-tier admission and eviction, and cluster-wide access frequencies.

    Args:
        config: The effective configuration (dict or :class:`TierloadConfig`).

    Raises:
        ConfigError: The warm tier is disabled (``warm.url: null``); no coordinator is needed then.
    """

    def __init__(self, config: dict | TierloadConfig) -> None:
        self.config = as_config(config)
        if not self.config.warm.url:
            raise ConfigError("the coordinator owns the warm tier, but warm.url is null")
        policy = self.config.policy
        self._lock = threading.RLock()
        self._counter = DecayingCounter(policy.decay.half_life)
        self._store = open_store(self.config.warm.url, "warm")
        self._index = TierIndex("warm", self.config.warm.capacity_bytes,
                                make_policy(policy.warm.eviction, counter=self._counter), self._counter,
                                policy.warm.admit_min_count)
        self._nodes: dict[str, float] = {}
        self._now = 0.0
        self._accesses = 0
        for key, size in sorted(self._store.scan().items()):
            if not self._index.add_existing(key, size, 0.0):
                self._store.delete(key)

    def ready(self) -> bool:
        return True

    def _clock(self, reported: float) -> float:
        if self.config.policy.decay.unit == "second":
            return time.time()
        self._now = max(self._now, reported)
        return self._now

    def sync(self, node_id: str, counts: dict[str, float], now: float, proposals: list[tuple[str, int]],
             drops: list[str]) -> dict[str, list[bool]]:
        """Take a node's batch: access counts, warm-write proposals and corrupt copies.

        Args:
            node_id: The reporting node.
            counts: ``{block key: accesses}`` since the node's last call.
            now: The node's clock in the decay unit.
            proposals: ``(key, stored_size_bytes)`` the node would write into warm.
            drops: Keys whose warm copy the node found corrupt.

        Returns:
            ``{"granted": [...], "present": [...]}``, one bool per proposal: space reserved for
            the node to write it / the block is already in the warm tier.
        """
        with self._lock:
            self._nodes[node_id] = time.time()
            clock = self._clock(now)
            for key, amount in counts.items():
                self._counter.add(key, clock, amount)
                self._index.policy.on_access(key, clock)
                self._accesses += amount
            for key in drops:
                self._drop(key)
            granted, present = [], []
            for key, size in proposals:
                present.append(key in self._index)
                admission = self._index.reserve(key, size, clock)
                for victim in admission.victims:
                    self._store.delete(victim)
                granted.append(admission.admitted)
            return {"granted": granted, "present": present}

    def commit(self, committed: list[str], aborted: list[str]) -> None:
        """Writes that completed (now readable) and writes that failed (space released)."""
        with self._lock:
            for key in committed:
                if key in self._index.reserved:
                    self._index.commit(key, self._now)
            for key in aborted:
                self._index.abort(key)

    def invalidate(self, keys: list[str]) -> int:
        """Delete these blocks from the warm tier; returns how many were there."""
        with self._lock:
            return sum(self._drop(key) for key in keys)

    def _drop(self, key: str) -> int:
        removed = self._index.remove(key)
        self._store.delete(key)
        return int(removed)

    def stats(self) -> dict[str, Any]:
        """Warm-tier usage and the nodes seen."""
        with self._lock:
            return {"warm": self._index.stats(), "nodes": dict(self._nodes), "accesses": self._accesses,
                    "tracked_blocks": len(self._counter), "clock": self._now}
