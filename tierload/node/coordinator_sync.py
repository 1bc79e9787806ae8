"""A node cache's batched traffic with the coordinator.

Every ~0.2 s one call carries what this node learned since the last one: access counts, the
blocks it proposes for the warm tier (fresh from cold, or demoted from hot), warm copies it
found corrupt, changes to its hot residency, and peers that did not answer. The answer says
which warm writes were admitted (the coordinator has already made room; this node writes
them, then confirms in a second call) and how the cluster's holder map changed, which this
node keeps as a replica to find blocks on peers. So the coordinator is called a few times a
second per node, never once per sample. A warm tier that refuses a write (read-only, full)
gets no proposal from this node for ``warm.write_retry_s``; the cause is logged once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from typing import Callable

from tierload.errors import BackendError
from tierload.frames.blockfile import FrameFormat, encode_frame, recode
from tierload.stores.base import BlockStore
from tierload.stores.tier_writes import WriteHealth
from tierload.wire.api import Caller, CoordinatorAPI
from tierload.wire.messages import SyncAnswer, SyncReport

log = logging.getLogger(__name__)


WARN_INTERVAL_S = 60.0


class _FailureLog:
    """Logs a repeating failure at most once a minute (the first with its traceback), and once
    when it ends, instead of once per try (a sync is tried every ~0.2 s).

    Args:
        what: What failed, for the messages.
        interval_s: Least seconds between two warnings about the same run of failures.
    """

    def __init__(self, what: str, interval_s: float = WARN_INTERVAL_S) -> None:
        self.what = what
        self.interval_s = interval_s
        self.in_a_row = 0
        self._last_warning = float("-inf")

    def failed(self, exc: BaseException) -> None:
        self.in_a_row += 1
        now = time.monotonic()
        if now - self._last_warning < self.interval_s:
            return
        self._last_warning = now
        log.warning("%s failed (%d in a row, %s: %s); retrying, next warning in %.0f s at the earliest", self.what,
                    self.in_a_row, type(exc).__name__, exc, self.interval_s, exc_info=self.in_a_row == 1)

    def succeeded(self) -> None:
        if self.in_a_row:
            log.warning("%s works again after %d failures", self.what, self.in_a_row)
        self.in_a_row = 0
        self._last_warning = float("-inf")


class CoordinatorSync:
    """Background batching between one node cache and the coordinator.

    Args:
        node_id: This node's id.
        call: Sends a :class:`~tierload.wire.api.CoordinatorAPI` call to the coordinator.
        collect: Returns ``(counts, hot_added, hot_removed, hot_full)`` gathered since the last
            call and clears them; ``hot_full`` is the complete residency when ``full`` is asked.
        now: Current time in the decay unit.
        warm_store: The warm tier's store (written directly by this node once admitted), or None.
        compress_level: zstd level to store warm blocks compressed (wherever that makes them
            smaller), or None to store them raw.
        max_pending_bytes: Warm writes beyond this many queued bytes are skipped (and counted).
        interval_s: Seconds between calls.
        write_retry_s: Seconds without proposals after the warm tier refused a write.
    """

    def __init__(self, node_id: str, call: Caller, collect: Callable[[bool], tuple], now: Callable[[], float],
                 warm_store: BlockStore | None = None, compress_level: int | None = None,
                 max_pending_bytes: int = 64 * 2**20, interval_s: float = 0.2, write_retry_s: float = 30.0) -> None:
        self.node_id = node_id
        self.call = call
        self.collect = collect
        self.now = now
        self.warm_store = warm_store
        self.warm_format = FrameFormat(compress_level)  # warm capacity is what compression saves
        self.secret: bytes | None = None  # the deployment's checksum key, set by the owner's start()
        self.max_pending_bytes = max_pending_bytes
        self.interval_s = interval_s
        self.known_warm: set[str] = set()
        self.warm_health = WriteHealth("warm", write_retry_s)  # under self._lock
        self.holders: dict[str, list[str]] = {}  # replica of the coordinator's map, this node excluded
        self.stats = Counter(warm_writes=0, warm_write_bytes=0, warm_writes_skipped=0, warm_write_errors=0,
                             sync_errors=0, syncs=0)
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._writes: dict[str, bytes] = {}
        self._pending_bytes = 0
        self._drops: list[str] = []
        self._lost: set[str] = set()
        self._incarnation: str | None = None
        self._since = -1
        self._need_full = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tierload-coordinator-sync", daemon=True)

    def start(self, warm_store: BlockStore | None = None) -> None:
        """Start syncing in the background (once the owner is fully set up).

        Args:
            warm_store: The warm tier's store, if the owner opened it only now (it replaces the
                constructor's).
        """
        if warm_store is not None:
            self.warm_store = warm_store
        self._thread.start()

    # ------------------------------------------------------------ producers
    def offer_fetched(self, key: str, raw: bytes, digest: int) -> None:
        """Propose a block fresh from the cold tier for the warm tier (the coordinator decides);
        its frame is encoded once, in the warm tier's format.

        Args:
            key: The block key.
            raw: The block's bytes.
            digest: The checksum taken when it left the cold tier.
        """
        if self.warm_store is None or key in self.known_warm:
            return
        self._queue(key, encode_frame(key, raw, digest, self.warm_format, secret=self.secret))

    def offer_warm(self, key: str, frame: bytes) -> None:
        """Propose a block's frame (e.g. one the hot tier evicts) for the warm tier; the frame is
        written as it is unless the warm tier stores another codec.

        Raises:
            IntegrityError: ``frame`` is not a frame of ``key``.
        """
        if self.warm_store is None or key in self.known_warm:
            return
        self._queue(key, recode(key, frame, self.warm_format, secret=self.secret))

    def room_for(self, size: int) -> bool:
        """Whether a proposal of ``size`` frame bytes would be queued now; one that would not is
        counted as skipped (``warm_writes_skipped``), as :meth:`offer_warm` counts it.

        Asked before a large frame is read into memory only to be skipped.
        """
        with self._lock:
            if self._pending_bytes + size <= self.max_pending_bytes:
                return True
            self.stats["warm_writes_skipped"] += 1
            return False

    def offer_frame_file(self, key: str, path: str | os.PathLike, size: int) -> None:
        """:meth:`offer_warm` of a frame stored in a file (a block streamed into the hot tier).

        The file is read only if a frame of ``size`` bytes would be queued now, so a block too
        large for the queue (``max_pending_bytes``) is skipped and counted without ever being
        read whole into memory. A file gone meanwhile (evicted) is not offered.
        """
        if self.warm_store is None or key in self.known_warm or not self.room_for(size):
            return
        try:
            with open(path, "rb") as handle:
                frame = handle.read()
        except OSError:  # evicted meanwhile, or unreadable: the warm tier simply does not get it now
            return
        self.offer_warm(key, frame)

    def _queue(self, key: str, data: bytes) -> None:
        with self._lock:
            if key in self._writes or not self.warm_health.admitting():
                return
            if self._pending_bytes + len(data) > self.max_pending_bytes:
                self.stats["warm_writes_skipped"] += 1
                return
            self._writes[key] = data
            self._pending_bytes += len(data)
            self.warm_health.trying()

    def drop_warm(self, key: str) -> None:
        """Report a corrupt warm copy of ``key``; the coordinator deletes it."""
        with self._lock:
            self._drops.append(key)
            self.known_warm.discard(key)

    def report_lost(self, node_id: str) -> None:
        """A peer did not answer; stop asking it and tell the coordinator."""
        with self._lock:
            self._lost.add(node_id)
            self.holders = {key: [n for n in nodes if n != node_id] for key, nodes in self.holders.items()}

    def holders_of(self, key: str) -> list[str]:
        """Peers that hold ``key`` in their hot tier, as far as this node knows."""
        nodes = self.holders.get(key, ())
        return [node for node in nodes if node not in self._lost]

    # ----------------------------------------------------------------- sync
    def _loop(self) -> None:
        failures = _FailureLog(f"sync of node {self.node_id} with the coordinator")
        while not self._stop.wait(self.interval_s):
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - keep syncing; the next call carries fresh data
                self.stats["sync_errors"] += 1
                failures.failed(exc)
            else:
                failures.succeeded()

    def flush(self) -> None:
        """Send one batch now and apply the answer."""
        with self._flush_lock:
            self._flush()

    def _flush(self) -> None:
        with self._lock:
            writes, self._writes, self._pending_bytes = self._writes, {}, 0
            drops, self._drops = self._drops, []
            lost = sorted(self._lost)
        need_full = self._need_full
        counts, added, removed, full = self.collect(need_full)
        report = SyncReport(counts=counts, now=self.now(), proposals=[(k, len(v)) for k, v in writes.items()],
                            drops=drops, hot_added=added, hot_removed=removed, hot_full=full if need_full else None,
                            lost=lost, since=self._since)
        answer = SyncAnswer.received(self.call(CoordinatorAPI.sync, self.node_id, report))
        self.stats["syncs"] += 1
        if need_full:
            self._need_full = False
        if answer.incarnation != self._incarnation:
            if self._incarnation is not None:
                log.warning("the coordinator restarted; resending this node's residency")
                self._need_full = True
                self.known_warm.clear()
            self._incarnation = answer.incarnation
        self._apply_holders(answer.holders, answer.full)
        self._since = answer.holders_version
        self._write_admitted(writes, answer.granted, answer.present)

    def _apply_holders(self, holders: dict[str, list[str]], full: bool) -> None:
        others = {key: [n for n in nodes if n != self.node_id] for key, nodes in holders.items()}
        with self._lock:
            if full:
                self.holders = {key: nodes for key, nodes in others.items() if nodes}
                return
            for key, nodes in others.items():
                if nodes:
                    self.holders[key] = nodes
                else:
                    self.holders.pop(key, None)

    def _write_admitted(self, writes: dict[str, bytes], granted: list[bool], present: list[bool]) -> None:
        store = self.warm_store
        if store is None:  # nothing was queued: offers are ignored without a warm tier
            return
        committed, aborted = [], []
        refused = False  # once one write is refused, the batch's other admissions are given back unwritten
        for (key, data), admit, there in zip(writes.items(), granted, present, strict=True):
            if there:
                self.known_warm.add(key)
            if not admit:
                continue
            if refused:
                aborted.append(key)
                continue
            try:
                store.write(key, data)
                committed.append(key)
                self.stats["warm_write_bytes"] += len(data)
            except BackendError as exc:
                with self._lock:
                    self.warm_health.failed(exc)
                self.stats["warm_write_errors"] += 1
                aborted.append(key)
                refused = True
        if committed:
            with self._lock:
                self.warm_health.succeeded()
        if committed or aborted:
            self.call(CoordinatorAPI.commit, committed, aborted)
            self.known_warm.update(committed)
            self.stats["warm_writes"] += len(committed)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - best effort at shutdown
            log.debug("final coordinator sync failed", exc_info=True)
