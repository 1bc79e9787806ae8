"""Pre-staging: put a dataset's blocks into the warm tier ahead of a job (``tierload warm``).

What Alluxio's distributed load and Fluid's dataload do for their users, through tierload's own
paths: the job's manifest (listed once and cached, so the job does not list again), the blocks
in the order the job's first epochs will need them, cold reads through
:meth:`ColdSource.read_ranges <tierload.stores.cold.source.ColdSource.read_ranges>` (many requests in
flight, a pack's members together), and placement through
:class:`~tierload.node.coordinator_sync.CoordinatorSync`: the coordinator that owns the warm
tier admits each block by its capacity and policy, exactly as it admits a node cache's
proposals, and the frame written is the node cache's. The planned accesses (one per block and
epoch) are reported as access counts, so a frequency policy sees the blocks as the job will.

Resumable and idempotent: a block already in the warm tier is neither read from the cold tier
nor written again, and every write is atomic, so a run stopped at any point loses at most the
batch in flight, and running again continues where it stopped. When the selection does not fit,
the warm tier's policy decides as it always does (``lfu`` refuses a newcomer no more frequent
than the blocks it would evict; ``lru`` makes room): staging stops at the first batch the warm
tier refuses whole, and the result says how many blocks and bytes were left out.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from tierload.config.models import TierloadConfig
from tierload.data.blocks import Block
from tierload.data.cold_read import cold_requests
from tierload.data.manifest import Manifest
from tierload.data.manifest_build import load_manifest
from tierload.data.manifest_settings import manifest_settings
from tierload.data.order import epoch_order, resolve_shuffle
from tierload.data.tier_fit import fitting
from tierload.errors import ConfigError, ServiceError
from tierload.frames.checksum import checksum
from tierload.frames.checksum_key import deployment_key
from tierload.node.coordinator_sync import CoordinatorSync
from tierload.stores.cold.location import ColdLocation, check_dataset_url
from tierload.stores.cold.source import ColdSource
from tierload.stores.registry import open_store
from tierload.wire.api import Caller, CoordinatorAPI, LocalCaller

log = logging.getLogger(__name__)

BATCH_BYTES = 32 * 2**20  # cold bytes read, then proposed to the coordinator, per round
BATCH_BLOCKS = 512


@dataclass
class PrestageResult:
    """What a pre-staging run did.

    Attributes:
        planned_blocks, planned_bytes: The selection (``epochs``, ``fraction``).
        present_blocks, present_bytes: Already in the warm tier before this run (not read again).
        staged_blocks, staged_bytes: Written to the warm tier by this run.
        refused_blocks, refused_bytes: Read, but refused by the warm tier (full, or its policy).
        skipped_blocks, skipped_bytes: Never read: staging stopped (the warm tier refused a whole
            batch, or the run was interrupted).
        too_large_blocks, too_large_bytes: Never read: each is larger than the warm tier's whole
            capacity, so it could not be kept (not counted in ``skipped_*``).
        largest_block_bytes: The largest block of the selection.
        cold_bytes, cold_gets: What this run read from the cold tier.
        warm_used_bytes, warm_capacity_bytes: The warm tier afterwards.
        interrupted: The run was stopped before the end (run again to resume).
        elapsed_s: Wall-clock seconds.
        policy: The warm tier's eviction policy (it decided what was admitted).
        where: Which coordinator admitted the blocks (the service's, or one in this process).
    """

    planned_blocks: int = 0
    planned_bytes: int = 0
    present_blocks: int = 0
    present_bytes: int = 0
    staged_blocks: int = 0
    staged_bytes: int = 0
    refused_blocks: int = 0
    refused_bytes: int = 0
    skipped_blocks: int = 0
    skipped_bytes: int = 0
    too_large_blocks: int = 0
    too_large_bytes: int = 0
    largest_block_bytes: int = 0
    cold_bytes: int = 0
    cold_gets: int = 0
    warm_used_bytes: int = 0
    warm_capacity_bytes: int = 0
    interrupted: bool = False
    elapsed_s: float = 0.0
    policy: str = ""
    where: str = ""

    @property
    def done_bytes(self) -> int:
        """Bytes of the selection dealt with so far (present, staged or refused)."""
        return self.present_bytes + self.staged_bytes + self.refused_bytes


def staging_order(manifest: Manifest, *, epochs: int = 1, seed: int = 0, shuffle: str = "auto",
                  window_blocks: int = 8) -> np.ndarray:
    """Block indices in the order a job's first ``epochs`` epochs first need them.

    The order is the dataset's global epoch order (:func:`tierload.data.order.epoch_order`, before
    the rank slices: ranks read their slices side by side, so this is close to the cluster's
    order of first use), epoch after epoch, each block at its first use.

    Args:
        manifest: The dataset's manifest.
        epochs: Epochs to plan for (>= 1).
        seed, shuffle, window_blocks: As given to :class:`~tierload.TieredDataset` (``shuffle``
            as a mode: ``auto``, ``sample``, ``block`` or ``none``).

    Returns:
        int64 array of distinct block indices (every block the epochs read, once).
    """
    sample_block = np.asarray(manifest.sample_block)
    mode = resolve_shuffle(shuffle, manifest.num_samples, len(manifest.blocks))
    seen = np.zeros(len(manifest.blocks), dtype=bool)
    order: list[np.ndarray] = []
    for epoch in range(epochs):
        blocks = sample_block[epoch_order(sample_block, seed=seed, epoch=epoch, shuffle=mode,
                                          window_blocks=window_blocks)]
        _, first = np.unique(blocks, return_index=True)
        fresh = blocks[np.sort(first)]
        fresh = fresh[~seen[fresh]]
        seen[fresh] = True
        order.append(fresh.astype(np.int64))
    return np.concatenate(order) if order else np.zeros(0, dtype=np.int64)


def select(blocks: Sequence[Block], order: np.ndarray, fraction: float) -> list[Block]:
    """The first blocks of ``order`` that make up ``fraction`` (0 < f <= 1) of their bytes.

    Raises:
        ConfigError: ``fraction`` is outside (0, 1].
    """
    if not 0 < fraction <= 1:
        raise ConfigError(f"fraction={fraction!r}; it must be in (0, 1]")
    chosen = [blocks[i] for i in order]
    if fraction >= 1:
        return chosen
    sizes = np.cumsum([block.length for block in chosen])
    count = int(np.searchsorted(sizes, fraction * sizes[-1])) + 1 if len(sizes) else 0
    return chosen[:count]


class _Round:
    """One batch of blocks proposed to the coordinator: its counts go out with the proposals."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def collect(self, full: bool) -> tuple[dict, list[str], list[str], list[str] | None]:
        counts, self.counts = self.counts, {}
        return counts, [], [], [] if full else None


