"""``TieredDataset``: a PyTorch ``IterableDataset`` fed through the tiers.

Swap it into an existing ``DataLoader``::

    ds = TieredDataset("s3://bucket/train", batch_size=64)
    loader = DataLoader(ds, batch_size=64, num_workers=4, collate_fn=tierload.collate)
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for images, labels in loader:
            ...

Within an epoch every sample is yielded exactly once across all ranks and workers (see
:mod:`tierload.data.order` for the split rule, and ``drop_last`` for uneven sizes). Under
``torch.distributed`` every rank yields the same number of samples, so no rank waits in a
collective for a batch another rank never gets.

Resuming mid-epoch: :meth:`TieredDataset.state_dict` / :meth:`TieredDataset.load_state_dict`
(see :mod:`tierload.loader.state`); torchdata's ``StatefulDataLoader`` calls them for you. One
rank's state resumes every rank, at any world size (see :mod:`tierload.data.elastic`).

The epoch and a pending resume point live in a small shared-memory block, so DataLoader
workers see ``set_epoch`` even with ``persistent_workers=True``, and a resume point is used by
exactly one iteration (all of its workers), then never again.
"""

from __future__ import annotations

import logging
import secrets
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, cast

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from tierload.config.loading import load_config
from tierload.config.models import TierloadConfig
from tierload.config.tier_dirs import check_source_apart
from tierload.data.block_columns import BlocksByKey, block_keys
from tierload.data.elastic import Segment, remaining_order, segment_rank_count
from tierload.data.layouts.base import BlockDecoder
from tierload.data.manifest import Manifest, cache_path, open_manifest
from tierload.data.manifest_helper import load_manifest_apart
from tierload.data.manifest_settings import manifest_settings
from tierload.data.mixture import Mixture
from tierload.data.order import (
    block_sequence,
    compact_index_dtype,
    epoch_order,
    rank_slice,
    resolve_shuffle,
    reuse_gap,
    samples_per_rank,
)
from tierload.data.tier_fit import warn_hot_fit_once
from tierload.errors import ConfigError, ServiceError
from tierload.loader.cold_reach import refuse_process_local
from tierload.loader.consumer import DirectSource, NodeLink
from tierload.loader.dataset_args import check_arguments, check_loader_batch, config_overrides, loader_batch_size
from tierload.loader.dataset_link import join_stream, register_dataset
from tierload.loader.epoch_reader import EpochContext, EpochReader
from tierload.loader.gpu import DeviceOutput
from tierload.loader.mixture_sources import MixtureSources, Source, is_mixture, sources_of
from tierload.loader.random_access import MapStyleView, SampleReader
from tierload.loader.rank_agreement import check_ranks_agree
from tierload.loader.resume import ResumeTracker
from tierload.loader.sampler_order import SamplerOrders
from tierload.loader.stall import StallMeter, report_epoch, report_progress
from tierload.loader.state import (
    STATE_FORMAT,
    STATE_VERSION,
    check_state,
    from_loader_state,
    is_loader_state,
    rebased,
    state_chain,
)
from tierload.loader.warm_resume import WARM_SUFFIX, close_warm_stream, open_warm_stream
from tierload.stores.cold.identity import identity_of
from tierload.stores.cold.location import ColdLocation, canonical_url
from tierload.stores.cold.source import ColdSource
from tierload.wire.messages import Endpoint, SeededStreamPlan, StreamPlan

log = logging.getLogger(__name__)


