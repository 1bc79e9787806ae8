"""A node cache's parts, built and wired around its one lock: the one wiring, used by
:class:`~tierload.node.node_cache.NodeCache` and by the tests that drive the parts directly
(``tests/test_node_parts.py``: no actor, channel or Ray)."""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable

from tierload.config.models import TierloadConfig
from tierload.node.accounting import NodeAccounting
from tierload.node.catalog import BlockCatalog
from tierload.node.coordinator_sync import CoordinatorSync
from tierload.node.fetcher import Fetcher
from tierload.node.hot_tier import HotTier
from tierload.node.oracle import PlanOracle
from tierload.node.stream import Stream
from tierload.node.stream_table import StreamTable
from tierload.policies.counts import PinCounts
from tierload.wire.api import PeerCaller


@dataclass(frozen=True)
class NodeParts:
    """A node cache's parts, wired together around its one lock (what :class:`NodeCache` is a
    facade over; tests drive them directly, with no actor, channel or Ray).

    Attributes:
        cond: The one lock (a condition over a re-entrant lock); every part is handed it.
        pins: The one owner of pins.
        catalog: The registered datasets and their cold sources.
        accounting: Access counts, trace recording and the stats counters.
        sync: The batched link to the coordinator, or None when running alone.
        hot: The hot tier (its clairvoyant oracle reads ``plans`` and ``catalog`` live).
        fetcher: Single-flight fetches into the hot tier (or staging).
        streams: Open streams, their prefetch scheduling, idle expiry and ghosts.
        plans: ``{dataset_id: [Stream, ...]}``: the open streams and ghosts, filled by
            ``streams``, read by the hot tier's oracle.
    """

    cond: threading.Condition
    pins: PinCounts
    catalog: BlockCatalog
    accounting: NodeAccounting
    sync: CoordinatorSync | None
    hot: HotTier
    fetcher: Fetcher
    streams: StreamTable
    plans: defaultdict[str, list[Stream]]

    def acquire(self, stream: Stream, consumer: int, position: int, deadline: float) -> tuple[str, int | bytes]:
        """``consumer`` of ``stream`` needs ``position`` now: schedule every run up to it and wait
        (the lock released meanwhile) until its block is hot or staged (call under the lock).

        Args:
            stream: An open stream (:meth:`StreamTable.require`).
            consumer: The consumer's id within the stream.
            position: The position it needs (everything before is consumed).
            deadline: ``time.monotonic()`` seconds to give up at.

        Returns:
            ``(block key, the hot level holding it)``, or ``(block key, its raw bytes)`` when the
            hot tier did not admit it.

        Raises:
            TierloadError: The fetch failed.
            ServiceError: Not fetched by ``deadline``.
        """
        key = self.streams.schedule_through(stream, consumer, position)
        # Pin while waiting: a run that skip_to passed was never pinned, and an unpinned block the
        # hot tier refuses is not staged, so without this pin it would be fetched again forever.
        self.pins.pin(key)
        try:
            with self.streams.waiting(stream.stream_id):
                return key, self.fetcher.wait_for(key, stream, deadline)
        finally:
            self.fetcher.release(key)


def node_parts(config: TierloadConfig, node_id: str, hot_dir: str,
               make_sync: Callable[[Callable[[], float]], CoordinatorSync] | None = None, *, warm: bool = False,
               peer_call: PeerCaller | None = None, peer_max_bytes: int | None = None) -> NodeParts:
    """Build and wire a node cache's parts (no I/O: each part's ``start()`` does it).

    Args:
        config: The effective configuration.
        node_id: This node's id (in error messages).
        hot_dir: The hot tier's disk directory (``{node}`` already replaced).
        make_sync: Builds the link to the coordinator from the decay clock; None: run alone.
        warm: Whether a warm tier is in use (the hot tier then offers its victims to it).
        peer_call: Sends a call to another node's cache, or None (no peer transfer).
        peer_max_bytes: Blocks larger than this (bytes) are never read from a peer; None: no limit.

    Returns:
        The parts, sharing one lock.
    """
    cond = threading.Condition(threading.RLock())
    pins = PinCounts()
    catalog = BlockCatalog()
    plans: defaultdict[str, list[Stream]] = defaultdict(list)
    accounting = NodeAccounting(config.policy.decay, cond, lambda: streams.epochs())
    sync = make_sync(accounting.now) if make_sync is not None else None
    hot = HotTier(config, hot_dir, accounting.accesses, pins,
                  PlanOracle(catalog.locate, plans, catalog.block_sizes, config.hot.capacity_bytes), cond,
                  accounting.now,
                  offer_warm=sync.offer_warm if sync is not None and warm else None,
                  in_warm=lambda key: sync is not None and key in sync.known_warm,
                  warm_room_for=sync.room_for if sync is not None else lambda size: True)
    fetcher = Fetcher(config, node_id, cond, catalog, hot, pins, accounting, sync, peer_call, peer_max_bytes)
    streams = StreamTable(config.prefetch, cond, catalog, hot, fetcher, pins, accounting, plans)
    return NodeParts(cond, pins, catalog, accounting, sync, hot, fetcher, streams, plans)