def _batches(blocks: list[Block]):
    batch: list[Block] = []
    size = 0
    for block in blocks:
        batch.append(block)
        size += block.length
        if size >= BATCH_BYTES or len(batch) >= BATCH_BLOCKS:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


class Prestager:
    """Stages a selection of blocks into the warm tier through the coordinator that owns it.

    Args:
        config: The deployment's configuration (its ``warm`` section is the target).
        source: The dataset's :class:`~tierload.stores.cold.source.ColdSource`.
        coordinator_call: ``call(method, *args)`` on the warm tier's coordinator.
        epochs: Planned accesses of each block (reported as its access count).
        on_progress: Called after every batch with the result so far.
    """

    def __init__(self, config: TierloadConfig, source, coordinator_call: Caller, *, epochs: int = 1,
                 on_progress: Callable[[PrestageResult], None] | None = None) -> None:
        if not config.warm.url:
            raise ConfigError("warm.url is null: there is no warm tier to stage into; set warm.url "
                              "(a shared directory or fsspec URL) and warm.capacity_bytes")
        self.config = config
        self.source = source
        self.call = coordinator_call
        self.epochs = epochs
        self.on_progress = on_progress or (lambda result: None)
        self.stop = threading.Event()
        self.store = open_store(config.warm.url, "warm")
        self._round = _Round()
        clock = 0.0 if config.policy.decay.unit == "epoch" else None  # the job's first epoch
        self.sync = CoordinatorSync(f"prestage-{socket.gethostname()}-{os.getpid()}", coordinator_call,
                                    self._round.collect, lambda: time.time() if clock is None else clock,
                                    self.store, config.wire.zstd_level if config.warm.compress else None,
                                    max_pending_bytes=4 * BATCH_BYTES)
        # Frames carry the deployment's keyed checksum: the coordinator's key, the one every node
        # cache of this warm tier checks with (a frame under another key would be refetched from cold).
        self.sync.secret = coordinator_call(CoordinatorAPI.checksum_key,
                                            deployment_key(config.warm.url, config.hot.dir))

    def run(self, blocks: list[Block]) -> PrestageResult:
        """Stage ``blocks`` in order; returns what was done (also when :attr:`stop` was set).

        Raises:
            BackendError: The cold or the warm tier failed.
            SourceChangedError: An object changed since the manifest was built.
        """
        started = time.monotonic()
        result = PrestageResult(planned_blocks=len(blocks), planned_bytes=sum(b.length for b in blocks),
                                policy=self.config.policy.warm.eviction)
        missing = []
        for block in blocks:
            if self.store.contains(block.key):
                result.present_blocks += 1
                result.present_bytes += block.length
            else:
                missing.append(block)
        result.largest_block_bytes = max((block.length for block in blocks), default=0)
        missing = self._keepable(missing, result)
        self.on_progress(result)
        for batch in _batches(missing):
            if self.stop.is_set():
                result.interrupted = True
                break
            if not self._stage(batch, result):
                break  # the warm tier refused a whole batch: it is full for this selection
            self.on_progress(result)
        result.skipped_blocks = result.planned_blocks - result.present_blocks - result.staged_blocks \
            - result.refused_blocks - result.too_large_blocks
        result.skipped_bytes = result.planned_bytes - result.done_bytes - result.too_large_bytes
        warm = self.call(CoordinatorAPI.stats).warm
        result.warm_used_bytes = 0 if warm is None else warm.used_bytes
        result.warm_capacity_bytes = self.config.warm.capacity_bytes if warm is None else warm.capacity_bytes
        result.elapsed_s = time.monotonic() - started
        return result

    def _keepable(self, missing: list[Block], result: PrestageResult) -> list[Block]:
        """The blocks of ``missing`` the warm tier could hold at all; the others are counted in
        ``result.too_large_*`` and never read (a compressed tier's frames may be smaller: all kept)."""
        if self.config.warm.compress:
            return missing
        warm = self.call(CoordinatorAPI.stats).warm
        capacity = self.config.warm.capacity_bytes if warm is None else warm.capacity_bytes
        keep, too_large = fitting(missing, capacity)
        result.too_large_blocks = len(too_large)
        result.too_large_bytes = sum(block.length for block in too_large)
        if too_large:
            log.info("%d block(s) are larger than the warm tier's capacity (%d bytes): not read", len(too_large),
                        capacity)
        return keep

    def _stage(self, batch: list[Block], result: PrestageResult) -> bool:
        """Read ``batch`` from cold, propose it, write what is admitted. False if none was."""
        requests = [cold_requests(block) for block in batch]
        tally = {"cold_gets": 0, "cold_bytes": 0}
        parts = self.source.read_ranges([r for block_requests in requests for r in block_requests], tally=tally)
        result.cold_gets += tally["cold_gets"]
        result.cold_bytes += tally["cold_bytes"]
        at = 0
        for block, block_requests in zip(batch, requests, strict=True):
            raw = b"".join(parts[at:at + len(block_requests)])
            at += len(block_requests)
            self._round.counts[block.key] = self.epochs
            self.sync.offer_fetched(block.key, raw, checksum(raw, self.sync.secret))
        self.sync.flush()
        admitted = 0
        for block in batch:
            if block.key in self.sync.known_warm:
                admitted += 1
                result.staged_blocks += 1
                result.staged_bytes += block.length
            else:
                result.refused_blocks += 1
                result.refused_bytes += block.length
        return admitted > 0


