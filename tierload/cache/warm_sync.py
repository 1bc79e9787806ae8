"""Batches a node cache's traffic with the coordinator: access counts and warm-tier writes.

Every ~0.2 s one call carries the access counts gathered since the last one, the blocks
this node would like to write into the warm tier (fresh from cold, or demoted from hot)
and the warm copies it found corrupt. The coordinator answers which writes it admitted (it
has already made room); this node writes those, then confirms in a second call. So the
warm tier's capacity is reserved before any byte is written, and the coordinator is called
a few times a second per node, never once per sample.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Callable

from tierload.blockfile import encode_block
from tierload.errors import BackendError
from tierload.stores.base import BlockStore

log = logging.getLogger(__name__)


class WarmSync:
    """Background batching of counts and warm writes for one node.

    Args:
        node_id: This node's id.
        store: The warm tier's store (written directly by this node once admitted).
        call: ``call(method, *args)`` invokes the coordinator and returns its result.
        take_counts: Returns and clears the access counts gathered since the last flush.
        now: Current time in the decay unit.
        compress_level: zstd level to store warm blocks compressed, or None.
        max_pending_bytes: Writes beyond this many queued bytes are skipped (and counted).
        interval_s: Seconds between flushes.
    """

    def __init__(self, node_id: str, store: BlockStore, call: Callable, take_counts: Callable[[], dict],
                 now: Callable[[], float], compress_level: int | None, max_pending_bytes: int = 64 * 2**20,
                 interval_s: float = 0.2) -> None:
        self.node_id = node_id
        self.store = store
        self.call = call
        self.take_counts = take_counts
        self.now = now
        self.compress_level = compress_level
        self.max_pending_bytes = max_pending_bytes
        self.interval_s = interval_s
        self.known: set[str] = set()  # blocks this node knows are in the warm tier
        self.stats = Counter(warm_writes=0, warm_writes_skipped=0, warm_write_errors=0, sync_errors=0)
        self._lock = threading.Lock()
        self._writes: dict[str, bytes] = {}
        self._pending_bytes = 0
        self._drops: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tierload-warm-sync", daemon=True)
        self._thread.start()

    def offer(self, key: str, raw: bytes, digest: int) -> None:
        """Propose ``key`` for the warm tier (the coordinator decides)."""
        if key in self.known:
            return
        data = encode_block(key, raw, raw_checksum=digest, compress_level=self.compress_level)
        with self._lock:
            if key in self._writes:
                return
            if self._pending_bytes + len(data) > self.max_pending_bytes:
                self.stats["warm_writes_skipped"] += 1
                return
            self._writes[key] = data
            self._pending_bytes += len(data)

    def drop(self, key: str) -> None:
        """Report a corrupt warm copy of ``key``; the coordinator deletes it."""
        with self._lock:
            self._drops.append(key)
            self.known.discard(key)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - keep syncing; the next flush retries with fresh data
                self.stats["sync_errors"] += 1
                log.warning("warm-tier sync of node %s failed", self.node_id, exc_info=True)

    def flush(self) -> None:
        """Send counts, proposals and drops; write and confirm what was admitted."""
        with self._lock:
            writes, self._writes, self._pending_bytes = self._writes, {}, 0
            drops, self._drops = self._drops, []
        counts = self.take_counts()
        if not (writes or drops or counts):
            return
        answer = self.call("sync", self.node_id, counts, self.now(),
                           [(key, len(data)) for key, data in writes.items()], drops)
        committed, aborted = [], []
        for (key, data), granted, present in zip(writes.items(), answer["granted"], answer["present"]):
            if present:
                self.known.add(key)
            if not granted:
                continue
            try:
                self.store.write(key, data)
                committed.append(key)
            except BackendError:
                log.warning("cannot write block %s to the warm tier", key, exc_info=True)
                self.stats["warm_write_errors"] += 1
                aborted.append(key)
        if committed or aborted:
            self.call("commit", committed, aborted)
            self.known.update(committed)
            self.stats["warm_writes"] += len(committed)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            self.flush()
        except Exception:  # noqa: BLE001 - best effort at shutdown
            log.debug("final warm sync failed", exc_info=True)
