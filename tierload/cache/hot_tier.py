"""A node's hot tier: its levels (an optional RAM level in /dev/shm above the disk directory),
admission and eviction by policy, demotion a level down or into the warm tier.

Decisions are made under the node cache's lock (the :class:`TierIndex` of each level is the
one place residency changes); a new block's file is written outside it, after its bytes were
reserved, and victims are deleted before the decision returns, so the bytes on disk never
exceed a level's capacity.

The constructor touches no file; :meth:`HotTier.start` creates the levels' directories and
adopts the blocks an earlier run left there.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from typing import Callable, Sequence, cast

import xxhash

from tierload.blockfile import encode_frame, verify_frame
from tierload.config import TierloadConfig, TierPolicyConfig
from tierload.counts import AccessCounts, PinCounts
from tierload.errors import BackendError, IntegrityError
from tierload.policies.clairvoyant import NextUseOracle
from tierload.policies.registry import make_policy
from tierload.stores.local import LocalDirStore
from tierload.tierindex import TierIndex

log = logging.getLogger(__name__)


@dataclass
class Level:
    """One level of the hot tier (RAM or disk)."""

    name: str
    store: LocalDirStore
    index: TierIndex


class HotTier:
    """The levels of one node's hot tier.

    Args:
        config: The node cache's configuration.
        hot_dir: The disk level's directory (``{node}`` already replaced).
        accesses: Where the node counts accesses; every level's policy listens to it, and
            admission thresholds and frequency policies read its decayed counts.
        pins: The node's pin counts (owned by the node cache; pinned blocks are never evicted).
        oracle: Next-use distances for the clairvoyant policy.
        lock: The node cache's lock; every residency change happens under it.
        now: The decay clock.
        offer_warm: ``offer_warm(key, frame)`` proposes an evicted block's frame (as stored
            here, verified) for the warm tier, or None without one.
        in_warm: Whether the warm tier is known to hold a key (then eviction skips the offer).
    """

    def __init__(self, config: TierloadConfig, hot_dir: str, accesses: AccessCounts, pins: PinCounts,
                 oracle: NextUseOracle, lock: threading.RLock | threading.Condition, now: Callable[[], float],
                 offer_warm: Callable[[str, bytes], None] | None = None,
                 in_warm: Callable[[str], bool] = lambda key: False) -> None:
        self.config = config
        self.hot_dir = hot_dir
        self.policy = config.policy.hot  # replace_policy() may change it before start()
        self.accesses = accesses
        self.counter = accesses.counter
        self.pins = pins
        self.oracle = oracle
        self.lock = lock
        self.now = now
        self.offer_warm = offer_warm
        self.in_warm = in_warm
        self.dirty: set[str] = set()    # keys whose residency changed since take_dirty()
        self.levels: list[Level] = []  # made by start()
        self.secret: bytes | None = None  # the deployment's checksum key, set by the owner's start()

    # ------------------------------------------------------------------ set-up
    def start(self) -> None:
        """Create the levels' directories and adopt the blocks an earlier run left there.

        Raises:
            BackendError: A level's directory cannot be created.
        """
        self.levels = self._make_levels(self.config, self.hot_dir)
        self.recover()

    def _make_levels(self, config: TierloadConfig, hot_dir: str) -> list[Level]:
        hot, policy = config.hot, self.policy
        specs = []
        if hot.ram_capacity_bytes > 0:
            shm = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
            ident = xxhash.xxh3_64_hexdigest(os.path.abspath(os.path.expanduser(hot_dir)).encode())
            specs.append(("ram", os.path.join(shm, f"tierload-ram-{ident}"), hot.ram_capacity_bytes))
        specs.append(("disk", hot_dir, hot.capacity_bytes))
        return [Level(name, LocalDirStore(path, tier=f"hot-{name}", shared=hot.shared),
                      TierIndex(f"hot-{name}", capacity, self._policy(policy), self.accesses,
                                policy.admit_min_count, pins=self.pins))
                for name, path, capacity in specs]

    def _policy(self, policy: TierPolicyConfig):
        return make_policy(policy.eviction, counter=self.counter, oracle=self.oracle,
                           get_cost_bytes=policy.get_cost_bytes)

    def recover(self) -> None:
        """Adopt complete blocks left by an earlier run; sweep temporary files and overflow."""
        for level in self.levels:
            for key, size in sorted(level.store.scan().items()):
                if not level.index.add_existing(key, size, 0.0):
                    level.store.delete(key)
            if level.index.resident:
                log.info("hot tier %s: adopted %d blocks (%d bytes) from a previous run", level.name,
                         len(level.index.resident), level.index.used_bytes)

    def replace_policy(self, policy: TierPolicyConfig) -> None:
        """Switch every level to ``policy`` from the next admission on (call under the lock)."""
        self.policy = policy
        for level in self.levels:
            level.index.replace_policy(self._policy(policy), policy.admit_min_count, self.now())

    # ------------------------------------------------------------------ queries
    @property
    def dirs(self) -> list[str]:
        """The levels' directories, fastest first."""
        return [str(level.store.root) for level in self.levels]

    def level_of(self, key: str) -> int | None:
        """Index of the level holding ``key``, or None."""
        for i, level in enumerate(self.levels):
            if key in level.index:
                return i
        return None

    def resident_keys(self) -> list[str]:
        return cast(list[str], [key for level in self.levels for key in level.index.resident])

    def take_dirty(self) -> tuple[list[str], list[str]]:
        """Keys that became resident and keys that left, since the last call (call under the lock)."""
        dirty, self.dirty = self.dirty, set()
        added = [key for key in dirty if self.level_of(key) is not None]
        return added, [key for key in dirty if key not in added]

    def stats(self) -> list[dict]:
        return [level.index.stats() for level in self.levels]

    def read_frame(self, key: str) -> bytes | None:
        """The frame of a resident block as stored, checked against its checksum (a raw
        payload is hashed in place, not decoded); None if absent. A copy that fails is dropped.

        Raises:
            IntegrityError: Never; a corrupt copy is dropped and None returned.
        """
        with self.lock:
            level = self.level_of(key)
            if level is None:
                return None
            store = self.levels[level].store
        try:
            frame = store.read(key)
            verify_frame(key, frame, secret=self.secret)
        except KeyError:
            return None
        except IntegrityError:
            log.warning("hot block %s failed its checksum; dropped", key)
            with self.lock:
                self.drop(key)
            return None
        return frame

    # ------------------------------------------------------------------ changes
    def place(self, key: str, raw: bytes, digest: int) -> int | None:
        """Admit a fetched block into the highest level that takes it; its level, or None."""
        data = encode_frame(key, raw, digest, secret=self.secret)
        with self.lock:
            now = self.now()
            for index, level in enumerate(self.levels):
                admission = level.index.reserve(key, len(data), now)
                if admission.admitted:
                    self._evict(index, admission.victims)
                    break
            else:
                return None
        try:
            level.store.write(key, data)
        except BackendError:
            log.warning("cannot write block %s to hot level %s", key, level.name, exc_info=True)
            with self.lock:
                level.index.abort(key)
            return None
        with self.lock:
            level.index.commit(key, now)
            self.dirty.add(key)
        return index

    def drop(self, key: str) -> int:
        """Remove ``key`` from whichever level holds it (call under the lock); 1 if it was there."""
        level = self.level_of(key)
        if level is None:
            return 0
        self.levels[level].index.remove(key)
        self.levels[level].store.delete(key)
        self.dirty.add(key)
        return 1

    def _evict(self, level_index: int, victims: Sequence[str]) -> None:
        """Delete victims of a level (under the lock), demoting them a level down or to warm."""
        level, offer_warm = self.levels[level_index], self.offer_warm
        for victim in victims:
            lower = level_index + 1 < len(self.levels)
            to_warm = offer_warm is not None and not self.in_warm(victim)
            data = None
            if lower or to_warm:
                try:
                    data = level.store.read(victim)
                except KeyError:
                    data = None
            level.store.delete(victim)
            self.dirty.add(victim)
            if data is None:
                continue
            if lower:
                below = self.levels[level_index + 1]
                admission = below.index.reserve(victim, len(data), self.now())
                if admission.admitted:
                    self._evict(level_index + 1, admission.victims)
                    try:
                        below.store.write(victim, data)
                        below.index.commit(victim, self.now())
                        continue
                    except BackendError:
                        below.index.abort(victim)
            if offer_warm is not None and to_warm:
                try:
                    verify_frame(victim, data, secret=self.secret)  # a corrupt copy must not spread to the shared tier
                except IntegrityError:
                    continue
                offer_warm(victim, data)