def coordinator_for(config: TierloadConfig, address: str | None = None) -> tuple[Caller, str]:
    """How to reach the coordinator that owns ``config``'s warm tier, and a description of it.

    The service's coordinator when a Ray cluster is configured, answers and runs one; otherwise
    one started in this process for the run (it adopts what the warm tier holds, as the
    service's will when it starts).

    Raises:
        ServiceError: ``address`` was given and nothing answers there; or a job's node cache runs
            on this machine without a reachable cluster: its coordinator owns the warm tier, and a
            second owner would miscount its capacity.
    """
    from tierload.deploy.service_probe import local_endpoints, ray_address, ray_cluster_answers

    cluster = ray_address(config, address)
    if address is not None and not ray_cluster_answers(address):
        # Named on purpose: staging with a coordinator of this process instead would make a second
        # owner of the warm tier if the service runs where the user thinks.
        raise ServiceError(f"no Ray cluster answers at {address!r} (--address): nothing was staged; pass the address "
                           "of the cluster whose service owns the warm tier, or leave it out to stage with a "
                           "coordinator of this command when no job or service runs")
    if cluster is not None and ray_cluster_answers(cluster):
        import ray

        from tierload.deploy.actors import CoordinatorCall, coordinator_name
        from tierload.deploy.runtime import ensure_ray

        ensure_ray(config.model_copy(update={"ray": config.ray.model_copy(update={"address": cluster})}))
        names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if isinstance(a, dict) and a.get("namespace") == config.ray.namespace}
        if coordinator_name(config) in names:
            return CoordinatorCall(coordinator_name(config), config.ray.namespace), f"the service at {cluster}"
    running = local_endpoints(config)
    if running:
        raise ServiceError(f"a node cache for this configuration runs on this machine (pid {running[0].pid}) on a Ray "
                           "cluster this command cannot reach; its coordinator owns the warm tier. Stage before the "
                           "job starts, or pass --address of its cluster")
    from tierload.coordinator.actor import Coordinator

    coordinator = Coordinator(config, node_alive=lambda: None).start()
    return LocalCaller(coordinator, CoordinatorAPI), "a coordinator in this process"


