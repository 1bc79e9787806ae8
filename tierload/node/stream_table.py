"""A node cache's stream table: the open streams, their prefetch scheduling, and their end.

Each stream is one rank's epoch (:class:`~tierload.node.stream.Stream`). A background loop
schedules each stream's next runs, one run per stream per pass (fair between ranks), up to
``prefetch.depth_blocks`` blocks and ``prefetch.depth_bytes`` bytes ahead of its consumers.
A scheduled run pins its block until every consumer has passed it. A stream whose consumers
stay silent for ``prefetch.stream_idle_timeout_s`` is closed; a closed stream's look-ahead (the
next epoch's order) stays visible to the clairvoyant policy as a *ghost* until the next
epoch's stream of the same lineage opens.

No lock of its own: the node cache passes in its condition; the loop takes it, and the other
methods are called with it held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, defaultdict
from contextlib import contextmanager
from typing import Iterator

from tierload.config.models import PrefetchConfig
from tierload.data.blocks import Block
from tierload.errors import ServiceError, StreamNotOpenError
from tierload.node.accounting import NodeAccounting
from tierload.node.catalog import BlockCatalog
from tierload.node.fetcher import Fetcher
from tierload.node.hot_tier import HotTier
from tierload.node.stats import new_stats
from tierload.node.stream import Stream
from tierload.policies.counts import PinCounts
from tierload.wire.messages import StreamPlan
from tierload.wire.stats import StreamStats

log = logging.getLogger(__name__)


class StreamTable:
    """Open streams (and ghosts of closed ones), scheduled ahead of their consumers.

    Args:
        prefetch: How far ahead to schedule.
        cond: The node cache's condition.
        catalog: The registered datasets.
        hot: The hot tier (a scheduled block already there needs no fetch).
        fetcher: Fetches what is scheduled and not there.
        pins: The node's pin counts.
        accounting: Every counted run of a stream is an access.
        streams_by_dataset: Empty ``{dataset_id: [Stream, ...]}``, filled here with the open
            streams and ghosts, and read live by the clairvoyant policy's oracle.
    """

    def __init__(self, prefetch: PrefetchConfig, cond: threading.Condition, catalog: BlockCatalog, hot: HotTier,
                 fetcher: Fetcher, pins: PinCounts, accounting: NodeAccounting,
                 streams_by_dataset: defaultdict[str, list[Stream]]) -> None:
        self._prefetch = prefetch
        self._cond = cond
        self._catalog = catalog
        self._hot = hot
        self._fetcher = fetcher
        self._pins = pins
        self._accounting = accounting
        self._closing = False
        self._streams: dict[str, Stream] = {}
        self._streams_by_dataset = streams_by_dataset
        self._ghosts: dict[str, Stream] = {}  # closed streams whose look-ahead still informs eviction
        self._last_active: dict[str, float] = {}
        self._waiting: Counter[str] = Counter()  # consumers inside acquire, per stream
        self._scheduler = threading.Thread(target=self._schedule_loop, name="tierload-prefetch", daemon=True)

    def start(self) -> None:
        """Start the prefetch loop."""
        self._scheduler.start()

    def close(self) -> None:
        """Stop the prefetch loop (call under the lock)."""
        self._closing = True
        self._cond.notify_all()

    # --------------------------------------------------- under the node cache's lock
    def open(self, stream_id: str, num_consumers: int, plan: StreamPlan | None) -> bool:
        """Join the stream, or create it from ``plan``; False if it is not open and no plan came.

        Raises:
            ServiceError: The plan names a dataset that was never registered.
        """
        stream = self._streams.get(stream_id)
        if stream is None:
            if plan is None:
                return False
            if plan.dataset_id not in self._catalog:
                raise ServiceError(f"dataset {plan.dataset_id} is not registered with this node cache")
            stream = Stream(stream_id, plan.dataset_id, plan.epoch, plan.seq, plan.consume_len,
                            num_consumers, self._catalog.num_blocks(plan.dataset_id), plan.reuse_gap, plan.start)
            stream.stats = new_stats()
            stream.lineage = plan.lineage or stream_id
            stream.identity = plan.identity
            stream.readers = self._catalog.readers_of(plan.dataset_id, plan.identity)
            self._forget_ghost(stream.lineage)
            self._streams[stream_id] = stream
            self._streams_by_dataset[stream.dataset_id].append(stream)
        self._last_active[stream_id] = time.monotonic()
        self._cond.notify_all()
        return True

    def find(self, stream_id: str) -> Stream | None:
        """The open stream ``stream_id``, or None (nothing marked active)."""
        return self._streams.get(stream_id)

    def require(self, stream_id: str) -> Stream:
        """The open stream ``stream_id``, marked active.

        Raises:
            StreamNotOpenError: It expired, or the cache restarted.
        """
        stream = self._streams.get(stream_id)
        if stream is None:
            raise StreamNotOpenError(f"stream {stream_id} is not open on this node cache (expired after "
                                     f"{self._prefetch.stream_idle_timeout_s:g}s idle, or the cache "
                                     "restarted)")
        self._last_active[stream_id] = time.monotonic()
        return stream

    @contextmanager
    def waiting(self, stream_id: str) -> Iterator[None]:
        """A consumer of ``stream_id`` waits for a block (call with the lock held): the stream
        is not idle meanwhile, however long the fetch takes."""
        self._waiting[stream_id] += 1
        try:
            yield
        finally:
            self._waiting[stream_id] -= 1
            if not self._waiting[stream_id]:
                del self._waiting[stream_id]
            self._last_active[stream_id] = time.monotonic()

    def progress(self, stream_id: str, consumer: int, position: int) -> None:
        """``consumer`` of ``stream_id`` (if open) consumed every position before ``position``."""
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._advance(stream, consumer, position)

    def close_consumer(self, stream_id: str, consumer: int) -> None:
        """``consumer`` of ``stream_id`` (if open) is done with it."""
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._advance(stream, consumer, stream.consume_len)

    def schedule_through(self, stream: Stream, consumer: int, position: int) -> str:
        """``consumer`` needs ``position`` now: schedule every run up to it; the key it needs."""
        self._advance(stream, consumer, position)
        run = stream.run_of(position)
        while stream.next_run <= run:
            self._schedule(stream, stream.next_run)
        return self._block_of_run(stream, run).key

    def epochs(self) -> list[int]:
        """The epochs of the open streams."""
        return [stream.epoch for stream in self._streams.values()]

    def rows(self) -> list[StreamStats]:
        """Stats rows of the open streams."""
        return [self._accounting.stream_row(s) for s in self._streams.values()]

    def positions(self) -> list[tuple[str, int, int]]:
        """``(lineage, cursor_run, next_run)`` of each unfinished stream: the run its slowest
        consumer is at and the prefetch frontier (their difference is the prefetch lead, in blocks)."""
        out = []
        for stream in self._streams.values():
            cursor = stream.cursor
            if cursor < stream.consume_len:
                out.append((stream.lineage, stream.run_of(cursor), min(stream.next_run, stream.consume_runs)))
        return out

    def schedule_ahead(self) -> int:
        """Schedule every open stream's next runs, one run per stream per pass (fair between
        ranks), until each is ``prefetch.depth_blocks`` runs or ``prefetch.depth_bytes`` bytes
        ahead of its consumers or at the end of its epoch. The prefetch loop calls it.

        Returns:
            How many runs were scheduled.
        """
        depth = self._prefetch
        scheduled = 0
        progressed = True
        while progressed:
            progressed = False
            for stream in list(self._streams.values()):
                # Only this epoch's runs are prefetched; the look-ahead part of the plan
                # serves the clairvoyant policy's view of what is needed next.
                if (stream.next_run < stream.consume_runs and len(stream.scheduled) < depth.depth_blocks
                        and stream.window_bytes < depth.depth_bytes):
                    self._schedule(stream, stream.next_run)
                    scheduled += 1
                    progressed = True
        return scheduled

    def expire_idle(self, now: float | None = None) -> list[str]:
        """Close every stream no consumer touched (and none waits in) for longer than
        ``prefetch.stream_idle_timeout_s``; a closed stream with a look-ahead stays as a ghost.

        Args:
            now: ``time.monotonic()`` seconds to judge idleness at (None: now).

        Returns:
            The ids of the streams closed.
        """
        now = time.monotonic() if now is None else now
        timeout_s = self._prefetch.stream_idle_timeout_s
        closed = []
        for stream_id, stream in list(self._streams.items()):
            if self._waiting[stream_id]:
                continue  # a consumer is waiting for a slow fetch: it is not idle
            if now - self._last_active.get(stream_id, now) > timeout_s:
                log.info("closing stream %s: no consumer activity for %gs", stream_id, timeout_s)
                self._close_stream(stream)
                closed.append(stream_id)
        return closed

    # ------------------------------------------------------------- internals
    def _schedule_loop(self) -> None:
        while True:
            with self._cond:
                if self._closing:
                    return
                self.schedule_ahead()
                self.expire_idle()
                self._cond.wait(0.05)

    def _block_of_run(self, stream: Stream, run: int) -> Block:
        return self._catalog.block_at(stream.dataset_id, int(stream.run_block[run]))

    def _schedule(self, stream: Stream, run: int) -> None:
        block = self._block_of_run(stream, run)
        key = block.key
        counted = stream.counted(run)
        stream.mark_scheduled(run)
        self._pins.pin(key)
        stream.window_bytes += block.length
        outcome = self._known_outcome(key)
        if counted:
            self._accounting.count_access(stream, block, outcome)
        if outcome is not None:
            return
        # A fetch already in flight serves this access too; a counted one learns its outcome there.
        in_flight = self._fetcher.join(key, stream) if counted else self._fetcher.busy_with(key)
        if not in_flight:
            self._fetcher.submit(key, stream, counted)

    def _known_outcome(self, key: str) -> str | None:
        """The hit counter a planned access of ``key`` adds to now; None while a fetch decides it
        (one in flight, or the one this access starts)."""
        if self._hot.level_of(key) is not None:
            return "hot_hits"
        return "staged_hits" if self._fetcher.is_staged(key) else None

    def _release(self, stream: Stream, run: int) -> None:
        block = self._block_of_run(stream, run)
        stream.window_bytes -= block.length
        self._fetcher.release(block.key)

    def _advance(self, stream: Stream, consumer: int, position: int) -> None:
        for run in stream.set_cursor(consumer, position):
            self._release(stream, run)
        cursor = stream.cursor
        target = stream.run_of(cursor) if cursor < stream.consume_len else stream.consume_runs
        for run in stream.skip_to(target):
            if stream.counted(run):
                self._accounting.count_access(stream, self._block_of_run(stream, run), "hot_hits")
        self._last_active[stream.stream_id] = time.monotonic()
        if stream.finished:
            self._close_stream(stream)
        self._cond.notify_all()

    def _close_stream(self, stream: Stream) -> None:
        for run in stream.drain():
            self._release(stream, run)
        self._streams.pop(stream.stream_id, None)
        self._last_active.pop(stream.stream_id, None)
        self._accounting.stream_closed(stream)
        if stream.num_runs > stream.consume_runs:
            # Keep the look-ahead (the next epoch's order) visible to the clairvoyant policy until
            # that epoch's stream opens; otherwise every block looks unneeded between epochs. The
            # runs of this epoch nobody scheduled (an idle stream's) are skipped, so their blocks'
            # next uses move past them too: left as they were, they would look needed before
            # anything else (a negative distance) for as long as the ghost lasts.
            stream.skip_to(stream.consume_runs)
            self._forget_ghost(stream.lineage)
            self._ghosts[stream.lineage] = stream
        else:
            self._unlist(stream)

    def _unlist(self, stream: Stream) -> None:
        owners = self._streams_by_dataset.get(stream.dataset_id, [])
        if stream in owners:
            owners.remove(stream)

    def _forget_ghost(self, lineage: str) -> None:
        ghost = self._ghosts.pop(lineage, None)
        if ghost is not None:
            self._unlist(ghost)
