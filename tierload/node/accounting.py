"""A node cache's accounting: every planned access goes through :meth:`NodeAccounting.count_access`.

One access updates, in one place: the decayed counts and the hot levels' policies (through
:class:`~tierload.policies.counts.AccessCounts`), the counts waiting for the next coordinator sync, the
trace recording (for ``tierload policy simulate --trace``), and the hit counters of the node and
of the stream. Other counters (bytes, errors, wire traffic) are added with :meth:`tally`.

No lock of its own: the node cache passes in its lock, and callers hold it around every
call except :meth:`now`, which takes it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from dataclasses import replace
from typing import Callable, Iterable, Mapping

from tierload.config.models import DecayConfig
from tierload.data.blocks import Block
from tierload.frames.blockfile import HEADER_SIZE
from tierload.node.stats import new_stats
from tierload.node.stream import Stream
from tierload.policies.counts import AccessCounts
from tierload.policies.frequency import DecayingCounter
from tierload.wire.stats import StreamStats

RECORD_LIMIT = 10_000_000  # accesses a trace recording keeps at most
# Fetch latencies kept for the next metrics export (the oldest are dropped past this; an export
# every few seconds drains them long before).
LATENCY_LIMIT = 100_000


class NodeAccounting:
    """Access counts, the decay clock, trace recording and stats of one node cache.

    Args:
        decay: The ``policy.decay`` section (half-life and its unit).
        lock: The node cache's lock.
        open_epochs: The epochs of the streams open now (read under ``lock``).

    Attributes:
        accesses: Decayed counts and the policies that hear of each access; the hot tier's
            levels listen to it.
        stats: The node's counters (see :mod:`tierload.node.stats`).
        finished: The last closed streams, as ``(row without counters, the stream's live
            counters)``; :meth:`finished_rows` joins them.
        latencies: ``(source, seconds)`` of finished fetches, drained by :meth:`take_latencies`.
    """

    def __init__(self, decay: DecayConfig, lock: threading.Condition,
                 open_epochs: Callable[[], Iterable[int]]) -> None:
        self._lock = lock
        self._open_epochs = open_epochs
        self._unit = decay.unit
        self.accesses = AccessCounts(DecayingCounter(decay.half_life))
        self.stats = new_stats()
        self.finished: deque = deque(maxlen=512)
        self.latencies: deque[tuple[str, float]] = deque(maxlen=LATENCY_LIMIT)
        self._pending_counts: Counter = Counter()
        self._recording: list[tuple[str, int, int]] | None = None  # (key, bytes, epoch) when recording
        self._now_value = 0.0

    def set_decay(self, decay: DecayConfig) -> None:
        """Age counts by ``decay`` from now on (call under the lock)."""
        self._unit = decay.unit
        self.accesses.counter.half_life = decay.half_life

    def now(self) -> float:
        """The decay clock: seconds, or the highest epoch any open stream is in.

        Epoch time is whole epochs: within an epoch, a block read early must not look more
        frequent than one read late, or equal-frequency blocks churn as under LRU.
        """
        if self._unit == "second":
            return time.time()
        with self._lock:
            for epoch in self._open_epochs():
                self._now_value = max(self._now_value, float(epoch))
            return self._now_value

    def count_access(self, stream: Stream, block: Block, outcome: str | None) -> None:
        """One planned access of ``block`` by ``stream``; ``outcome`` names the hit counter
        to add to (None: the fetch adds it once it knows the source)."""
        key = block.key
        now = self.now()
        if self._recording is not None and len(self._recording) < RECORD_LIMIT:
            self._recording.append((key, block.length + HEADER_SIZE, stream.epoch))
        self.accesses.record(key, now)
        self._pending_counts[key] += 1
        for target in (self.stats, stream.stats):
            target["accesses"] += 1
            if outcome:
                target[outcome] += 1

    def count_unplanned_access(self, key: str) -> None:
        """One access of block ``key`` outside any stream (``ds[i]``): heard by the counts and the
        policies (a block earns admission by its accesses) and sent to the coordinator like a
        planned one; not in a trace recording (no epoch plans it). Its counters are tallied by the
        caller (:mod:`tierload.node.sample_reads`)."""
        self.accesses.record(key, self.now())
        self._pending_counts[key] += 1

    def tally(self, stream: Stream | None, counts: Mapping[str, int]) -> None:
        """Add ``counts`` to the node's counters and, if given, to ``stream``'s."""
        self.stats.update(counts)
        if stream is not None:
            stream.stats.update(counts)

    def take_latencies(self) -> list[tuple[str, float]]:
        """Fetch latencies recorded since the last call (and forget them)."""
        latencies, self.latencies = list(self.latencies), deque(maxlen=LATENCY_LIMIT)
        return latencies

    def take_pending_counts(self) -> dict[str, int]:
        """Accesses counted since the last call, for the coordinator (and forget them)."""
        counts, self._pending_counts = dict(self._pending_counts), Counter()
        return counts

    def record_trace(self, enabled: bool) -> list[tuple[str, int, int]]:
        """Start (``enabled``) or stop recording; returns what was recorded until now."""
        recorded = self._recording or []
        self._recording = [] if enabled else None
        return recorded

    def stream_closed(self, stream: Stream) -> None:
        """Keep ``stream`` among the finished streams (call under the lock).

        Its counters are kept by reference, not copied: a fetch's tally is added under the lock
        only after its block is in the hot tier, where a consumer may read it at once, pass the
        last position and so close the stream first. That tally (a cold GET, its bytes, the hit
        counter) still belongs to this stream and its epoch; a copy made at close would miss it.
        """
        self.finished.append((self._progress_row(stream), stream.stats))

    def finished_rows(self) -> list[StreamStats]:
        """Rows of the finished streams, with their counters as they are now (call under the lock)."""
        return [replace(row, counters=dict(stats)) for row, stats in self.finished]

    @staticmethod
    def stream_row(stream: Stream) -> StreamStats:
        """A stream's progress and counters, as :meth:`NodeCache.stream_stats` lists them
        (``lead_blocks``, ``lead_positions``: how far prefetching is ahead of the consumers)."""
        return replace(NodeAccounting._progress_row(stream), counters=dict(stream.stats))

    @staticmethod
    def _progress_row(stream: Stream) -> StreamStats:
        lead_blocks, lead_positions = stream.lead()
        return StreamStats(stream_id=stream.stream_id, dataset_id=stream.dataset_id, epoch=stream.epoch,
                           cursor=stream.cursor, consume_len=stream.consume_len, finished=stream.finished,
                           lead_blocks=lead_blocks, lead_positions=lead_positions)