def prestage(url: str, config: TierloadConfig, *, layout: str | None = None, epochs: int = 1, fraction: float = 1.0,
             seed: int = 0, shuffle: str = "auto", window_blocks: int = 8, address: str | None = None,
             on_start: Callable[[PrestageResult], None] | None = None,
             on_progress: Callable[[PrestageResult], None] | None = None,
             stop: threading.Event | None = None) -> PrestageResult:
    """Stage the blocks of ``url`` that a job's first ``epochs`` epochs need into the warm tier.

    Args:
        url: The dataset prefix, as given to :class:`~tierload.TieredDataset`.
        config: The job's configuration (the same ``manifest``, ``warm`` and ``ray`` settings).
        layout, seed, shuffle, window_blocks: As the job will use them (they decide the order).
        epochs: Epochs to plan for: blocks are staged in order of first use over these epochs,
            each reported as read once per epoch.
        fraction: Stage only the first ``fraction`` (0 < f <= 1) of the selection's bytes.
        address: Ray cluster whose service owns the warm tier (default: ``ray.address``).
        on_start: Called once the selection is known (``planned_*`` and ``present_*`` set).
        on_progress: Called after every batch.
        stop: Set it to stop after the batch in flight (the result says ``interrupted``).

    Returns:
        What was staged, found, refused and skipped.

    Raises:
        ConfigError: A URL without a scheme, no warm tier, or a bad ``epochs``/``fraction``.
        ManifestError: The prefix cannot be described.
        BackendError: The cold or warm tier failed.
        ServiceError: Another process owns the warm tier and cannot be reached.
    """
    check_dataset_url(url)  # as TieredDataset does: a bare path would be read as another prefix
    if epochs < 1:
        raise ConfigError(f"epochs={epochs!r}; it must be >= 1")
    source = ColdSource(ColdLocation.resolve(url.rstrip("/"), config.cold), config.cold)
    manifest = load_manifest(source, manifest_settings(config), layout)
    blocks = select(manifest.blocks, staging_order(manifest, epochs=epochs, seed=seed, shuffle=shuffle,
                                                   window_blocks=window_blocks), fraction)
    call, where = coordinator_for(config, address)
    started = {"done": False}

    def progress(result: PrestageResult) -> None:
        result.where = where
        if not started["done"] and on_start is not None:
            on_start(result)
        started["done"] = True
        if on_progress is not None:
            on_progress(result)

    stager = Prestager(config, source, call, epochs=epochs, on_progress=progress)
    if stop is not None:
        stager.stop = stop
    result = stager.run(blocks)
    result.where = where
    return result
