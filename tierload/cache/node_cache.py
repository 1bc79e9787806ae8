"""The node cache: one per node, owns that node's hot tier.

It takes the planned block sequence of every rank on its node (a :class:`Stream` per rank
and epoch), fetches ahead of the training loop (at most ``prefetch.depth_blocks`` blocks and
``prefetch.depth_bytes`` bytes per stream, ``prefetch.concurrency`` fetches at once), and
admits fetched blocks into the hot tier's levels (RAM, then disk) by policy. A block the hot
tier refuses is held in memory until its planned use and handed over the local channel,
zstd-compressed. Fetches go to the warm tier first, then cold; each block is fetched once
however many consumers wait for it (single flight).

Consumers read hot blocks straight from the files; they tell the cache how far they got in
batched one-way calls, and ask for a block only when it is not there.

This is a plain class; :mod:`tierload.cache.runtime` makes it a Ray actor pinned to its node.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
import traceback
from collections import Counter, defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from tierload.blockfile import HEADER_SIZE, FrameFormat, decode_frame, encode_frame, parse_header, recode
from tierload.blocks import Block
from tierload.cache.channel import ChannelServer
from tierload.cache.coordinator_sync import CoordinatorSync
from tierload.cache.endpoint import channel_address, publish_endpoint
from tierload.cache.hot_tier import HotTier
from tierload.cache.messages import BlockTable, DatasetRegistration, Endpoint, StreamPlan
from tierload.cache.oracle import PlanOracle
from tierload.cache.stats import new_stats
from tierload.cache.stream import Stream
from tierload.checksum import checksum
from tierload.config import TierloadConfig, as_config
from tierload.errors import BackendError, IntegrityError, ServiceError, StreamNotOpenError, TierloadError
from tierload.policies.frequency import DecayingCounter
from tierload.stores.cold import ColdSource
from tierload.stores.registry import open_store

log = logging.getLogger(__name__)

ACQUIRE_TIMEOUT_S = 600.0
RECORD_LIMIT = 10_000_000  # accesses a trace recording keeps at most
# What consumers on this node may call over the local channel (nothing else is served there).
CHANNEL_METHODS = frozenset({"ready", "endpoint", "has_dataset", "register_dataset", "open_stream", "progress",
                             "close_consumer", "acquire", "invalidate", "record_trace", "sync_now", "stats",
                             "stream_stats"})
# What tierload's own actors and the CLI may call through Ray: the channel's methods, serving peers,
# and running the deployment.
ACTOR_METHODS = CHANNEL_METHODS | {"read_block", "set_policy", "close"}


@dataclass
class _Dataset:
    blocks: list[Block]
    source: ColdSource


@dataclass
class _Fetch:
    stream: Stream | None
    counted: bool


@dataclass
class _FailedFetch:
    error: BaseException
    stats: dict = field(default_factory=dict)


class NodeCache:
    """Owns one node's hot tier; prefetches, admits, evicts and counts.

    Args:
        config: The effective configuration (dict or :class:`TierloadConfig`).
        node_id: This node's id (Ray node id, or any name outside Ray).
        coordinator_call: ``call(method, *args)`` reaching the coordinator, or None to run
            alone (no warm tier, no peers).
        peer_call: ``peer_call(node_id, method, *args, timeout_s=...)`` reaching another node's
            cache, or None (no peer transfer).
    """

    def __init__(self, config: dict | TierloadConfig, node_id: str = "local",
                 coordinator_call: Callable | None = None, peer_call: Callable | None = None) -> None:
        self.config = as_config(config)
        self.node_id = node_id
        self._cond = threading.Condition(threading.RLock())
        self._closing = False
        policy = self.config.policy
        self._counter = DecayingCounter(policy.decay.half_life)
        self._datasets: dict[str, _Dataset] = {}
        self._blocks: dict[str, Block] = {}
        self._key_owners: dict[str, list[tuple[str, int]]] = defaultdict(list)
        self._streams: dict[str, Stream] = {}
        self._streams_by_dataset: dict[str, list[Stream]] = defaultdict(list)
        self._peer_call = peer_call
        self._coordinator_call = coordinator_call
        self._warm = open_store(self.config.warm.url, "warm") if (self.config.warm.url and coordinator_call) else None
        self._sync = None
        if coordinator_call is not None:
            self._sync = CoordinatorSync(node_id, coordinator_call, self._collect_for_sync, self._now, self._warm,
                                         self.config.wire.zstd_level if self.config.warm.compress else None)
        self._hot = HotTier(self.config, self.hot_dir, self._counter,
                            PlanOracle(self._key_owners, self._streams_by_dataset), self._cond, self._now,
                            offer_warm=self._sync.offer_warm if self._warm is not None else None,
                            in_warm=lambda key: key in self._sync.known_warm)
        self._pins = self._hot.pins
        self._ghosts: dict[str, Stream] = {}  # closed streams whose look-ahead still informs eviction
        self._last_active: dict[str, float] = {}
        self._inflight: dict[str, _Fetch] = {}
        self._staged: dict[str, bytes] = {}
        self._failed: dict[str, _FailedFetch] = {}
        self._pending_counts: Counter = Counter()
        self._recording: list[tuple[str, int, int]] | None = None  # (key, bytes, epoch) when recording
        self._now_value = 0.0
        self._stats = new_stats()
        self._finished: deque = deque(maxlen=512)
        self._pool = ThreadPoolExecutor(self.config.prefetch.concurrency, thread_name_prefix="tierload-fetch")
        self._hot.recover()
        self._address = channel_address(node_id, self.hot_dir)
        self._authkey = secrets.token_bytes(32)
        publish_endpoint(self._hot.dirs[-1], self.endpoint())
        self._server = ChannelServer(self, self._address, self._authkey, where=f"node cache on node {node_id}",
                                     methods=CHANNEL_METHODS)
        self._scheduler = threading.Thread(target=self._schedule_loop, name="tierload-prefetch", daemon=True)
        self._scheduler.start()
        if self._sync is not None:
            self._sync.start()

    # ----------------------------------------------------------------- set-up
    @property
    def hot_dir(self) -> str:
        """This node's hot directory (``{node}`` in ``hot.dir`` replaced by the node id)."""
        return self.config.hot.dir.replace("{node}", self.node_id[:16])

    # ------------------------------------------------------------ Ray / channel API
    def ready(self) -> bool:
        """Cheap liveness probe."""
        return True

    def endpoint(self) -> Endpoint:
        """Where consumers on this node find the cache: channel address, key and hot directories."""
        return Endpoint(self._address, self._authkey, self.node_id, tuple(str(d) for d in self._hot.dirs),
                        os.getpid())

    def has_dataset(self, dataset_id: str) -> bool:
        with self._cond:
            return dataset_id in self._datasets

    def register_dataset(self, registration: DatasetRegistration) -> None:
        """Tell the cache the blocks of a dataset (once per dataset; idempotent).

        Raises:
            MessageError: ``registration`` is not a :class:`DatasetRegistration` of this release.
        """
        registration = DatasetRegistration.received(registration)
        dataset_id = registration.dataset_id
        blocks = BlockTable.received(registration.blocks).blocks()
        source = ColdSource(registration.cold, self.config.cold)
        with self._cond:
            if dataset_id in self._datasets:
                return
            self._datasets[dataset_id] = _Dataset(blocks, source)
            for index, block in enumerate(blocks):
                self._blocks[block.key] = block
                self._key_owners[block.key].append((dataset_id, index))

    def open_stream(self, stream_id: str, consumer: int, num_consumers: int,
                    plan: StreamPlan | None = None) -> bool:
        """Join (or create, when ``plan`` is given) the stream of a rank's epoch.

        Args:
            stream_id: Unique per (dataset, epoch, rank, iteration).
            consumer: DataLoader worker id within the rank.
            num_consumers: DataLoader workers of the rank.
            plan: The stream's :class:`StreamPlan`; needed only to create it.

        Returns:
            False if the stream does not exist and no plan was given (call again with it).

        Raises:
            ServiceError: The plan names a dataset that was never registered.
            MessageError: ``plan`` is not a :class:`StreamPlan` of this release.
        """
        if plan is not None:
            plan = StreamPlan.received(plan)
        if plan is not None and self._sync is not None:
            try:
                self._sync.flush()  # an up-to-date holder map before the epoch's first fetches
            except Exception:  # noqa: BLE001 - the periodic sync retries; prefetching may start
                log.warning("sync with the coordinator before opening %s failed", stream_id, exc_info=True)
        with self._cond:
            stream = self._streams.get(stream_id)
            if stream is None:
                if plan is None:
                    return False
                dataset = self._datasets.get(plan.dataset_id)
                if dataset is None:
                    raise ServiceError(f"dataset {plan.dataset_id} is not registered with this node cache")
                stream = Stream(stream_id, plan.dataset_id, plan.epoch, plan.seq, plan.consume_len,
                                num_consumers, len(dataset.blocks), plan.reuse_gap, plan.start)
                stream.stats = new_stats()
                stream.lineage = plan.lineage or stream_id
                self._forget_ghost(stream.lineage)
                self._streams[stream_id] = stream
                self._streams_by_dataset[stream.dataset_id].append(stream)
            self._last_active[stream_id] = time.monotonic()
            self._cond.notify_all()
            return True

    def progress(self, stream_id: str, consumer: int, position: int) -> None:
        """``consumer`` has consumed every position before ``position`` (one-way call)."""
        with self._cond:
            stream = self._streams.get(stream_id)
            if stream is not None:
                self._advance(stream, consumer, position)

    def close_consumer(self, stream_id: str, consumer: int) -> None:
        """``consumer`` is done with the stream (end of epoch, or the iterator was closed)."""
        with self._cond:
            stream = self._streams.get(stream_id)
            if stream is not None:
                self._advance(stream, consumer, stream.consume_len)

    def acquire(self, stream_id: str, consumer: int, position: int,
                corrupt_key: str | None = None) -> tuple[str, Any]:
        """Make the block at ``position`` available and say where it is.

        Args:
            stream_id, consumer: As given to :meth:`open_stream`.
            position: The position the consumer needs now (everything before is consumed).
            corrupt_key: A hot block the consumer found corrupt: it is dropped and refetched.

        Returns:
            ``("hot", level_index)`` when the block is in the hot tier (read the file), or
            ``("wire", frame)`` with the block's frame (:mod:`tierload.blockfile`, zstd where
            that pays) when the hot tier did not admit it.

        Raises:
            TierloadError: The fetch failed (e.g. SourceChangedError, EndpointUnreachableError).
            ServiceError: Unknown stream, or no answer within the timeout.
        """
        deadline = time.monotonic() + ACQUIRE_TIMEOUT_S
        with self._cond:
            stream = self._streams.get(stream_id)
            if stream is None:
                raise StreamNotOpenError(f"stream {stream_id} is not open on this node cache (expired after "
                                         f"{self.config.prefetch.stream_idle_timeout_s:g}s idle, or the cache "
                                         "restarted)")
            self._last_active[stream_id] = time.monotonic()
            if corrupt_key is not None:
                self._drop_corrupt(corrupt_key, stream)
            self._advance(stream, consumer, position)
            run = stream.run_of(position)
            while stream.next_run <= run:
                self._schedule(stream, stream.next_run)
            key = self._datasets[stream.dataset_id].blocks[int(stream.run_block[run])].key
            # Pin while waiting: a run that skip_to passed was never pinned, and an unpinned block the
            # hot tier refuses is not staged, so without this pin it would be fetched again forever.
            self._pins[key] += 1
            try:
                while True:
                    level = self._hot.level_of(key)
                    if level is not None:
                        return ("hot", level)
                    if key in self._staged:
                        raw = self._staged[key]
                        break
                    if key not in self._inflight:
                        failure = self._failed.pop(key, None)
                        if failure is not None:
                            raise failure.error
                        self._submit(key, stream, counted=False)
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise ServiceError(f"block {key} was not fetched within {ACQUIRE_TIMEOUT_S:.0f}s",
                                           where=f"node cache on node {self.node_id}")
                    self._cond.wait(min(remaining, 1.0))
            finally:
                self._unpin(key)
        # The staged bytes are the ones fetched and checked; the frame carries their checksum anew.
        frame = encode_frame(key, raw, fmt=FrameFormat(self.config.wire.zstd_level, self.config.wire.min_ratio))
        with self._cond:
            for target in (self._stats, stream.stats):
                target["wire_raw_bytes"] += len(raw)
                target["wire_sent_bytes"] += len(frame) - HEADER_SIZE
        return ("wire", frame)

    def invalidate(self, keys: list[str]) -> int:
        """Drop these blocks from the hot tier and the warm tier (e.g. their source changed).

        Returns:
            How many copies were dropped (hot and warm together).
        """
        dropped = 0
        with self._cond:
            for key in keys:
                dropped += self._hot.drop(key)
                self._staged.pop(key, None)
        if self._coordinator_call is not None and keys:
            dropped += self._coordinator_call("invalidate", list(keys))
            self._sync.known_warm.difference_update(keys)
        return dropped

    def read_block(self, key: str) -> bytes | None:
        """Serve a hot block to a peer node: its frame, or None if not held here.

        The frame is sent as stored in the hot tier's file, its checksum carried; a raw one is
        zstd-compressed first when that pays (``wire.min_ratio``).
        """
        stored = self._hot.read_frame(key)
        if stored is None:
            return None
        frame = recode(key, stored, FrameFormat(self.config.wire.zstd_level, self.config.wire.min_ratio))
        header = parse_header(key, frame)
        with self._cond:
            self._stats["peer_served"] += 1
            self._stats["wire_raw_bytes"] += header.raw_size
            self._stats["wire_sent_bytes"] += header.stored_size
        return frame

    def set_policy(self, policy: dict) -> dict:
        """Switch the hot tier's policy while running; it decides from the next admission on.

        Args:
            policy: A ``policy:`` section (validated again here).

        Returns:
            The policy now in force (defaults filled in).

        Raises:
            ConfigError: The policy is invalid; the old one stays in force.
        """
        new = as_config({**self.config.to_dict(), "policy": policy}).policy
        with self._cond:
            self.config = self.config.model_copy(update={"policy": new})
            self._counter.half_life = new.decay.half_life
            self._hot.replace_policy(new.hot)
        log.info("hot-tier policy is now %s", new.hot.eviction)
        return new.model_dump(mode="json")

    def record_trace(self, enabled: bool) -> list[tuple[str, int, int]]:
        """Start (or stop) recording every counted block access: ``(key, stored_bytes, epoch)`` in
        the order the tiers saw them, for ``tierload policy simulate --trace``.

        Returns:
            The accesses recorded since recording started (empty when starting).
        """
        with self._cond:
            recorded = self._recording or []
            self._recording = [] if enabled else None
            return recorded

    def sync_now(self) -> None:
        """Exchange state with the coordinator now (e.g. before a new epoch's first fetches)."""
        if self._sync is not None:
            self._sync.flush()

    def stats(self) -> dict[str, Any]:
        """Counters, per-level usage, open streams and the last closed streams."""
        with self._cond:
            result = {
                "node_id": self.node_id,
                "counters": dict(self._stats),
                "levels": self._hot.stats(),
                "inflight": len(self._inflight),
                "threads": threading.active_count(),
                "pid": os.getpid(),
                "staged_bytes": sum(len(v) for v in self._staged.values()),
                "streams": [self._stream_stats(s) for s in self._streams.values()],
                "finished_streams": list(self._finished),
            }
        if self._sync is not None:
            result["sync"] = dict(self._sync.stats)
        return result

    def stream_stats(self, dataset_id: str | None = None) -> list[dict]:
        """Stats of open and recently closed streams, optionally of one dataset."""
        with self._cond:
            rows = [self._stream_stats(s) for s in self._streams.values()] + list(self._finished)
        return [row for row in rows if dataset_id is None or row["dataset_id"] == dataset_id]

    def close(self) -> None:
        """Stop serving (files in the hot tier stay for the next start)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._server.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._sync is not None:
            self._sync.close()

    # ------------------------------------------------------------- internals
    def _now(self) -> float:
        """The decay clock: seconds, or the highest epoch any open stream is in.

        Epoch time is whole epochs: within an epoch, a block read early must not look more
        frequent than one read late, or equal-frequency blocks churn as under LRU.
        """
        if self.config.policy.decay.unit == "second":
            return time.time()
        with self._cond:
            for stream in self._streams.values():
                self._now_value = max(self._now_value, float(stream.epoch))
            return self._now_value

    def _collect_for_sync(self, full: bool) -> tuple[dict, list[str], list[str], list[str] | None]:
        """Counts and residency changes since the last sync (and all resident keys if ``full``)."""
        with self._cond:
            counts, self._pending_counts = dict(self._pending_counts), Counter()
            added, removed = self._hot.take_dirty()
            everything = self._hot.resident_keys() if full else None
        return counts, added, removed, everything

    def _stream_stats(self, stream: Stream) -> dict:
        return {"stream_id": stream.stream_id, "dataset_id": stream.dataset_id, "epoch": stream.epoch,
                "cursor": stream.cursor, "consume_len": stream.consume_len, "finished": stream.finished,
                **dict(stream.stats)}

    def _schedule_loop(self) -> None:
        depth = self.config.prefetch
        while True:
            with self._cond:
                if self._closing:
                    return
                progressed = True
                while progressed:  # one run per stream per pass: fair between ranks
                    progressed = False
                    for stream in list(self._streams.values()):
                        # Only this epoch's runs are prefetched; the look-ahead part of the plan
                        # serves the clairvoyant policy's view of what is needed next.
                        if (stream.next_run < stream.consume_runs and len(stream.scheduled) < depth.depth_blocks
                                and stream.window_bytes < depth.depth_bytes):
                            self._schedule(stream, stream.next_run)
                            progressed = True
                self._expire_idle()
                self._cond.wait(0.05)

    def _expire_idle(self) -> None:
        now = time.monotonic()
        timeout_s = self.config.prefetch.stream_idle_timeout_s
        for stream_id, stream in list(self._streams.items()):
            if now - self._last_active.get(stream_id, now) > timeout_s:
                log.info("closing stream %s: no consumer activity for %gs", stream_id, timeout_s)
                self._close_stream(stream)

    def _block_of_run(self, stream: Stream, run: int) -> Block:
        return self._datasets[stream.dataset_id].blocks[int(stream.run_block[run])]

    def _count_access(self, stream: Stream, key: str, outcome: str | None) -> None:
        now = self._now()
        if self._recording is not None and len(self._recording) < RECORD_LIMIT:
            self._recording.append((key, self._blocks[key].length + HEADER_SIZE, stream.epoch))
        self._counter.add(key, now)
        for level in self._hot.levels:
            level.index.policy.on_access(key, now)
        self._pending_counts[key] += 1
        for target in (self._stats, stream.stats):
            target["accesses"] += 1
            if outcome:
                target[outcome] += 1

    def _schedule(self, stream: Stream, run: int) -> None:
        block = self._block_of_run(stream, run)
        key = block.key
        counted = stream.counted(run)
        stream.mark_scheduled(run)
        self._pins[key] += 1
        stream.window_bytes += block.length
        present = self._hot.level_of(key) is not None or key in self._inflight or key in self._staged
        if counted:
            self._count_access(stream, key, "hot_hits" if present else None)
        if not present:
            self._submit(key, stream, counted)

    def _submit(self, key: str, stream: Stream | None, counted: bool) -> None:
        self._failed.pop(key, None)
        self._inflight[key] = _Fetch(stream, counted)
        self._pool.submit(self._fetch, key)

    def _release(self, stream: Stream, run: int) -> None:
        block = self._block_of_run(stream, run)
        stream.window_bytes -= block.length
        self._unpin(block.key)

    def _unpin(self, key: str) -> None:
        """Drop one pin; a block nobody needs any more leaves memory if the hot tier refused it."""
        if self._pins[key] <= 1:
            del self._pins[key]
            self._staged.pop(key, None)
        else:
            self._pins[key] -= 1

    def _advance(self, stream: Stream, consumer: int, position: int) -> None:
        for run in stream.set_cursor(consumer, position):
            self._release(stream, run)
        cursor = stream.cursor
        target = stream.run_of(cursor) if cursor < stream.consume_len else stream.consume_runs
        for run in stream.skip_to(target):
            if stream.counted(run):
                self._count_access(stream, self._block_of_run(stream, run).key, "hot_hits")
        self._last_active[stream.stream_id] = time.monotonic()
        if stream.finished:
            self._close_stream(stream)
        self._cond.notify_all()

    def _close_stream(self, stream: Stream) -> None:
        for run in stream.drain():
            self._release(stream, run)
        self._streams.pop(stream.stream_id, None)
        self._last_active.pop(stream.stream_id, None)
        self._finished.append(self._stream_stats(stream))
        if stream.num_runs > stream.consume_runs:
            # Keep the look-ahead (the next epoch's order) visible to the clairvoyant policy until
            # that epoch's stream opens; otherwise every block looks unneeded between epochs.
            stream.next_run = stream.consume_runs
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

    def _drop_corrupt(self, key: str, stream: Stream) -> None:
        if self._hot.drop(key):
            log.warning("hot block %s failed its checksum on read; dropped, refetching", key)
            for target in (self._stats, stream.stats):
                target["integrity_failures"] += 1

    # -------------------------------------------------------------- fetching
    def _fetch(self, key: str) -> None:
        with self._cond:
            fetch = self._inflight.get(key)
            block = self._blocks.get(key)
        if fetch is None or block is None:
            return
        tally: Counter = Counter()
        try:
            raw, digest, source = self._read_lower_tiers(key, block, tally)
            level = self._place(key, raw, digest, source)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the block
            if not isinstance(exc, TierloadError):
                exc = ServiceError(f"{type(exc).__name__}: {exc}", where=f"prefetch thread of node {self.node_id}",
                                   remote_traceback=traceback.format_exc())
            log.warning("fetch of block %s failed: %s", key, exc)
            with self._cond:
                self._inflight.pop(key, None)
                self._failed[key] = _FailedFetch(exc)
                tally["fetch_errors"] += 1
                self._add_tally(fetch, tally)
                self._cond.notify_all()
            return
        with self._cond:
            if level is None and self._pins.get(key):
                self._staged[key] = raw
            if fetch.counted:
                tally[{"warm": "warm_hits", "peer": "peer_hits", "cold": "cold_misses"}[source]] += 1
            self._add_tally(fetch, tally)
            self._inflight.pop(key, None)
            self._cond.notify_all()
        if source == "cold" and self._sync is not None:
            self._sync.offer_fetched(key, raw, digest)

    def _add_tally(self, fetch: _Fetch, tally: Counter) -> None:
        self._stats.update(tally)
        if fetch.stream is not None:
            fetch.stream.stats.update(tally)

    def _read_from_peer(self, key: str, tally: Counter) -> tuple[bytes, int] | None:
        """The block from another node's hot tier, if one holds it and answers in time."""
        if self._sync is None or self._peer_call is None:
            return None
        for node in self._sync.holders_of(key):
            try:
                answer = self._peer_call(node, "read_block", key, timeout_s=self.config.hot.peer_timeout_s)
            except Exception as exc:  # noqa: BLE001 - a dead or stuck peer: fall back, never hang
                log.warning("peer node %s did not serve block %s (%s: %s); not asking it again", node, key,
                            type(exc).__name__, exc)
                self._sync.report_lost(node)
                tally["peer_errors"] += 1
                continue
            if answer is None:
                continue  # the peer evicted it since the holder map was updated
            try:
                raw, digest = decode_frame(key, answer)  # verified once; a raw frame's payload as-is
            except IntegrityError:
                tally["integrity_failures"] += 1
                log.warning("block %s from peer %s failed its checksum; not used", key, node)
                continue
            tally["peer_bytes"] += len(answer) - HEADER_SIZE
            return raw, digest
        return None

    def _read_lower_tiers(self, key: str, block: Block, tally: Counter) -> tuple[bytes, int, str]:
        """Peer hot tiers first, then warm, then cold: returns ``(raw, checksum, source)``."""
        from_peer = self._read_from_peer(key, tally)
        if from_peer is not None:
            return from_peer[0], from_peer[1], "peer"
        if self._warm is not None:
            try:
                stored = self._warm.read(key)
            except KeyError:
                stored = None
            except BackendError as exc:
                log.warning("warm tier read of %s failed (%s); reading cold", key, exc)
                stored = None
            if stored is not None:
                try:
                    raw, digest = decode_frame(key, stored)
                    tally["warm_bytes"] += len(stored)
                    return raw, digest, "warm"
                except IntegrityError:
                    log.warning("warm copy of %s failed its checksum; dropped, reading cold", key)
                    tally["integrity_failures"] += 1
                    self._sync.drop_warm(key)
        owners = self._key_owners[key]
        source = self._datasets[owners[0][0]].source
        raw = source.read(block.url, block.version, block.offset, block.length, tally=tally)
        return raw, checksum(raw), "cold"

    def _place(self, key: str, raw: bytes, digest: int, source: str) -> int | None:
        """Admit a fetched block into the hot tier; its level, or None if it stays out.

        A block served by a peer stays there (the cluster holds it once) unless this node
        reads it often enough to earn its own copy (``hot.peer_copy_min_count``).
        """
        if source == "peer" and self._counter.at_last_access(key) < self.config.hot.peer_copy_min_count:
            return None
        return self._hot.place(key, raw, digest)
