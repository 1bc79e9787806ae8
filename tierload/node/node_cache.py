"""The node cache: one per node, owns that node's hot tier.

It takes the planned block sequence of every rank on its node (a :class:`Stream` per rank
and epoch), fetches ahead of the training loop, and admits fetched blocks into the hot
tier's levels (RAM, then disk) by policy; a block the hot tier refuses is held in memory
until its planned use and handed over the local channel, zstd-compressed. Consumers read hot
blocks straight from the files, report progress in batched one-way calls, and ask for a
block only when it is not there.

This class is a facade over parts with one job each, sharing the one lock it owns:
:mod:`~tierload.node.stream_table` (open streams, prefetch scheduling),
:mod:`~tierload.node.fetcher` (single flight; peer, warm and cold reads; placement),
:mod:`~tierload.node.accounting` (access counts, trace recording, stats) and
:mod:`~tierload.node.hot_tier`; a :class:`~tierload.policies.counts.PinCounts` is the one owner of
pins. The constructor does no I/O; :meth:`NodeCache.start` does. :mod:`tierload.deploy.runtime`
makes it a Ray actor pinned to its node.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence

from tierload.config.loading import as_config
from tierload.config.models import TierloadConfig
from tierload.data.blocks import Block
from tierload.errors import MessageError, ServiceError
from tierload.frames.blockfile import HEADER_SIZE, FrameFormat, encode_frame, parse_header, recode
from tierload.frames.checksum_key import adopt_key
from tierload.metrics.exporter import PeriodicExporter
from tierload.metrics.samples import LeadClock, Sample, node_samples, rank_samples
from tierload.node.access import AccessGate, require_owner
from tierload.node.coordinator_sync import CoordinatorSync
from tierload.node.fetcher import ACQUIRE_TIMEOUT_S, TALLY_WAIT_S
from tierload.node.key_index import KeyIndex
from tierload.node.ownership import TierOwnership, owner_record, sharing_terms
from tierload.node.parts import node_parts
from tierload.node.plan_expansion import expanded_plan
from tierload.node.sample_reads import SampleReads
from tierload.node.stream import Stream
from tierload.stores.cold.identity import identity_of
from tierload.stores.cold.source import ColdSource
from tierload.stores.control_dir import control_dir
from tierload.stores.tier_writes import open_warm_or_none
from tierload.wire.api import Caller, CoordinatorAPI, NodeCacheAPI, NodeCacheServiceAPI, PeerCaller
from tierload.wire.channel import ChannelServer
from tierload.wire.endpoint import channel_address, clear_stale_endpoint, publish_endpoint, withdraw_endpoint
from tierload.wire.messages import (
    BlockTable,
    DatasetRegistration,
    Endpoint,
    HotBlock,
    LoopReport,
    MemberFrame,
    SampleRead,
    SeededStreamPlan,
    StreamPlan,
    WireBlock,
)
from tierload.wire.stats import NodeStats, NodeStatus, StreamStats

if TYPE_CHECKING:
    from tierload.data.manifest import Manifest

log = logging.getLogger(__name__)


class NodeCache(NodeCacheServiceAPI):
    """Owns one node's hot tier; prefetches, admits, evicts and counts.

    Consumers on the node call it over the local channel (:class:`~tierload.wire.api.NodeCacheAPI`,
    nothing else is served there); peers, the CLI and the deployment through Ray
    (:class:`~tierload.wire.api.NodeCacheServiceAPI`).

    Args:
        config: The effective configuration (dict or :class:`TierloadConfig`).
        node_id: This node's id (Ray node id, or any name outside Ray).
        coordinator_call: Sends a :class:`~tierload.wire.api.CoordinatorAPI` call to the
            coordinator, or None to run alone (no warm tier, no peers).
        peer_call: Sends a :class:`~tierload.wire.api.NodeCacheServiceAPI` call to another node's
            cache, or None (no peer transfer).
        ray_address: The Ray cluster this cache runs in, published to other jobs with its
            ownership of the hot directory (:mod:`tierload.node.ownership`).
        peer_max_bytes: Blocks larger than this (bytes) are never read from a peer (a peer's
            answer passes whole through Ray's object store); None: no limit.
    """

    def __init__(self, config: dict | TierloadConfig, node_id: str = "local",
                 coordinator_call: Caller | None = None, peer_call: PeerCaller | None = None,
                 ray_address: str | None = None, peer_max_bytes: int | None = None) -> None:
        self.config = as_config(config)
        self.node_id = node_id
        self._ray_address = ray_address
        self._ownership: TierOwnership | None = None
        self._coordinator_call = coordinator_call
        self._has_warm = bool(self.config.warm.url and coordinator_call)
        parts = node_parts(self.config, node_id, self.hot_dir,
                           self._make_sync if coordinator_call is not None else None, warm=self._has_warm,
                           peer_call=peer_call, peer_max_bytes=peer_max_bytes)
        self._parts = parts
        self._cond = parts.cond  # the one lock; every part is handed it
        self._pins = parts.pins
        self._catalog = parts.catalog
        self._access = AccessGate()  # which jobs may be served which dataset (checked with their credentials)
        self._accounting = parts.accounting
        self._sync = parts.sync
        self._hot = parts.hot
        self._fetcher = parts.fetcher
        self._streams = parts.streams
        self._sample_reads = SampleReads(self.config, self._cond, self._catalog, self._hot, self._fetcher,
                                         self._pins, self._accounting)
        self._address = channel_address(node_id, self.hot_dir)
        self._authkey = secrets.token_bytes(32)
        self._server: ChannelServer | None = None
        self._lead_clock = LeadClock()
        # (rank, dataset id) -> [stall_s, loop_s, samples]: the loops of jobs without Ray, exported here.
        self._loops: dict[tuple[int, str], list[float]] = {}
        self._exporter: PeriodicExporter | None = None
        self._secret: bytes | None = None  # the deployment's checksum key (tierload.frames.checksum_key)

    def start(self) -> NodeCache:
        """Own the hot directory, adopt the hot tier on disk, open the warm tier, publish the
        endpoint, serve, prefetch.

        Returns:
            This cache, started.

        Raises:
            TierInUseError: Another live node cache owns the hot directory.
            BackendError: A hot or warm tier directory cannot be created.
        """
        control_dir(self.hot_dir, create=True)  # beside a read-only hot directory: its lock, endpoint, key
        self._address = channel_address(self.node_id, self.hot_dir)
        ownership = TierOwnership(self.hot_dir, owner_record(self.config, self.hot_dir, self.node_id,
                                                             self._ray_address), shared=self.config.hot.shared)
        ownership.acquire()
        self._ownership = ownership
        try:
            self._start_owned()
        except BaseException:
            self._release_ownership()
            raise
        return self

    def _start_owned(self) -> None:
        self._hot.start()
        warm = open_warm_or_none(self.config.warm.url, shared=self.config.warm.shared) if self._has_warm else None
        self._fetcher.start(warm)
        call = self._coordinator_call
        self._secret = adopt_key(warm.url if warm is not None else None, self._hot.dirs[-1],
                                 agree=(lambda offered: call(CoordinatorAPI.checksum_key, offered))
                                 if call is not None else None)
        for part in (self._hot, self._fetcher, self._sync, self._sample_reads):
            if part is not None:
                part.secret = self._secret
        clear_stale_endpoint(self._hot.dirs[-1])  # a crashed cache's endpoint file and socket
        publish_endpoint(self._hot.dirs[-1], self.endpoint())
        self._server = ChannelServer(self, self._address, self._authkey, where=f"node cache on node {self.node_id}",
                                     interface=NodeCacheAPI)
        self._streams.start()
        if self._sync is not None:
            self._sync.start(warm)
        if self.config.metrics.enabled:
            self._exporter = PeriodicExporter(self.metric_samples, f"node:{self.node_id}",
                                              self.config.metrics.export_interval_s).start()

    def _release_ownership(self) -> None:
        if self._ownership is not None:
            self._ownership.release()
            self._ownership = None

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
            return dataset_id in self._catalog

    def register_dataset(self, registration: DatasetRegistration) -> bool:
        """Tell the cache the blocks of a dataset (the first registration) and admit the registering
        job's identity to it: every job registers, and is checked once with its own credentials
        (:mod:`tierload.node.access`) before any stream of it is opened; its streams' cold reads
        use those credentials. Idempotent.

        Returns:
            False if the registration names a manifest file this cache cannot map, or one of
            another dataset (send the blocks instead); True once the dataset is known and the job
            admitted.

        Raises:
            MessageError: ``registration`` is not a :class:`DatasetRegistration` of this release.
            AccessDeniedError: The cold tier refused the job's credentials on the dataset.
            BackendError: The access check could not be made (the job is not admitted).
        """
        registration = DatasetRegistration.received(registration)
        dataset_id, identity = registration.dataset_id, identity_of(registration.cold)
        with self._cond:
            known = dataset_id in self._catalog
            source = self._catalog.source_for(dataset_id, identity) if known else None
            probe = self._catalog.first_block(dataset_id) if known else None
        blocks: Sequence[Block] = []
        mapped: Manifest | None = None
        if registration.manifest_path is not None:  # checked even when known: the caller learns the path is no good
            mapped = _mapped_manifest(registration.manifest_path, dataset_id)
            if mapped is None:
                return False
            if not known:
                blocks = mapped.blocks
        elif not known:
            blocks = BlockTable.received(registration.blocks).blocks()
            if not blocks and registration.parts:
                return False  # a mixture that sent no blocks, as the cache knew it: it restarted since
        if not known:
            probe = blocks[0] if blocks else None
        if source is None:
            source = ColdSource(registration.cold, self.config.cold)
            source.prepare()  # the client made now: the epoch's first fetch sends its GET at once
        if registration.parts:  # a mixture: its sources' own registrations were each checked
            self._access.admit_parts(dataset_id, identity, registration.parts, source.url)
        else:
            self._access.admit(dataset_id, identity, source, probe)  # AccessDeniedError: nothing is registered
        keys = KeyIndex(blocks) if not known else None  # outside the lock: 0.5 s at a million blocks
        with self._cond:
            if keys is not None:
                self._catalog.add(dataset_id, keys, source)
            if mapped is not None:
                self._catalog.keep_sample_blocks(dataset_id, mapped.samples_digest, mapped.sample_block)
            self._catalog.add_identity(dataset_id, identity, source, dict(registration.parts))
        return True

    def open_stream(self, stream_id: str, consumer: int, num_consumers: int,
                    plan: StreamPlan | SeededStreamPlan | None = None, identity: str = "") -> bool:
        """Join (or create, when ``plan`` is given) the stream of a rank's epoch.

        Args:
            stream_id: Unique per (dataset, epoch, rank, iteration).
            consumer: DataLoader worker id within the rank.
            num_consumers: DataLoader workers of the rank.
            plan: The stream's :class:`StreamPlan`, or the seeds this cache derives it from
                (:class:`SeededStreamPlan`, for a dataset registered by its manifest file);
                needed only to create the stream.
            identity: The caller's identity when no plan is given (a plan carries its own).

        Returns:
            False if the stream does not exist and no plan was given (call again with it).

        Raises:
            ServiceError: The plan names a dataset that was never registered, or a seeded plan
                one whose manifest this cache did not map (register it by file, or send the plan).
            AccessDeniedError: The plan's identity was not admitted to its dataset here, or the
                stream is open for another job's identity.
            MessageError: ``plan`` is not a :class:`StreamPlan` or :class:`SeededStreamPlan` of
                this release, or a seeded plan's settings are not an order of this release.
        """
        if plan is not None:
            plan = (SeededStreamPlan.received(plan) if isinstance(plan, SeededStreamPlan)
                    else StreamPlan.received(plan))
            identity = plan.identity
            with self._cond:
                known = plan.dataset_id in self._catalog
                url = self._catalog.first_source_url(plan.dataset_id) if known else ""
            if known:  # an unknown dataset: the stream table's ServiceError asks the job to register it
                self._access.require(plan.dataset_id, plan.identity, url)
            if isinstance(plan, SeededStreamPlan):  # derived only for an admitted job, and only once
                plan = self._expanded(stream_id, plan)
        if plan is not None and self._sync is not None:
            try:
                self._sync.flush()  # an up-to-date holder map before the epoch's first fetches
            except Exception:  # noqa: BLE001 - the periodic sync retries; prefetching may start
                log.warning("sync with the coordinator before opening %s failed", stream_id, exc_info=True)
        with self._cond:
            self._require_owner(self._streams.find(stream_id), identity)  # in the same hold as the join
            return self._streams.open(stream_id, num_consumers, plan)

    def _expanded(self, stream_id: str, seeded: SeededStreamPlan) -> StreamPlan | None:
        """The plan ``seeded`` stands for, computed over the dataset's mapped ``sample_block``
        (outside the lock: two epoch orders, ~0.1 s at a million samples); None when the stream
        is open already (another DataLoader worker of the rank created it: it is joined)."""
        with self._cond:
            if self._streams.find(stream_id) is not None:
                return None
            sample_block = (self._catalog.sample_blocks(seeded.dataset_id, seeded.samples)
                            if seeded.dataset_id in self._catalog else None)
        if sample_block is None:
            raise ServiceError(f"dataset {seeded.dataset_id} (samples {seeded.samples}) is not registered with this "
                               "node cache by its manifest file; register it, or send the StreamPlan itself")
        return expanded_plan(seeded, sample_block)

    def progress(self, stream_id: str, consumer: int, position: int, identity: str = "") -> None:
        """``consumer`` has consumed every position before ``position`` (one-way call; only from the
        stream's own job, ``identity``: another's would move what the cache keeps for it).

        Raises:
            AccessDeniedError: The stream is another job's.
        """
        with self._cond:
            self._require_owner(self._streams.find(stream_id), identity)
            self._streams.progress(stream_id, consumer, position)

    def close_consumer(self, stream_id: str, consumer: int, identity: str = "") -> None:
        """``consumer`` is done with the stream (end of epoch, or the iterator was closed); only
        from the stream's own job (``identity``).

        Raises:
            AccessDeniedError: The stream is another job's.
        """
        with self._cond:
            self._require_owner(self._streams.find(stream_id), identity)
            self._streams.close_consumer(stream_id, consumer)

    def acquire(self, stream_id: str, consumer: int, position: int,
                corrupt_key: str | None = None, identity: str = "") -> HotBlock | WireBlock:
        """Make the block at ``position`` available and say where it is.

        Args:
            stream_id, consumer: As given to :meth:`open_stream`.
            position: The position the consumer needs now (everything before is consumed).
            corrupt_key: A hot block the consumer found corrupt: it is dropped and refetched.
            identity: The caller's identity: the one the stream was opened for.

        Returns:
            :class:`HotBlock` with the hot level holding the block (read its file), or
            :class:`WireBlock` with the block's frame when the hot tier did not admit it.

        Raises:
            TierloadError: The fetch failed (e.g. SourceChangedError, EndpointUnreachableError).
            ServiceError: Unknown stream, or no answer within the timeout.
            AccessDeniedError: The stream is another job's (no bytes are served).
        """
        deadline = time.monotonic() + ACQUIRE_TIMEOUT_S
        with self._cond:
            stream = self._streams.require(stream_id)
            self._require_owner(stream, identity)
            if corrupt_key is not None:
                self._drop_corrupt(corrupt_key, stream)
            key, found = self._parts.acquire(stream, consumer, position, deadline)
            if isinstance(found, int):
                return HotBlock(found)
            raw = found
        # The staged bytes are the ones fetched and checked; the frame carries their checksum anew.
        frame = encode_frame(key, raw, fmt=FrameFormat(self.config.wire.zstd_level, self.config.wire.min_ratio),
                             secret=self._secret)
        with self._cond:
            self._accounting.tally(stream, {"wire_raw_bytes": len(raw), "wire_sent_bytes": len(frame) - HEADER_SIZE})
        return WireBlock(frame)

    def read_sample(self, request: SampleRead) -> HotBlock | WireBlock | MemberFrame:
        """One sample's block, or its pack member alone, outside any stream (``ds[i]``): see
        :mod:`tierload.node.sample_reads`.

        Raises:
            MessageError: ``request`` is not a :class:`SampleRead` of this release.
            ServiceError: The block is not registered, or no fetch ended in time.
            AccessDeniedError: The request's identity was not admitted to its dataset (no bytes).
            TierloadError: The fetch or the ranged cold read failed.
        """
        request = SampleRead.received(request)
        with self._cond:
            known = request.dataset_id in self._catalog
            url = self._catalog.first_source_url(request.dataset_id) if known else ""
        if known:  # an unknown dataset: the sample reads' ServiceError asks the job to register it
            self._access.require(request.dataset_id, request.identity, url)
        return self._sample_reads.read(request)

    def invalidate(self, keys: list[str]) -> int:
        """Drop these blocks from the hot tier and the warm tier (e.g. their source changed).

        Returns:
            How many copies were dropped (hot and warm together).
        """
        dropped = 0
        with self._cond:
            for key in keys:
                dropped += self._hot.drop(key)
                self._fetcher.discard(key)
        if self._coordinator_call is not None and self._sync is not None and keys:
            dropped += self._coordinator_call(CoordinatorAPI.invalidate, list(keys))
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
        frame = recode(key, stored, FrameFormat(self.config.wire.zstd_level, self.config.wire.min_ratio),
                       secret=self._secret)
        header = parse_header(key, frame)
        with self._cond:
            self._accounting.tally(None, {"peer_served": 1, "wire_raw_bytes": header.raw_size,
                                          "wire_sent_bytes": header.stored_size})
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
            self._accounting.set_decay(new.decay)
            self._hot.replace_policy(new.hot)
            if self._ownership is not None:  # jobs that join from now on must bring the new policy
                self._ownership.publish(replace(self._ownership.record, terms=sharing_terms(self.config, self.hot_dir)))
        log.info("hot-tier policy is now %s", new.hot.eviction)
        return new.model_dump(mode="json")

    def record_trace(self, enabled: bool) -> list[tuple[str, int, int]]:
        """Start (or stop) recording every counted block access: ``(key, stored_bytes, epoch)`` in
        the order the tiers saw them, for ``tierload policy simulate --trace``.

        Returns:
            The accesses recorded since recording started (empty when starting).
        """
        with self._cond:
            return self._accounting.record_trace(enabled)

    def sync_now(self) -> None:
        """Exchange state with the coordinator now (e.g. before a new epoch's first fetches)."""
        if self._sync is not None:
            self._sync.flush()

    def stats(self) -> NodeStats:
        """Counters, per-level usage, open streams and the last closed streams."""
        with self._cond:
            fetches = self._fetcher.stats()
            return NodeStats(node_id=self.node_id, counters=dict(self._accounting.stats),
                             levels=tuple(self._hot.stats()), inflight=fetches["inflight"],
                             threads=threading.active_count(), pid=os.getpid(), staged_bytes=fetches["staged_bytes"],
                             streams=tuple(self._streams.rows()),
                             finished_streams=tuple(self._accounting.finished_rows()),
                             sync=None if self._sync is None else dict(self._sync.stats))

    def status(self) -> NodeStatus:
        """What ``tierload status`` shows of this node: its stats and the coordinator's (the warm
        tier), or None when there is no coordinator or it does not answer."""
        coordinator = None
        if self._coordinator_call is not None:
            try:
                coordinator = self._coordinator_call(CoordinatorAPI.stats)
            except Exception:  # noqa: BLE001 - the node's own figures are still worth showing
                log.debug("the coordinator did not answer a stats call", exc_info=True)
        return NodeStatus(node=self.stats(), coordinator=coordinator)

    def metric_samples(self) -> list[Sample]:
        """This node's metrics (:mod:`tierload.metrics.catalog`) from its counters, as the exporter
        pushes them every ``metrics.export_interval_s``; drains the fetch latencies recorded since
        the last call, so only the exporter should call it (read :meth:`stats` instead)."""
        stats = self.stats()
        with self._cond:
            positions = self._streams.positions()
            latencies = self._accounting.take_latencies()
            loops = [rank_samples(rank, dataset, stall_s, loop_s, int(samples))
                     for (rank, dataset), (stall_s, loop_s, samples) in self._loops.items()]
        return node_samples(stats.to_dict(), self._lead_clock.leads(positions), latencies) + [
            item for rows in loops for item in rows]

    def report_loop(self, report: LoopReport) -> None:
        """Add what a rank's training loop measured since its last report to the totals this cache
        exports as that rank's stall metrics (for a job without Ray of its own, whose metrics would
        otherwise reach no Prometheus endpoint).

        Raises:
            MessageError: ``report`` is not a :class:`LoopReport` of this version, or a figure
                is negative.
        """
        report = LoopReport.received(report)
        if min(report.stall_s, report.loop_s, report.samples) < 0:
            raise MessageError(f"a loop report's figures must be >= 0 (increments since the last report), got {report}")
        with self._cond:
            total = self._loops.setdefault((int(report.rank), str(report.dataset_id)), [0.0, 0.0, 0])
            total[0] += report.stall_s
            total[1] += report.loop_s
            total[2] += report.samples

    def stream_stats(self, dataset_id: str | None = None) -> list[StreamStats]:
        """Stats of open and recently closed streams, optionally of one dataset; a finished
        stream's counters include the tallies of its last fetches (waited for up to
        :data:`~tierload.node.fetcher.TALLY_WAIT_S`)."""
        with self._cond:
            self._fetcher.wait_for_finished_tallies(TALLY_WAIT_S)
            rows = self._streams.rows() + self._accounting.finished_rows()
        return [row for row in rows if dataset_id is None or row.dataset_id == dataset_id]

    def close(self) -> None:
        """Stop serving (files in the hot tier stay for the next start) and withdraw the
        published endpoint, so that a keeper does not start a cache that was stopped on purpose."""
        with self._cond:
            self._streams.close()
        if self._server is not None:
            self._server.close()
            withdraw_endpoint(self._hot.dirs[-1], self.endpoint())
        self._fetcher.close()
        if self._sync is not None:
            self._sync.close()
        if self._exporter is not None:
            self._exporter.stop()
        self._release_ownership()  # last: a successor must not start while this one still writes

    # ------------------------------------------------------------- internals
    def _make_sync(self, now: Callable[[], float]) -> CoordinatorSync:
        """The link to the coordinator (only when there is one), on the decay clock ``now``."""
        assert self._coordinator_call is not None, "built only when there is a coordinator"
        return CoordinatorSync(self.node_id, self._coordinator_call, self._collect_for_sync, now, None,
                               self.config.wire.zstd_level if self.config.warm.compress else None,
                               write_retry_s=self.config.warm.write_retry_s)

    def _collect_for_sync(self, full: bool) -> tuple[dict, list[str], list[str], list[str] | None]:
        """Counts and residency changes since the last sync (and all resident keys if ``full``)."""
        with self._cond:
            counts = self._accounting.take_pending_counts()
            added, removed = self._hot.take_dirty()
            everything = self._hot.resident_keys() if full else None
        return counts, added, removed, everything

    def _require_owner(self, stream: Stream | None, identity: str) -> None:
        """Refuse a call on an open stream of another job (call under the lock; see :func:`require_owner`)."""
        if stream is not None:
            url = self._catalog.first_source_url(stream.dataset_id)
            require_owner(stream.identity, identity, stream.stream_id, url)

    def _drop_corrupt(self, key: str, stream: Stream) -> None:
        if self._hot.drop(key):
            log.warning("hot block %s failed its checksum on read; dropped, refetching", key)
            self._accounting.tally(stream, {"integrity_failures": 1})


def _mapped_manifest(path: str, dataset_id: str) -> Manifest | None:
    """The manifest file at ``path``, mapped, if it holds ``dataset_id``; else None."""
    from tierload.data.manifest import open_manifest

    try:
        manifest = open_manifest(path)
    except (OSError, ValueError, KeyError) as exc:  # ManifestError is a ValueError
        log.info("manifest %s cannot be mapped here (%s); the blocks will be sent", path, exc)
        return None
    return manifest if manifest.dataset_id == dataset_id else None
