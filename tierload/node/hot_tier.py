"""A node's hot tier: its levels (an optional RAM level in /dev/shm above the disk directory),
admission and eviction by policy, demotion a level down or into the warm tier.

Decisions are made under the node cache's lock (the :class:`TierIndex` of each level is the
one place residency changes); a new block's file is written outside it, after its bytes were
reserved, and victims are deleted before the decision returns, so the bytes on disk never
exceed a level's capacity.

A level whose directory stops taking writes (read-only, no permission) admits nothing for
``hot.write_retry_s``, serves what it holds, and the next level (or the warm tier, or cold)
takes the rest; a full one (ENOSPC: a tmpfs smaller than the capacity) has its capacity
lowered to what it holds. Either is logged once per level (:mod:`tierload.stores.tier_writes`).

The constructor touches no file; :meth:`HotTier.start` creates the levels' directories and
adopts the blocks an earlier run left there.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence, cast

import xxhash

from tierload.config.models import TierloadConfig, TierPolicyConfig
from tierload.errors import BackendError, IntegrityError
from tierload.frames.blockfile import encode_frame, verify_frame
from tierload.policies.clairvoyant import NextUseOracle
from tierload.policies.counts import AccessCounts, PinCounts
from tierload.policies.registry import make_policy
from tierload.policies.tierindex import TierIndex
from tierload.stores.local import LocalDirStore
from tierload.stores.tier_writes import (
    WriteHealth,
    describe,
    free_bytes,
    is_full,
    warn_if_larger_than_file_system,
    write_refusal,
)
from tierload.wire.stats import LevelStats

log = logging.getLogger(__name__)


@dataclass
class Level:
    """One level of the hot tier (RAM or disk).

    Attributes:
        name: ``"ram"`` or ``"disk"``.
        store: Its directory.
        index: Its residency and capacity (the capacity lowered while its file system is full).
        health: Whether it takes writes.
        capacity_bytes: The configured capacity.
        full_since: ``time.monotonic()`` when its file system was last found full, or None.
    """

    name: str
    store: LocalDirStore
    index: TierIndex
    health: WriteHealth
    capacity_bytes: int
    full_since: float | None = field(default=None)
    # promotions: blocks a fetch placed here; demotions: victims moved a level down or offered
    # to warm; written_bytes: frame bytes written here (both ways in).
    moves: Counter = field(default_factory=Counter)


def ram_level_dir(hot_dir: str) -> str:
    """The RAM level's directory for the disk level at ``hot_dir`` (in ``/dev/shm`` when there is one)."""
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    ident = xxhash.xxh3_64_hexdigest(os.path.abspath(os.path.expanduser(hot_dir)).encode())
    return os.path.join(shm, f"tierload-ram-{ident}")


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
        warm_room_for: Whether an offer of that many frame bytes would be taken now; a victim
            too large for it is not read into memory only to be dropped (a 10 GiB video).
    """

    def __init__(self, config: TierloadConfig, hot_dir: str, accesses: AccessCounts, pins: PinCounts,
                 oracle: NextUseOracle, lock: threading.RLock | threading.Condition, now: Callable[[], float],
                 offer_warm: Callable[[str, bytes], None] | None = None,
                 in_warm: Callable[[str], bool] = lambda key: False,
                 warm_room_for: Callable[[int], bool] = lambda size: True) -> None:
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
        self.warm_room_for = warm_room_for
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
        read_only = []
        for level in self.levels:
            warn_if_larger_than_file_system(f"hot-{level.name}", level.store.root, level.capacity_bytes)
            refusal = write_refusal(level.store.root)
            if refusal is not None:  # e.g. a tier filled by an earlier run, on a mount read-only now
                level.health.refused_at_start(refusal)
                read_only.append((level, refusal))
        self.recover()
        for level, refusal in read_only:
            log.warning("the hot-%s tier directory %s is read-only at start (%s): it serves the %d blocks it holds, "
                        "admits none, and tries one write again every %g s", level.name, level.store.root,
                        describe(refusal), len(level.index.resident), level.health.retry_s)

    def _make_levels(self, config: TierloadConfig, hot_dir: str) -> list[Level]:
        hot, policy = config.hot, self.policy
        specs = []
        if hot.ram_capacity_bytes > 0:
            specs.append(("ram", ram_level_dir(hot_dir), hot.ram_capacity_bytes))
        specs.append(("disk", hot_dir, hot.capacity_bytes))
        return [Level(name, LocalDirStore(path, tier=f"hot-{name}", shared=hot.shared),
                      TierIndex(f"hot-{name}", capacity, self._policy(policy), self.accesses,
                                policy.admit_min_count, pins=self.pins),
                      WriteHealth(f"hot-{name}", hot.write_retry_s), capacity)
                for name, path, capacity in specs]

    def _policy(self, policy: TierPolicyConfig):
        return make_policy(policy.eviction, counter=self.counter, oracle=self.oracle,
                           get_cost_bytes=policy.get_cost_bytes)

    def recover(self) -> None:
        """Adopt complete blocks left by an earlier run; sweep temporary files and overflow."""
        for level in self.levels:
            for key, size in sorted(level.store.scan().items()):
                if not level.index.add_existing(key, size, 0.0):
                    try:
                        level.store.delete(key)
                    except BackendError as exc:
                        level.health.failed(exc)  # the overflow stays on disk, outside the index
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

    def stats(self) -> list[LevelStats]:
        """Per level, fastest first: the index's usage, its directory's health, and the blocks moved."""
        return [LevelStats(**level.index.stats(), **level.health.stats(), promotions=level.moves["promotions"],
                           demotions=level.moves["demotions"], written_bytes=level.moves["written_bytes"])
                for level in self.levels]

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
        """Admit a fetched block into the highest level that takes it; its level, or None.

        A level that refuses the write (read-only, full) is passed over for the next one.
        """
        data = encode_frame(key, raw, digest, secret=self.secret)
        for index, level in enumerate(self.levels):
            with self.lock:
                if not self._reserve(index, key, len(data)):
                    continue
                now = self.now()
            try:
                level.store.write(key, data)
            except BackendError as exc:
                with self.lock:
                    level.index.abort(key)
                    self._refused(level, exc)
                continue
            with self.lock:
                level.index.commit(key, now)
                level.health.succeeded()
                level.moves.update(promotions=1, written_bytes=len(data))
                self.dirty.add(key)
            return index
        return None

    def reserve_file(self, key: str, frame_size: int) -> tuple[int, Path] | None:
        """Reserve room for a frame that will be written in pieces, in the highest level that takes it.

        For a block streamed from the cold tier (:mod:`tierload.node.streamed_fetch`): the
        caller writes the frame to the returned temporary path, then calls
        :meth:`install_file`, or :meth:`abort_file` if it cannot finish.

        Args:
            key: The block key.
            frame_size: The whole frame's size in bytes (header included).

        Returns:
            ``(level index, temporary path)``, or None if no level takes the block.
        """
        for index, level in enumerate(self.levels):
            with self.lock:
                if self._reserve(index, key, frame_size):
                    return index, level.store.temp_path(key)
        return None

    def install_file(self, index: int, key: str, temp: Path, frame_size: int) -> bool:
        """Rename a complete frame written at ``temp`` into level ``index`` and commit its reservation.

        Returns:
            False if the level refused the rename (the reservation is aborted, the file removed).
        """
        level = self.levels[index]
        try:
            level.store.install(key, temp)
        except BackendError as exc:
            self.abort_file(index, key, temp, exc)
            return False
        with self.lock:
            level.index.commit(key, self.now())
            level.health.succeeded()
            level.moves.update(promotions=1, written_bytes=frame_size)
            self.dirty.add(key)
        return True

    def abort_file(self, index: int, key: str, temp: Path, refusal: BackendError | None = None) -> None:
        """Give up a frame being written at ``temp``: the file goes, the reservation is released.

        Args:
            refusal: The level's own refusal of the write (full, read-only), or None when the
                write stopped for another reason (the cold read failed).
        """
        level = self.levels[index]
        level.store.discard_temp(temp)
        with self.lock:
            level.index.abort(key)
            if refusal is not None:
                self._refused(level, refusal)

    def drop(self, key: str) -> int:
        """Remove ``key`` from whichever level holds it (call under the lock); 1 if it was there.

        A file that cannot be deleted (a read-only level) leaves the index all the same: a
        dropped copy is corrupt or stale and must not be handed out again.
        """
        level = self.level_of(key)
        if level is None:
            return 0
        self.levels[level].index.remove(key)
        try:
            self.levels[level].store.delete(key)
        except BackendError as exc:
            self.levels[level].health.failed(exc)
        self.dirty.add(key)
        return 1

    def _reserve(self, level_index: int, key: str, size: int) -> bool:
        """Reserve room for ``key`` in a level that takes writes, victims deleted (under the lock)."""
        level = self.levels[level_index]
        if not level.health.admitting():
            return False
        self._refit(level)
        admission = level.index.reserve(key, size, self.now())
        if not admission.admitted:
            return False
        if not self._evict(level_index, admission.victims):
            level.index.abort(key)
            return False
        level.health.trying()
        return True

    def _refused(self, level: Level, exc: BackendError) -> None:
        """A write to ``level`` failed (under the lock): a full file system lowers its capacity
        to what it holds; any other refusal pauses it."""
        if not is_full(exc):
            level.health.failed(exc)
            return
        if level.full_since is None:
            log.warning("hot level %s is full at %d bytes, below its capacity of %d bytes (%s); its capacity is "
                        "lowered to what it holds and blocks that do not fit go to the next level", level.name,
                        level.index.used_bytes, level.capacity_bytes, exc)
        level.full_since = time.monotonic()
        level.index.resize(level.index.used_bytes)

    def _refit(self, level: Level) -> None:
        """Give a full level back the room its file system has again (every ``write_retry_s``)."""
        if level.full_since is None or time.monotonic() - level.full_since < level.health.retry_s:
            return
        free = free_bytes(level.store.root) or 0
        level.index.resize(min(level.capacity_bytes, level.index.used_bytes + free))
        level.full_since = time.monotonic()
        if level.index.capacity_bytes == level.capacity_bytes:
            level.full_since = None
            log.warning("hot level %s has room for its whole capacity again", level.name)

    def _evict(self, level_index: int, victims: Sequence[str]) -> bool:
        """Delete victims of a level (under the lock), demoting them a level down or to warm.

        Returns:
            False if a victim's file could not be deleted: the level refuses writes, and the
            victims still on disk are back in its index (which keeps matching the disk).
        """
        level = self.levels[level_index]
        for position, victim in enumerate(victims):
            data = self._victim_frame(level_index, victim)
            try:
                level.store.delete(victim)
            except BackendError as exc:
                level.health.failed(exc)
                self._readmit(level, victims[position:])
                return False
            self.dirty.add(victim)
            if data is not None:
                self._demote(level_index, victim, data)
        return True

    def _victim_frame(self, level_index: int, victim: str) -> bytes | None:
        """A victim's frame, read when a lower level or the warm tier may take it."""
        lower = level_index + 1 < len(self.levels)
        to_warm = self.offer_warm is not None and not self.in_warm(victim)
        try:
            if to_warm and not lower:  # the victim is out of the index already: its file tells its size
                to_warm = self.warm_room_for(self.levels[level_index].store.size(victim))
            if not (lower or to_warm):
                return None
            return self.levels[level_index].store.read(victim)
        except KeyError:
            return None

    def _readmit(self, level: Level, victims: Sequence[str]) -> None:
        for victim in victims:
            try:
                level.index.readmit(victim, level.store.size(victim), self.now())
            except KeyError:
                self.dirty.add(victim)  # gone already: it stays out of the index

    def _demote(self, level_index: int, victim: str, data: bytes) -> None:
        """Move an evicted frame a level down if that level takes it, else offer it to warm."""
        level = self.levels[level_index]
        if level_index + 1 < len(self.levels):
            below = self.levels[level_index + 1]
            if self._reserve(level_index + 1, victim, len(data)):
                try:
                    below.store.write(victim, data)
                except BackendError as exc:
                    below.index.abort(victim)
                    self._refused(below, exc)
                else:
                    below.index.commit(victim, self.now())
                    below.health.succeeded()
                    below.moves["written_bytes"] += len(data)
                    level.moves["demotions"] += 1
                    return
        if self.offer_warm is not None and not self.in_warm(victim):
            try:
                verify_frame(victim, data, secret=self.secret)  # a corrupt copy must not spread to the shared tier
            except IntegrityError:
                return
            self.offer_warm(victim, data)
            level.moves["demotions"] += 1