class TieredDataset(IterableDataset):
    """Samples of a dataset in the cold tier, served through the warm and hot tiers.

    Args:
        url: Dataset prefix, e.g. ``s3://bucket/train``: image folders, Parquet files, WebDataset
            tar shards, ``.npy`` files, token files (``layout="tokens"``), or raw files. Or a
            weighted mixture: a list of :class:`~tierload.loader.mixture_sources.Source` (or of
            dicts with its fields), e.g. ``[Source("s3://b/web", weight=0.7), Source("s3://b/code",
            weight=0.3, layout="jsonl")]``; samples are then ``(sample, label, source_index)``
            (see :mod:`tierload.data.mixture` and ``docs/mixtures.md`` for the exact semantics).
        config: A :class:`TierloadConfig`, a mapping, a YAML path, or None (embedded defaults).
        shuffle: True (sample-level shuffle, or block-aware for multi-sample blocks), False,
            or one of ``"sample"``, ``"block"``, ``"none"``.
        seed: Shuffle seed; must be the same on every rank.
        transform: Callable applied to each sample (not the label), on the output device.
        batch_size: The DataLoader's batch size. With ``num_workers > 1`` it lets workers take
            whole batches in turn, so the loader yields the rank's exact order and
            ``len(loader)`` is exact; without it each worker ends with its own partial batch.
            A DataLoader with another batch size is refused (ConfigError) when it starts iterating.
        drop_last: With several ranks and a sample count that does not divide: False pads by
            repeating the first samples of the epoch's order (like ``DistributedSampler``),
            True drops the remainder. Either way every rank yields the same number of samples.
        rank, world_size: Override ``torch.distributed`` (default: its rank/world size, else 0/1).
        layout: One of ``imagefolder``, ``parquet``, ``files``, ``webdataset``, ``npy``, ``tokens``,
            ``jsonl``, ``lines``, ``arrow``, or None
            (``manifest.layout``, ``auto`` by default).
        columns: Columns to read (None: all): Parquet fetches only these columns' chunks from
            the cold tier (a block per row group and projection); Arrow selects them after decoding.
        window_blocks: Blocks per shuffle window in block-aware shuffle.
        refresh_manifest: List the cold prefix again even if a cached manifest exists, and
            drop cached copies of blocks whose source changed.
        endpoint_url: S3 endpoint (wins over config and environment).
        storage_options: fsspec/s3fs options for the cold tier (merged into ``cold.storage_options``).
        address: Ray address to join (wins over config and ``RAY_ADDRESS``).
        device: Where tensors are returned, e.g. ``"cuda"`` (see :mod:`tierload.loader.gpu`: kvikio/GDS
            when available, else pinned memory and an async copy). Applies when the dataset is
            iterated in the main process; DataLoader workers return host tensors.
        epoch_samples: A mixture's samples per epoch (None: its positively weighted sources'
            sizes, summed).
        curriculum: A mixture's weights from a given epoch on: ``{epoch: [w0, w1, ...]}``; each
            source's passes stay continuous across a change (see :mod:`tierload.data.mixture`).
        lazy: Do not start now; call :meth:`start` yourself before iterating. By default the
            constructor starts (lists, connects to Ray, starts the node cache), because PyTorch
            forks DataLoader workers without any hook in the parent process.
        sampler: Any iterable of sample indices (``WeightedRandomSampler``, ``DistributedSampler``,
            a curriculum list, an int array): its sequence is this rank's order, iterated once per
            epoch in this process at ``set_epoch`` (after the sampler's own ``set_epoch``), and
            the node cache plans prefetch and eviction from it as from a built-in shuffle;
            ``shuffle`` is then not used (see :mod:`tierload.loader.sampler_order`). Indices
            outside the dataset raise :class:`~tierload.errors.SampleIndexError`.

    Yields:
        ``(sample, label)``: images as uint8 tensors (C, H, W); Parquet rows as dicts of
        tensors/values; WebDataset samples as dicts of decoded fields (``__key__`` included);
        ``.npy`` rows as tensors; token windows as int64 tensors of ``manifest.seq_len_tokens + 1``
        tokens (or ``(input, target)`` pairs, see :mod:`tierload.data.layouts.tokens`); JSONL lines
        parsed (a ``dict`` per object line); text lines and raw files as ``bytes``; Arrow rows as
        Parquet rows. ``label`` is an int (-1 when unknown).
        :func:`tierload.collate` batches all of them.

    Raises:
        ConfigError: A bad argument or config value (named in the message).
        BackendError: The cold tier cannot be listed (unreachable endpoint, missing bucket ...).
        ManifestError: The prefix holds no usable samples.
        ManifestMismatchError: Under ``torch.distributed``, the ranks listed different contents
            (every rank raises; see :mod:`tierload.loader.rank_agreement`).
    """

    def __init__(self, url: str | Sequence[Source | Mapping[str, Any]],
                 config: TierloadConfig | Mapping[str, Any] | str | None = None, *,
                 shuffle: bool | str = True, seed: int = 0, transform: Callable | None = None,
                 batch_size: int | None = None, drop_last: bool = False, rank: int | None = None,
                 world_size: int | None = None, layout: str | None = None, columns: list[str] | None = None,
                 window_blocks: int = 8, refresh_manifest: bool = False, endpoint_url: str | None = None,
                 storage_options: Mapping[str, Any] | None = None, address: str | None = None,
                 device: str | torch.device | None = None, epoch_samples: int | None = None,
                 curriculum: Mapping[int, Sequence[float]] | None = None, lazy: bool = False,
                 sampler: Iterable[Any] | None = None) -> None:
        super().__init__()
        sources = sources_of(cast(Sequence, url), layout, columns) if is_mixture(url) else None
        url = sources[0].url if sources else cast(str, url)
        if sources and sampler is not None:
            raise ConfigError(f"sampler={sampler!r} with {len(sources)} sources: a sampler draws indices of one "
                              "dataset; give a mixture its weights (Source(url, weight=...)) instead, or pass the "
                              "sampler with one source")
        shuffle = check_arguments(url, shuffle, batch_size, layout, rank, world_size, window_blocks)
        try:
            self.seed = int(seed)
        except (TypeError, ValueError):
            raise ConfigError(f"seed={seed!r} is not an integer") from None
        try:
            self._output = DeviceOutput(torch.device(device) if device is not None else None)
        except (RuntimeError, TypeError) as exc:
            raise ConfigError(f"device={device!r} is not a torch device: {exc}") from None
        self.config = load_config(config, overrides=config_overrides(endpoint_url, storage_options, address))
        self.url = canonical_url(url)  # s3a://, doubled or trailing slashes: one dataset, one manifest
        for source_url in [source.url for source in sources] if sources else [self.url]:
            check_source_apart(source_url, {"hot.dir": self.config.hot.dir, "warm.url": self.config.warm.url,
                                            "manifest.cache_dir": self.config.manifest.cache_dir})
        # A mixture of sources (None: one dataset): its sources' manifests, and its order's arithmetic.
        self._sources = MixtureSources(sources, self.config) if sources else None
        self._mixture: Mixture | None = None
        self._mixture_args = (epoch_samples, dict(curriculum) if curriculum else None)
        if self._sources is not None:
            self.url = self._sources.url
        self.shuffle = shuffle
        self.transform = transform
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.layout = layout
        self.columns = columns
        self.window_blocks = window_blocks
        self.refresh_manifest = refresh_manifest
        # rank is set whenever world_size is (checked above)
        self._explicit_rank = (rank, world_size) if world_size is not None and rank is not None else None
        self._captured_rank = (0, 1)
        self._resume = ResumeTracker()
        # (epoch, segments run before at other world sizes): set by an elastic load_state_dict
        # (see tierload.data.elastic); that epoch's order is what they left.
        self._segments: tuple[int, tuple[Segment, ...]] = (-1, ())
        self._warm_stream: str | None = None  # opened by load_state_dict, closed when the epoch's stream opens
        # What this process's readers did: direct hot reads, misses, reconnects to a restarted
        # node cache, blocks read without it, streams reopened.
        self.consumer_stats: Counter = Counter()
        # Marks the stream ids of this object's iterations (and its workers' copies), so that
        # own_epoch_stats tells them from other ranks' and jobs' streams on a shared node cache.
        self._stream_owner = secrets.token_hex(4)
        # What the training loop waited for, measured in this process (see tierload.loader.stall).
        self._stall = StallMeter(lambda epoch: report_epoch(self, epoch), lambda epoch: report_progress(self, epoch),
                                 self.config.metrics.export_interval_s)
        self._manifest: Manifest | None = None
        self._ranks_agreed = False  # every rank of the process group holds self._manifest
        self._manifest_path: Path | None = None
        # The node cache mapped this dataset's manifest file at registration: it derives the
        # streams' plans from seeds (SeededStreamPlan) instead of receiving them.
        self._cache_maps_manifest = False
        self._endpoint: Endpoint | None = None
        self._link: NodeLink | None = None
        self._decoder: BlockDecoder | None = None
        # Resolved once, here: workers and actors get exactly these options, whatever their environment.
        self._cold = self._sources.colds[0] if self._sources else ColdLocation.resolve(self.url, self.config.cold)
        self._sampler_orders = SamplerOrders(sampler) if sampler is not None else None
        self._reader: SampleReader | None = None  # ds[i]: built in the process that reads
        if not lazy:
            self.start()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> "TieredDataset":
        """Map the cached manifest (a helper process lists the prefix and writes it first when there is
        none: :mod:`tierload.data.manifest_helper`), then find this node's cache (through its channel
        alone when another job or ``tierload serve`` runs it) or start Ray and the cache: in this
        process's Ray if it is connected, else in a service host (:mod:`tierload.deploy.host`, started
        before the manifest so that both run at once): a process without Ray never imports it. Idempotent.

        Returns:
            self.
        """
        if self._endpoint is not None:
            return self
        from tierload.deploy.host import host_started_early
        from tierload.deploy.keeper import attach_node_cache

        source = ColdSource(self._cold, self.config.cold)
        for cold in self._sources.colds[1:] if self._sources is not None else ():
            refuse_process_local(ColdSource(cold, self.config.cold))  # each source of a mixture, as the first
        refuse_process_local(source)
        previous = self._cached_keys(source) if self.refresh_manifest and self._sources is None else set()
        # Without Ray here, a service host starts Ray and the cache while the manifest is mapped or built.
        with host_started_early(self.config):
            settings = manifest_settings(self.config)
            if self._sources is not None:
                self._manifest = self._sources.load(self.refresh_manifest)
                self._mixture = self._sources.mixture(self.shuffle, self.window_blocks, *self._mixture_args)
            else:
                # Listed and written by a helper process; this one maps the file (never holds the listing).
                listed, listed_path = load_manifest_apart(source, settings, self.layout, refresh=self.refresh_manifest)
                # With columns=, a layout that fetches columns apart reads only theirs (its own block keys).
                self._manifest = listed.projected(self.columns, settings.label_column)
                # The node cache maps the cached file when it holds these blocks; a projection's are sent.
                self._manifest_path = listed_path if self._manifest is listed else None
            self._agree_across_ranks()  # before the cache is reached: ranks that disagree stop here, all of them
            if self.shuffle == "sample" and self._manifest.num_packs:
                log.warning("shuffle='sample' over %d packs of small objects: a pack is read again for most samples "
                            "once it leaves the decoded window; shuffle=True (block-aware) reads each pack once per "
                            "epoch (docs/packs.md)", self._manifest.num_packs)
            warn_hot_fit_once(self.config, self._manifest.blocks, self.url)  # reads bypass a hot tier too small
            endpoint = attach_node_cache(self.config, self)  # found or started; re-created if removed for good
            self._link = NodeLink(endpoint, identity_of(self._cold))
            self._register()  # a registration refused (this job's credentials) lets an early host go too
            self._endpoint = endpoint  # started: set last, so a start that failed can be tried again
        stale = previous - set(block_keys(self._manifest.blocks)) if previous else set()
        if stale:
            dropped = self._link.call(lambda cache: cache.invalidate(sorted(stale)))
            log.info("manifest refresh: %d blocks changed at the source; dropped %d cached copies", len(stale),
                     dropped)
        self._captured_rank = self._rank_world()
        if self._sampler_orders is not None:  # before the DataLoader forks its workers
            self._sampler_orders.order(self.epoch, self._manifest.num_samples)
        return self

    def _agree_across_ranks(self) -> None:
        """Under an initialised process group, check that every rank holds this manifest (once).

        Raises:
            ManifestMismatchError: The ranks listed different contents (see :mod:`tierload.loader.rank_agreement`).
        """
        if self._ranks_agreed or self._manifest is None:
            return
        explicit_world = self._explicit_rank[1] if self._explicit_rank is not None else None
        self._ranks_agreed = check_ranks_agree(self._manifest, self.url, explicit_world)

    def _cached_keys(self, source: ColdSource) -> set[str]:
        path = cache_path(source, manifest_settings(self.config), self.layout)
        try:
            return set(block_keys(open_manifest(path).blocks))
        except (OSError, ValueError, KeyError):
            return set()

    def _register(self, link: NodeLink | None = None) -> None:
        client = link or self._link
        assert client is not None and self._manifest is not None, "start() sets both"
        if self._sources is not None:
            self._sources.register(client, self._manifest)
            return
        self._cache_maps_manifest = register_dataset(client, self._manifest, self._manifest_path, self._cold)
        if self._cache_maps_manifest:
            _ = self._manifest.samples_digest  # hashed once here, not in each DataLoader worker it forks

    def __getstate__(self):
        if self._endpoint is not None and get_worker_info() is None:
            self._captured_rank = self._rank_world()  # pickled for spawn: resolve in the parent
        state = self.__dict__.copy()
        state["_decoder"] = None
        state["_reader"] = None  # each process reads through its own
        state["_stall"] = StallMeter()  # workers do not see the loop; the meter's callbacks stay here
        return state

    # ----------------------------------------------------------------- properties
    @property
    def manifest(self) -> Manifest:
        """The dataset's manifest (starts the dataset if needed)."""
        if self._manifest is None:
            self.start()
        assert self._manifest is not None, "start() sets the manifest"
        return self._manifest

    @property
    def classes(self) -> list[str]:
        return self.manifest.classes

    @property
    def device(self) -> torch.device | None:
        """The requested output device (None: samples stay on the host)."""
        return self._output.device

    @property
    def epoch(self) -> int:
        """The epoch the next iteration yields (shared with this dataset's DataLoader workers)."""
        return self._resume.epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration yields (same on every rank).

        If the dataset started before ``torch.distributed`` was initialised, the ranks' manifests
        are compared here (a collective: call it on every rank).

        Raises:
            ConfigError: A negative epoch.
            ManifestMismatchError: The ranks hold different manifests of the dataset.
        """
        if int(epoch) < 0:
            raise ConfigError(f"epoch={epoch!r}; it must be >= 0")
        if get_worker_info() is None:
            self._agree_across_ranks()
        self._resume.set_epoch(int(epoch))
        if self._sampler_orders is not None and get_worker_info() is None:
            self._sampler_orders.refresh(int(epoch), self.manifest.num_samples)

    def _rank_world(self) -> tuple[int, int]:
        if self._explicit_rank is not None:
            return self._explicit_rank
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return self._captured_rank

    def _shuffle_mode(self) -> str:
        if self._sampler_orders is not None:
            return "sampler"
        mixture = self._started_mixture()
        if mixture is not None:
            return "mixture:" + ",".join(mixture.shuffles)
        return resolve_shuffle(self.shuffle, self.manifest.num_samples, len(self.manifest.blocks))

    def __len__(self) -> int:
        """Samples this rank yields per epoch (all workers together; the same on every rank).

        A resumed epoch yields only the rest, but its length stays the whole epoch's (as
        torchdata's ``StatefulDataLoader`` counts steps from the epoch's start); after a resume at
        another world size it is the per-rank count of the new split (see :meth:`load_state_dict`).
        """
        if self._sampler_orders is not None:
            return len(self.rank_order())
        rank, world = self._rank_world()
        chain = self._chain(self.epoch)
        if chain:  # an elastic resume: this epoch is what earlier segments left, split over this world size
            return segment_rank_count(self._epoch_samples(), chain, world, self.drop_last)
        return samples_per_rank(self._epoch_samples(), world, self.drop_last)

    def _epoch_samples(self, epoch: int | None = None) -> int:
        """Samples in one epoch's global order (default: the current epoch's)."""
        mixture = self._started_mixture()
        if mixture is not None:
            return mixture.samples_per_epoch(self.epoch if epoch is None else epoch)
        return self.manifest.num_samples

    def _started_mixture(self) -> Mixture | None:
        """The mixture's order arithmetic (None: one dataset); starts the dataset if needed."""
        if self._sources is not None and self._mixture is None:
            self.start()
        return self._mixture

    def _chain(self, epoch: int) -> tuple[Segment, ...]:
        """Segments of ``epoch`` run before an elastic resume (empty for any other epoch)."""
        return self._segments[1] if self._segments[0] == epoch else ()

    def global_order(self, epoch: int) -> np.ndarray:
        """(samples per epoch,): the epoch's sample ids over all ranks, in order, before any split:
        int32 below 2**31 samples, else int64 (:func:`~tierload.data.order.compact_index_dtype`; a
        mixture's are int64 global ids: see :class:`tierload.data.mixture.Mixture`)."""
        mixture = self._started_mixture()
        if mixture is not None:
            return mixture.epoch_order(self.seed, epoch)
        manifest = self.manifest
        return epoch_order(manifest.sample_block, seed=self.seed, epoch=epoch, shuffle=self._shuffle_mode(),
                           window_blocks=self.window_blocks, dtype=compact_index_dtype(manifest.num_samples))

    # ------------------------------------------------------------------ iteration
    def rank_order(self, epoch: int | None = None) -> np.ndarray:
        """Sample indices this rank yields in ``epoch`` (default: the current one), in order (with
        ``sampler=``, the sampler's sequence of that epoch): int32 or int64 as :meth:`global_order`."""
        if self._sampler_orders is not None:
            return self._sampler_orders.order(self.epoch if epoch is None else epoch, self.manifest.num_samples)
        rank, world = self._rank_world()
        epoch = self.epoch if epoch is None else epoch
        order = remaining_order(self.global_order(epoch), self._chain(epoch), self.drop_last)
        return rank_slice(order, rank=rank, world_size=world, drop_last=self.drop_last)

    def _reuse_gap(self) -> int:
        mixture = self._started_mixture()
        if mixture is not None:
            return mixture.reuse_gap(self.epoch)
        return reuse_gap(self.manifest.sample_block, self.window_blocks)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        if self._endpoint is None:
            if get_worker_info() is not None:
                raise ServiceError("TieredDataset(lazy=True) was not started before the DataLoader started its "
                                   "workers; call dataset.start() first")
            self.start()
        return self._iterate()

    def _stream_plan(self, epoch: int, rest: np.ndarray, start_sample: int, start: int, rank: int,
                     world: int) -> StreamPlan | SeededStreamPlan:
        """What creates this rank's stream on the node cache: the seeds of its plan when the cache
        can derive it (one dataset in tierload's own order, its manifest file mapped by the cache,
        no elastic resume in this epoch), else the plan itself (:meth:`_plan`).

        Args:
            rest: int (samples,): the rank's order from ``start_sample`` on.
            start_sample: Where ``rest`` begins in the rank's order.
            start: The first position of ``rest`` still to be consumed.
        """
        if (self._cache_maps_manifest and self._sampler_orders is None and self._sources is None
                and not self._chain(epoch)):
            return SeededStreamPlan(dataset_id=self.manifest.dataset_id, samples=self.manifest.samples_digest,
                                    epoch=epoch, seed=self.seed,
                                    shuffle=self._shuffle_mode(), window_blocks=self.window_blocks,
                                    drop_last=self.drop_last, rank=rank, world=world, start_sample=start_sample,
                                    start=start, lineage=self._lineage(rank, world), identity=identity_of(self._cold))
        return self._plan(epoch, rest, start, rank, world)

    def _lineage(self, rank: int, world: int) -> str:
        return f"{self.manifest.dataset_id}/s{self.seed}/r{rank}of{world}"

    def _plan(self, epoch: int, rest: np.ndarray, start: int, rank: int, world: int) -> StreamPlan:
        """The block sequence the node cache prefetches for this rank's iteration (plus a look-ahead
        into the next epoch, which only informs eviction)."""
        manifest = self.manifest
        # A sampler's next epoch is unknown until its set_epoch: no look-ahead then. The next
        # epoch's order lives only while its blocks are copied into the plan.
        upcoming = self.rank_order(epoch + 1) if self._sampler_orders is None else np.empty(0, np.int32)
        seq = block_sequence(manifest.sample_block, rest, upcoming)
        del upcoming
        return StreamPlan(dataset_id=manifest.dataset_id, epoch=epoch, consume_len=len(rest), seq=seq,
                          reuse_gap=self._reuse_gap(), start=start,
                          lineage=self._lineage(rank, world),
                          identity=identity_of(self._cold))

    def _open_stream(self, link: NodeLink, stream_id: str, worker: int, workers: int,
                     plan: Callable[[], StreamPlan | SeededStreamPlan]) -> None:
        """Join this iteration's stream on the node cache (see :func:`tierload.loader.dataset_link.join_stream`)."""
        join_stream(link, stream_id, worker, workers, plan, self._register)
        if self._warm_stream is not None:  # the epoch's own stream holds the warmed blocks now
            close_warm_stream(link, self._warm_stream)
            self._warm_stream = None

    def _direct_source(self) -> DirectSource:
        if self._sources is not None:  # reads the same way (read(key)), each block from its own source
            return cast(DirectSource, self._sources.direct_source(self.manifest))
        return DirectSource(self.config, self._cold, BlocksByKey(self.manifest.blocks))

    def _stream_prefix(self, epoch: int, rank: int, world: int) -> str:
        return f"{self.manifest.dataset_id}/s{self.seed}/e{epoch}/r{rank}of{world}/{self._stream_owner}"

    def _epoch_context(self) -> EpochContext:
        """The current epoch of this rank, as the epoch reader is handed it."""
        link = self._link
        if link is None:
            raise ServiceError("the dataset is not started; call start() (or iterate it) first")
        manifest, epoch = self.manifest, self.epoch
        rank, world = self._rank_world()
        if self._decoder is None:  # kept: built once per process, not once per epoch
            self._decoder = (self._sources.decoder(self.config.manifest.label_column) if self._sources is not None
                             else manifest.decoder(self.config.manifest.label_column, self.columns))
        mixture = self._started_mixture()
        # A mixture's decoded window holds every source's shuffle window at once.
        keep = 1 if self._reuse_gap() == 1 else self.window_blocks + 2
        return EpochContext(
            epoch=epoch, rank=rank, world=world, order=self.rank_order(epoch), batch_size=self.batch_size,
            stream_prefix=self._stream_prefix(epoch, rank, world),
            manifest=manifest, link=link, decoder=self._decoder, output=self._output, transform=self.transform,
            keep_decoded=keep * (mixture.num_sources if mixture is not None else 1),
            report_every=max(1, min(32, self.config.prefetch.depth_blocks // 4)), resume=self._resume,
            plan=lambda rest, start_sample, start: self._stream_plan(epoch, rest, start_sample, start, rank, world),
            open_stream=self._open_stream,
            direct_source=self._direct_source, consumer_stats=self.consumer_stats,
            source_of_block=mixture.source_of_block() if mixture is not None else None)

    def _iterate(self) -> Iterator[tuple[Any, ...]]:
        # A generator, so the reader (which takes the pending resume point) is built at the
        # first next(), in the process that iterates: the caller is then the DataLoader's fetcher,
        # whose batch size must be this dataset's (checked before the resume point is taken).
        check_loader_batch(self.batch_size, loader_batch_size(sys._getframe(1)))
        reader = EpochReader(self._epoch_context(), get_worker_info())
        if reader.info is not None or self._stall.watched:
            yield from reader  # a worker cannot see the loop; tierload.watch() measures it
        else:
            yield from self._stall.timed(iter(reader), reader.epoch)

    # ------------------------------------------------------------ random access
    def __getitem__(self, index: Any) -> tuple[Any, int]:
        """``(sample, label)`` of sample ``index`` (0 .. ``manifest.num_samples - 1``, or negative
        from the end), exactly as iteration yields it (host tensors; ``transform`` applied), read
        through hot -> peer -> warm -> cold (see :mod:`tierload.loader.random_access`).

        Raises:
            SampleIndexError: ``index`` is not an integer inside the dataset.
            TierloadError: No tier could serve its block.
        """
        return self._sample_reader().sample(index)

    def __getitems__(self, indices: Sequence[Any]) -> list[tuple[Any, int]]:
        """``[self[i] for i in indices]``, each block read and decoded once.

        Raises:
            As :meth:`__getitem__`.
        """
        return self._sample_reader().samples(indices)

    def map_style(self) -> MapStyleView:
        """A map-style ``torch.utils.data.Dataset`` over this (started) dataset, for
        ``DataLoader(view, shuffle=True)`` or any sampler: ``view[i] == self[i]`` and
        ``len(view) == manifest.num_samples`` (see :class:`~tierload.loader.random_access.MapStyleView`)."""
        return MapStyleView(self)

    def _sample_reader(self) -> SampleReader:
        if self._reader is None:
            if self._endpoint is None:
                if get_worker_info() is not None:
                    raise ServiceError("TieredDataset(lazy=True) was not started before the DataLoader started its "
                                       "workers; call dataset.start() first")
                self.start()
            assert self._link is not None, "start() sets the link"
            if self._decoder is None:
                self._decoder = self.manifest.decoder(self.config.manifest.label_column, self.columns)
            self._reader = SampleReader(self.manifest, self._link, self._decoder, self.transform, self._direct_source,
                                        self.consumer_stats)
        return self._reader

    # ------------------------------------------------------------------ device
    @property
    def device_path(self) -> str:
        """How samples reach ``device``: ``kvikio-gds``, ``kvikio-compat``, ``pinned-copy`` or ``cpu``.

        Before the first iteration this is the path that iteration will take.
        """
        return self._output.path

    # ------------------------------------------------------------------- state
    def _state_base(self) -> dict[str, Any]:
        rank, world = self._rank_world()
        mixture = self._started_mixture()
        # A mixture's state names its epoch's counts per source: other weights mean another order.
        counts = {"mixture_counts": mixture.counts(self.epoch).tolist()} if mixture is not None else {}
        return {**counts, "format": STATE_FORMAT, "version": STATE_VERSION, "dataset_id": self.manifest.dataset_id,
                "num_samples": len(self), "dataset_samples": self._epoch_samples(),
                "chain": [[s.world_size, s.consumed] for s in self._chain(self.epoch)], "seed": self.seed,
                "shuffle": self._shuffle_mode(),
                "window_blocks": self.window_blocks, "rank": rank, "world_size": world,
                "drop_last": self.drop_last, "batch_size": self.batch_size}

    def state_dict(self, batches_consumed: int | None = None) -> dict[str, Any]:
        """Where this rank is in the current epoch: resume from it with :meth:`load_state_dict`.

        Called in the main process after iterating the dataset there (``num_workers=0``), it
        is exact. Called inside a DataLoader worker (torchdata's ``StatefulDataLoader`` does,
        after every batch), it is that worker's state. With a plain ``DataLoader`` and
        workers, the main process cannot see which prefetched batches the loop consumed: pass
        ``batches_consumed`` (batches the loop took this epoch, counting from the resume point
        if the epoch was resumed), or use ``StatefulDataLoader``.

        Args:
            batches_consumed: Batches of ``batch_size`` samples the training loop consumed.

        Returns:
            A plain dict (see :mod:`tierload.loader.state`); the epoch and seed are part of it.

        Raises:
            ConfigError: ``batches_consumed`` without ``batch_size``, or the position is unknowable
                (a plain DataLoader's workers iterated this epoch and no ``batches_consumed`` was given).
        """
        return self._resume.state_dict(self._state_base(), get_worker_info(), self.batch_size, batches_consumed)

    def load_state_dict(self, state: Mapping[str, Any], *, warm: bool = True) -> None:
        """Resume from ``state``: the next iteration yields exactly the samples not yet consumed.

        Accepts a state from :meth:`state_dict` or a whole torchdata
        ``StatefulDataLoader.state_dict()`` (its worker states are merged, so the new loader
        may have any ``num_workers``). Sets the epoch and seed from the state. Call it before
        the DataLoader starts its workers; the point is used by one iteration only.

        Elastic: the state of any one rank (rank 0's, as users save it) resumes every rank, at
        any world size. At another world size the saved segment joins the state's chain and the
        new ranks split what it left (see :mod:`tierload.data.elastic`); the resumed epoch then
        has ``len(self)`` of that split. A state saved after an elastic resume resumes again.

        Args:
            state: As above.
            warm: In the main process of a started dataset, have the node cache fetch this rank's
                first blocks of the resumed epoch now, before the first step (see
                :mod:`tierload.loader.warm_resume`).

        Raises:
            ConfigError: The state does not belong to this dataset (different contents, sample
                count, shuffle, window_blocks or drop_last), or is a single worker's state loaded
                outside that worker or at another world size.
        """
        if is_loader_state(state):
            state = from_loader_state(state, self.batch_size)
        rank, world = self._rank_world()
        state_epoch = int(state.get("epoch", self.epoch))  # a state without one is refused by check_state
        expected = {"dataset_id": self.manifest.dataset_id, "dataset_samples": self._epoch_samples(state_epoch),
                    "shuffle": self._shuffle_mode(), "window_blocks": self.window_blocks, "drop_last": self.drop_last}
        check_state(state, expected)
        mixture = self._started_mixture()
        if mixture is not None and "mixture_counts" in state:
            counts = mixture.counts(int(state["epoch"])).tolist()
            if list(state["mixture_counts"]) != counts:
                raise ConfigError(f"the state was saved when epoch {state['epoch']} drew {state['mixture_counts']} "
                                  f"samples per source, these weights draw {counts}; resume with the weights of the "
                                  "saved epoch and change them from a later one (curriculum={epoch: weights})")
        if int(state["world_size"]) != world and self._sampler_orders is not None:
            raise ConfigError(f"the state was taken at world size {state['world_size']}, this rank runs at {world}; "
                              "with sampler= the sampler's sequence is each rank's own order, so tierload cannot "
                              f"split what is left over other ranks: resume at world size {state['world_size']}, "
                              "or start the epoch again with a sampler for the new world size")
        if int(state["world_size"]) != world:
            state = rebased(state, rank, world, self._epoch_samples(int(state["epoch"])))
        self._segments = (int(state["epoch"]), state_chain(state))
        info = get_worker_info()
        self._resume.load_state_dict(state, info, self.batch_size)
        self.seed = int(state["seed"])
        if self._warm_stream is not None and self._link is not None:
            close_warm_stream(self._link, self._warm_stream)  # a later load supersedes it
            self._warm_stream = None
        if warm and info is None and self._link is not None:
            self._warm_stream = self._warm_resume(int(state["epoch"]), int(state["position"]))

    def _warm_resume(self, epoch: int, position: int) -> str | None:
        """Have the node cache fetch this rank's first blocks of ``epoch`` from ``position`` on, now."""
        assert self._link is not None, "called on a started dataset"
        rank, world = self._rank_world()
        plan = self._plan(epoch, self.rank_order(epoch)[position:], 0, rank, world)
        stream_id = f"{self._stream_prefix(epoch, rank, world)}{WARM_SUFFIX}"
        return open_warm_stream(self._link, stream_id, plan, self.config.prefetch.depth_blocks)

    # ------------------------------------------------------------------- stats
    def stall_stats(self) -> dict[str, Any]:
        """How long the training loop waited for data, per epoch, in this process.

        Measured when this process iterates the dataset itself (``num_workers=0``), or through
        :func:`tierload.watch` around a DataLoader with workers (see :mod:`tierload.loader.stall`).

        Returns:
            ``{"rank", "dataset_id", "epochs": [row, ...], "current": row | None, "total": row}``;
            a row has ``epoch, samples, batches, seconds, stall_s, stall_fraction, samples_per_s``
            (seconds are wall seconds; ``stall_fraction`` is ``stall_s / seconds``).
        """
        return {"rank": self._rank_world()[0], "dataset_id": self.manifest.dataset_id, **self._stall.stats()}

    def _started_link(self) -> NodeLink:
        """The link to this node's cache, starting the dataset if needed."""
        self.start()
        assert self._link is not None, "start() sets the link"
        return self._link

    def cache_stats(self) -> dict[str, Any]:
        """The node cache's counters, levels and streams (see :meth:`NodeCache.stats`), plus
        ``device_path``: how samples reach the output device (see :mod:`tierload.loader.gpu`)."""
        stats = self._started_link().call(lambda cache: cache.stats(), wait_s=30.0)
        return {**stats.to_dict(), "device_path": self.device_path}

    def epoch_stats(self, epoch: int) -> dict[str, float]:
        """Summed counters of this node's streams of ``epoch`` for this dataset: the node's
        totals, every rank and job on this node that reads it included (see :meth:`own_epoch_stats`)."""
        return self._summed_epoch_stats(epoch, lambda stream_id: True)

    def own_epoch_stats(self, epoch: int) -> dict[str, float]:
        """Like :meth:`epoch_stats`, counting only the streams this dataset object's iterations
        opened (in this process or its DataLoader workers): this rank's, this job's share of a
        node cache that other ranks or jobs read the same dataset through."""
        mark = f"/{self._stream_owner}."
        return self._summed_epoch_stats(epoch, lambda stream_id: mark in stream_id)

    def _summed_epoch_stats(self, epoch: int, counted: Callable[[str], bool]) -> dict[str, float]:
        totals: dict[str, float] = {}
        dataset_id = self.manifest.dataset_id
        for row in self._started_link().call(lambda cache: cache.stream_stats(dataset_id), wait_s=30.0):
            if row.epoch != epoch or not counted(row.stream_id):
                continue
            for name, value in (("lead_blocks", row.lead_blocks), ("lead_positions", row.lead_positions),
                                *row.counters.items()):
                totals[name] = totals.get(name, 0) + value
        return totals
