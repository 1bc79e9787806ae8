"""A node cache's fetcher: brings a block in, once however many consumers wait for it.

A fetch reads a peer node's hot tier first (if the holder map names one), then the warm
tier, then cold; the block is then placed in the hot tier by policy. A block the hot tier
refuses is staged in memory while a planned access still needs (pins) it. A failed fetch
raises its error in the consumers that waited for it; a failed prefetch nobody waited for is
not replayed: the next consumer that needs the block fetches it again (the cold tier's retry
budget, :mod:`tierload.stores.cold.retry`, applies to that fetch afresh).

A plain block longer than one cold request (``cold.max_request_bytes``) that a hot level
takes, and that no peer or warm copy holds, is streamed from cold straight into that level's
file (:mod:`tierload.node.streamed_fetch`): the node cache holds two requests' bytes of it,
not the block (a 512 MiB object: peak RSS +212 MiB instead of +1237 MiB read whole).

Each fetch is a coroutine on one event-loop thread, at most ``prefetch.concurrency`` at once:
cold reads are awaited (:meth:`~tierload.stores.cold.source.ColdSource.read_async`, hundreds in
flight without a thread each); peer and warm reads and hot-tier writes, which block, run on a
small pool. No lock of its own: the node cache passes in its condition. Finished fetches are
handed back in batches, one acquisition of the condition and one ``notify_all`` per batch;
the other methods are called with the condition held.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
from collections import Counter
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from tierload.config.models import TierloadConfig
from tierload.data.blocks import Block
from tierload.errors import BackendError, IntegrityError, ServiceError, TierloadError
from tierload.frames.blockfile import HEADER_SIZE, decode_frame
from tierload.frames.checksum import checksum
from tierload.node.accounting import NodeAccounting
from tierload.node.catalog import BlockCatalog
from tierload.node.coordinator_sync import CoordinatorSync
from tierload.node.hot_tier import HotTier
from tierload.node.loop_thread import LoopThread
from tierload.node.stream import Stream
from tierload.node.streamed_fetch import frame_size, stream_block_to_file, streams
from tierload.policies.counts import PinCounts
from tierload.stores.base import BlockStore
from tierload.wire.api import NodeCacheServiceAPI, PeerCaller

log = logging.getLogger(__name__)

ACQUIRE_TIMEOUT_S = 600.0
# Threads for the blocking steps of a fetch (peer and warm reads, hot-tier writes); cold
# reads, the ones that wait on the network longest, need none.
BLOCKING_THREADS = 8
# Seconds a stats reader waits at most for the tallies of fetches whose stream has finished:
# their blocks are already in the hot tier, only the hand-back under the lock is left (a
# moment, or a few seconds on a starved machine).
TALLY_WAIT_S = 5.0


@dataclass
class _Fetch:
    stream: Stream | None
    counted: bool
    block: Block | None
    readers: Mapping[str, str] | None = None  # without a stream: whose credentials read it (ds[i])
    # Streams whose counted access came while this fetch was in flight: the fetch's end says
    # whether the hot tier took the block (a hot hit) or refused it (served by the staged copy).
    joiners: list[Stream] = field(default_factory=list)


def _readers(fetch: _Fetch) -> Mapping[str, str] | None:
    """Whose credentials read a fetch's block from cold: its stream's job's, else the reader's
    that asked for it (None: the dataset's first registration's)."""
    return fetch.stream.readers if fetch.stream is not None else fetch.readers


@dataclass
class _Done:
    """A finished fetch, waiting to be handed back (with the next batch) under the lock."""

    key: str
    fetch: _Fetch
    tally: Counter
    error: BaseException | None = None
    raw: bytes = b""
    level: int | None = None
    source: str = ""
    seconds: float = 0.0  # reading the block from its source (retries included), for the latency histogram


@dataclass
class _FailedFetch:
    error: BaseException
    stats: dict = field(default_factory=dict)


class Fetcher:
    """Single-flight fetches from peers, warm and cold into the hot tier, as coroutines.

    Args:
        config: The node cache's configuration (``hot`` and ``prefetch`` sections are read).
        node_id: This node's id (in error messages).
        cond: The node cache's condition; waiters are woken when a fetch ends.
        catalog: The registered blocks and their cold sources.
        hot: The hot tier blocks are placed in.
        pins: The node's pin counts (a refused block is staged only while pinned).
        accounting: Where fetch outcomes and byte counts are added.
        sync: The node's link to the coordinator (holder map, warm proposals), or None.
        peer_call: Sends a call to another node's cache (:class:`~tierload.wire.api.PeerCaller`), or None.
        peer_max_bytes: Blocks longer than this (bytes) are not asked of peers; None: no limit.
    """

    def __init__(self, config: TierloadConfig, node_id: str, cond: threading.Condition, catalog: BlockCatalog,
                 hot: HotTier, pins: PinCounts, accounting: NodeAccounting, sync: CoordinatorSync | None,
                 peer_call: PeerCaller | None, peer_max_bytes: int | None = None) -> None:
        self.config = config
        self.node_id = node_id
        self._cond = cond
        self._catalog = catalog
        self._hot = hot
        self._pins = pins
        self._accounting = accounting
        self._sync = sync
        self._peer_call = peer_call
        self._peer_max_bytes = peer_max_bytes
        self._warm: BlockStore | None = None
        self.secret: bytes | None = None  # the deployment's checksum key, set by the owner's start()
        self._inflight: dict[str, _Fetch] = {}
        self._staged: dict[str, bytes] = {}
        self._failed: dict[str, _FailedFetch] = {}
        self._loop = LoopThread("tierload-fetch")
        self._slots = asyncio.Semaphore(config.prefetch.concurrency)  # bound to the loop on first use
        self._blocking = ThreadPoolExecutor(BLOCKING_THREADS, thread_name_prefix="tierload-fetch-io")
        self._done: list[_Done] = []  # touched by the loop's thread only
        self._closed = False

    def start(self, warm: BlockStore | None) -> None:
        """Read the warm tier through ``warm`` (opened by the owner) from now on."""
        self._warm = warm

    def close(self) -> None:
        """Drop queued fetches (running ones finish in the background)."""
        self._closed = True
        self._loop.stop()
        self._blocking.shutdown(wait=False)

    # --------------------------------------------------- under the node cache's lock
    def busy_with(self, key: str) -> bool:
        """Whether ``key`` is being fetched, or held in memory for a consumer."""
        return key in self._inflight or key in self._staged

    def is_staged(self, key: str) -> bool:
        """Whether ``key`` is held in memory for a consumer (the hot tier refused it)."""
        return key in self._staged

    def join(self, key: str, stream: Stream) -> bool:
        """Count ``stream``'s access of ``key`` when the fetch in flight ends: a hot hit if the hot
        tier takes the block, a staged hit if it refuses it, nothing if the fetch fails (as the
        fetch's own counted access). False, and nothing noted, when no fetch of ``key`` is in flight."""
        fetch = self._inflight.get(key)
        if fetch is None:
            return False
        fetch.joiners.append(stream)
        return True

    def submit(self, key: str, stream: Stream | None, counted: bool,
               readers: Mapping[str, str] | None = None) -> None:
        """Start fetching ``key`` for ``stream`` (``counted``: the fetch's source is a hit counter;
        ``readers``: whose credentials read it from cold when no stream asks, see
        :meth:`~tierload.node.catalog.BlockCatalog.readers_of`)."""
        self._failed.pop(key, None)
        fetch = self._inflight[key] = _Fetch(stream, counted, self._catalog.block(key), readers)
        self._loop.spawn(self._fetch, key, fetch)

    def wait_for(self, key: str, stream: Stream | None, deadline: float) -> int | bytes:
        """Wait (the lock released meanwhile) until ``key`` is hot or staged; fetch it if nobody does.

        Returns:
            The hot level that holds it, or its raw bytes when the hot tier did not admit it.

        Raises:
            TierloadError: The fetch failed.
            ServiceError: Not fetched by ``deadline`` (``time.monotonic()`` seconds).
        """
        waited = False  # whether this consumer waited for a fetch of the key (its failure is ours)
        while True:
            level = self._hot.level_of(key)
            if level is not None:
                return level
            if key in self._staged:
                return self._staged[key]
            if key not in self._inflight:
                failure = self._failed.pop(key, None)
                if failure is not None and waited:
                    raise failure.error
                self.submit(key, stream, counted=False)
            waited = True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServiceError(f"block {key} was not fetched within {ACQUIRE_TIMEOUT_S:.0f}s",
                                   where=f"node cache on node {self.node_id}")
            self._cond.wait(min(remaining, 1.0))

    def wait_for_finished_tallies(self, timeout_s: float) -> None:
        """Wait (the lock released meanwhile) up to ``timeout_s`` seconds until no fetch done for
        a finished stream still owes it its tally.

        A fetch places its block in the hot tier before it hands back its tally; a consumer
        that reads the block there at once may finish the stream in between, and a reader of
        that epoch's counters right after would miss the fetch's cold GET.
        """
        deadline = time.monotonic() + timeout_s
        while any(fetch.block is not None and any(stream is not None and stream.finished
                                                  for stream in (fetch.stream, *fetch.joiners))
                  for fetch in self._inflight.values()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._cond.wait(remaining)

    def release(self, key: str) -> None:
        """Drop one pin; a block nobody needs any more leaves memory if the hot tier refused it."""
        if self._pins.unpin(key):
            self._staged.pop(key, None)

    def discard(self, key: str) -> None:
        """Forget a staged copy of ``key`` (its source changed)."""
        self._staged.pop(key, None)

    def stats(self) -> dict[str, int]:
        """``inflight`` fetches and ``staged_bytes`` held for consumers."""
        return {"inflight": len(self._inflight), "staged_bytes": sum(len(v) for v in self._staged.values())}

    # ----------------------------------------------------- on the fetch loop's thread
    async def _fetch(self, key: str, fetch: _Fetch) -> None:
        async with self._slots:
            if self._closed or fetch.block is None:
                return
            tally: Counter = Counter()
            started = time.perf_counter()
            try:
                found = await self._read_above_cold(key, fetch.block, tally)
                level = None if found is not None else await self._stream_from_cold(key, fetch.block, tally,
                                                                                    _readers(fetch))
                if level is not None:
                    raw, source = b"", "cold"
                    seconds = time.perf_counter() - started  # the cold reads and the file writes they overlap
                else:
                    raw, digest, source = found or await self._read_cold(key, tally, _readers(fetch))
                    seconds = time.perf_counter() - started
                    level = await self._blocking_call(self._settle, key, raw, digest, source)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the block
                if not isinstance(exc, TierloadError):
                    exc = ServiceError(f"{type(exc).__name__}: {exc}", where=f"prefetch of node {self.node_id}",
                                       remote_traceback=traceback.format_exc())
                log.warning("fetch of block %s failed: %s", key, exc)
                self._finished(_Done(key, fetch, tally, error=exc))
                return
            self._finished(_Done(key, fetch, tally, raw=raw, level=level, source=source, seconds=seconds))

    async def _blocking_call(self, function: Callable, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._blocking, function, *args)

    def _finished(self, done: _Done) -> None:
        """Queue ``done``; the fetches that finish in the same turn of the loop are handed back together."""
        self._done.append(done)
        if len(self._done) == 1:
            asyncio.get_running_loop().call_soon(self._hand_back)

    def _hand_back(self) -> None:
        batch, self._done = self._done, []
        with self._cond:
            for done in batch:
                self._complete(done)
            self._cond.notify_all()

    def _complete(self, done: _Done) -> None:
        """Record one finished fetch (under the lock): staged, failed or simply no longer in flight."""
        key, fetch, tally = done.key, done.fetch, done.tally
        if done.error is not None:
            self._failed[key] = _FailedFetch(done.error)
            tally["fetch_errors"] += 1
        else:
            if done.level is None and key in self._pins:
                self._staged[key] = done.raw
            if fetch.counted:
                tally[{"warm": "warm_hits", "peer": "peer_hits", "cold": "cold_misses"}[done.source]] += 1
            self._accounting.latencies.append((done.source, done.seconds))
            if fetch.joiners and (done.level is not None or key in self._staged):
                joined = Counter(hot_hits=1) if done.level is not None else Counter(staged_hits=1)
                for stream in fetch.joiners:
                    self._accounting.tally(stream, joined)
        self._accounting.tally(fetch.stream, tally)
        self._inflight.pop(key, None)

    # --------------------------------------------------------------- fetch steps
    def _settle(self, key: str, raw: bytes, digest: int, source: str) -> int | None:
        """Place a fetched block (blocking: writes the hot tier); its level, or None if it stays out."""
        level = self._place(key, raw, digest, source)
        if source == "cold" and self._sync is not None:
            # Offered before the fetch leaves the in-flight table, so whoever waits for the fetch
            # and then syncs (sync_now) is sure the offer travels with that sync.
            self._sync.offer_fetched(key, raw, digest)
        return level

    def _read_from_peer(self, key: str, tally: Counter) -> tuple[bytes, int] | None:
        """The block from another node's hot tier, if one holds it and answers in time."""
        if self._sync is None or self._peer_call is None:
            return None
        for node in self._sync.holders_of(key):
            try:
                answer = self._peer_call(node, self.config.hot.peer_timeout_s, NodeCacheServiceAPI.read_block, key)
            except Exception as exc:  # noqa: BLE001 - a dead or stuck peer: fall back, never hang
                log.warning("peer node %s did not serve block %s (%s: %s); not asking it again", node, key,
                            type(exc).__name__, exc)
                self._sync.report_lost(node)
                tally["peer_errors"] += 1
                continue
            if answer is None:
                continue  # the peer evicted it since the holder map was updated
            try:
                # verified once; a raw frame's payload as-is
                raw, digest = decode_frame(key, answer, secret=self.secret)
            except IntegrityError:
                tally["integrity_failures"] += 1
                log.warning("block %s from peer %s failed its checksum; not used", key, node)
                continue
            tally["peer_bytes"] += len(answer) - HEADER_SIZE
            return raw, digest
        return None

    def read_above_cold(self, block: Block, tally: Counter) -> tuple[bytes, int, str] | None:
        """``block`` from a peer's hot tier (when a peer may send it) or the warm tier, blocking, not
        placed anywhere: ``(raw, checksum, source)``, or None when neither holds it (call without the lock)."""
        peers = self._peers_may_serve(block)
        if self._may_be_above_cold(block.key, peers):
            return self._read_peer_or_warm(block.key, tally, peers)
        return None

    def _read_peer_or_warm(self, key: str, tally: Counter, peers: bool = True) -> tuple[bytes, int, str] | None:
        """Peer hot tiers first (if ``peers``), then warm (blocking): ``(raw, checksum, source)``, or None."""
        from_peer = self._read_from_peer(key, tally) if peers else None
        if from_peer is not None:
            return from_peer[0], from_peer[1], "peer"
        if self._warm is None:
            return None
        try:
            stored = self._warm.read(key)
        except KeyError:
            return None
        except BackendError as exc:
            log.warning("warm tier read of %s failed (%s); reading cold", key, exc)
            return None
        try:
            raw, digest = decode_frame(key, stored, secret=self.secret)
        except IntegrityError:
            log.warning("warm copy of %s failed its checksum; dropped, reading cold", key)
            tally["integrity_failures"] += 1
            if self._sync is not None:
                self._sync.drop_warm(key)
            return None
        tally["warm_bytes"] += len(stored)
        return raw, digest, "warm"

    def _may_be_above_cold(self, key: str, peers: bool) -> bool:
        has_peers = peers and self._sync is not None and self._peer_call is not None and bool(
            self._sync.holders_of(key))
        return has_peers or self._warm is not None

    def _peers_may_serve(self, block: Block) -> bool:
        """Whether a peer may send ``block``: its answer would pass whole through Ray's object store."""
        return self._peer_max_bytes is None or block.length <= self._peer_max_bytes

    async def _read_above_cold(self, key: str, block: Block, tally: Counter) -> tuple[bytes, int, str] | None:
        """Peer hot tiers first, then warm: ``(raw, checksum, source)``, or None when neither has it."""
        peers = self._peers_may_serve(block)
        if self._may_be_above_cold(key, peers):
            return await self._blocking_call(self._read_peer_or_warm, key, tally, peers)
        return None

    async def _read_cold(self, key: str, tally: Counter,
                         readers: Mapping[str, str] | None = None) -> tuple[bytes, int, str]:
        """The whole block from cold, with ``readers``' credentials: ``(raw, checksum, "cold")``."""
        raw = await self._catalog.read_cold_async(key, tally, readers)
        return raw, checksum(raw, self.secret), "cold"

    async def _stream_from_cold(self, key: str, block: Block, tally: Counter,
                                readers: Mapping[str, str] | None = None) -> int | None:
        """A large block straight from cold into a hot level's file, a request at a time
        (:mod:`tierload.node.streamed_fetch`); its level, or None when it is not streamed.

        Called once peers and warm were found not to hold it. Not streamed: packs, blocks of one
        request or less, and blocks no hot level takes (they are handed to consumers from
        memory). A level that refuses the file's writes (full, read-only) is paused as for any
        write, and the block is read whole instead.

        Raises:
            TierloadError: The cold read failed for good (no partial file is left).
        """
        if not streams(block, self.config.cold.max_request_bytes):
            return None
        size = frame_size(block)
        reserved = await self._blocking_call(self._hot.reserve_file, key, size)
        if reserved is None:
            return None
        index, temp = reserved
        try:
            await stream_block_to_file(self._catalog.source_of(key, readers), block, temp, self.secret, tally,
                                       self._blocking_call, shared=self.config.hot.shared)
        except OSError as exc:
            if isinstance(exc, TierloadError):  # the cold read failed (tierload's errors are OSErrors too)
                await self._blocking_call(self._hot.abort_file, index, key, temp)
                raise
            refusal = BackendError(f"cannot write block to the hot tier: {exc}", tier="hot", key=key)
            refusal.__cause__ = exc  # its errno says whether the level is full or read-only
            await self._blocking_call(self._hot.abort_file, index, key, temp, refusal)
            log.warning("streaming block %s into the hot tier failed (%s); reading it whole", key, exc)
            return None
        except BaseException:
            await asyncio.shield(self._blocking_call(self._hot.abort_file, index, key, temp))
            raise
        if not await self._blocking_call(self._hot.install_file, index, key, temp, size):
            return None
        if self._sync is not None:
            await self._blocking_call(self._sync.offer_frame_file, key, self._hot.levels[index].store.path(key), size)
        return index

    def _place(self, key: str, raw: bytes, digest: int, source: str) -> int | None:
        """Admit a fetched block into the hot tier; its level, or None if it stays out.

        A block served by a peer stays there (the cluster holds it once) unless this node
        reads it often enough to earn its own copy (``hot.peer_copy_min_count``).
        """
        counter = self._accounting.accesses.counter
        if source == "peer" and counter.at_last_access(key) < self.config.hot.peer_copy_min_count:
            return None
        return self._hot.place(key, raw, digest)
