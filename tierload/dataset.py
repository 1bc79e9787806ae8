"""``TieredDataset``: a PyTorch ``IterableDataset`` fed through the tiers.

Swap it into an existing ``DataLoader``::

    ds = TieredDataset("s3://bucket/train", batch_size=64)
    loader = DataLoader(ds, batch_size=64, num_workers=4)
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for images, labels in loader:
            ...

Within an epoch every sample is yielded exactly once across all ranks and workers (see
:mod:`tierload.order` for the split rule, and ``drop_last`` for uneven sizes).
"""

from __future__ import annotations

import logging
import os
import random
from collections import OrderedDict
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from tierload.cache.channel import ChannelClient
from tierload.cache.consumer import BlockReader
from tierload.config import TierloadConfig, load_config
from tierload.errors import ConfigError, ServiceError
from tierload.manifest import LAYOUTS, Manifest, cache_path, load_manifest
from tierload.order import SHUFFLE_MODES, epoch_order, rank_slice, samples_per_rank, worker_positions
from tierload.stores.cold import ColdSource, s3_storage_options

log = logging.getLogger(__name__)


class TieredDataset(IterableDataset):
    """Samples of a dataset in the cold tier, served through the warm and hot tiers.

    Args:
        url: Dataset prefix, e.g. ``s3://bucket/train`` (image folders, Parquet files, or raw files).
        config: A :class:`TierloadConfig`, a mapping, a YAML path, or None (embedded defaults).
        shuffle: True (sample-level shuffle, or block-aware for multi-sample blocks), False,
            or one of ``"sample"``, ``"block"``, ``"none"``.
        seed: Shuffle seed; must be the same on every rank.
        transform: Callable applied to each sample (not the label).
        batch_size: The DataLoader's batch size. With ``num_workers > 1`` it lets workers take
            whole batches in turn, so the loader yields the rank's exact order and
            ``len(loader)`` is exact; without it each worker ends with its own partial batch.
        drop_last: With several ranks and a sample count that does not divide: False pads by
            repeating the first samples (like ``DistributedSampler``), True drops the remainder.
        rank, world_size: Override ``torch.distributed`` (default: its rank/world size, else 0/1).
        layout: ``"imagefolder"``, ``"parquet"``, ``"files"`` or None (``manifest.layout``).
        columns: Parquet columns to read (None: all).
        window_blocks: Blocks per shuffle window in block-aware shuffle.
        refresh_manifest: List the cold prefix again even if a cached manifest exists, and
            drop cached copies of blocks whose source changed.
        endpoint_url: S3 endpoint (wins over config and environment).
        storage_options: fsspec/s3fs options for the cold tier (merged into ``cold.storage_options``).
        address: Ray address to join (wins over config and ``RAY_ADDRESS``).
        lazy: Do not start now; call :meth:`start` yourself before iterating. By default the
            constructor starts (lists, connects to Ray, starts the node cache), because PyTorch
            forks DataLoader workers without any hook in the parent process.

    Yields:
        ``(sample, label)``: images as uint8 tensors (C, H, W); Parquet rows as dicts of
        tensors/values; raw files as ``bytes``. ``label`` is an int (-1 when unknown).

    Raises:
        ConfigError: A bad argument or config value (named in the message).
        BackendError: The cold tier cannot be listed (unreachable endpoint, missing bucket ...).
        ManifestError: The prefix holds no usable samples.
    """

    def __init__(self, url: str, config: TierloadConfig | Mapping[str, Any] | str | None = None, *,
                 shuffle: bool | str = True, seed: int = 0, transform: Callable | None = None,
                 batch_size: int | None = None, drop_last: bool = False, rank: int | None = None,
                 world_size: int | None = None, layout: str | None = None, columns: list[str] | None = None,
                 window_blocks: int = 8, refresh_manifest: bool = False, endpoint_url: str | None = None,
                 storage_options: Mapping[str, Any] | None = None, address: str | None = None,
                 lazy: bool = False) -> None:
        super().__init__()
        if not isinstance(url, str) or "://" not in url:
            raise ConfigError(f"url={url!r}: give the dataset prefix as a URL, e.g. s3://bucket/train")
        if isinstance(shuffle, bool):
            shuffle = "auto" if shuffle else "none"
        if shuffle not in (*SHUFFLE_MODES, "auto"):
            raise ConfigError(f"shuffle={shuffle!r}; use True/False or one of {', '.join(SHUFFLE_MODES)}")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ConfigError(f"batch_size={batch_size!r}; it must be a positive int or None")
        if layout is not None and layout not in LAYOUTS:
            raise ConfigError(f"layout={layout!r}; choose one of {', '.join(LAYOUTS)} or None")
        if world_size is not None and (world_size < 1 or rank is None or not 0 <= rank < world_size):
            raise ConfigError(f"rank={rank!r}, world_size={world_size!r}; need 0 <= rank < world_size")
        if window_blocks < 1:
            raise ConfigError(f"window_blocks={window_blocks}; it must be >= 1")
        try:
            self.seed = int(seed)
        except (TypeError, ValueError):
            raise ConfigError(f"seed={seed!r} is not an integer") from None
        overrides: dict[str, Any] = {}
        if endpoint_url:
            overrides.setdefault("cold", {})["endpoint_url"] = endpoint_url
        if storage_options:
            overrides.setdefault("cold", {})["storage_options"] = dict(storage_options)
        if address:
            overrides["ray"] = {"address": address}
        self.config = load_config(config, overrides=overrides)
        self.url = url.rstrip("/")
        self.shuffle = shuffle
        self.transform = transform
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.layout = layout
        self.columns = columns
        self.window_blocks = window_blocks
        self.refresh_manifest = refresh_manifest
        self._explicit_rank = (rank, world_size) if world_size is not None else None
        self._captured_rank = (0, 1)
        self._epoch = 0
        self._manifest: Manifest | None = None
        self._endpoint: dict[str, Any] | None = None
        self._client: ChannelClient | None = None
        self._decoder = None
        self._storage_options = (s3_storage_options(self.config.cold) if self.url.startswith(("s3://", "s3a://"))
                                 else dict(self.config.cold.storage_options))
        if not lazy:
            self.start()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> "TieredDataset":
        """List (or load the cached manifest), start Ray and this node's cache. Idempotent.

        Returns:
            self.
        """
        if self._endpoint is not None:
            return self
        from tierload.cache.runtime import node_endpoint

        source = ColdSource(self.url, self.config.cold, storage_options=self._storage_options)
        previous = self._cached_keys(source) if self.refresh_manifest else set()
        self._manifest = load_manifest(source, self.config.manifest, self.layout, refresh=self.refresh_manifest)
        self._endpoint = node_endpoint(self.config)
        self._client = ChannelClient(self._endpoint["address"], self._endpoint["authkey"])
        self._register()
        stale = previous - {block.key for block in self._manifest.blocks}
        if stale:
            dropped = self._client.call("invalidate", sorted(stale))
            log.info("manifest refresh: %d blocks changed at the source; dropped %d cached copies", len(stale),
                     dropped)
        self._captured_rank = self._rank_world()
        return self

    def _cached_keys(self, source: ColdSource) -> set[str]:
        path = cache_path(source, self.config.manifest, self.layout)
        try:
            return {block.key for block in Manifest.from_json(path.read_text(encoding="utf-8")).blocks}
        except (OSError, ValueError, KeyError):
            return set()

    def _register(self) -> None:
        manifest = self._manifest
        if self._client.call("has_dataset", manifest.dataset_id):
            return
        blocks = manifest.blocks
        self._client.call("register_dataset", manifest.dataset_id, self.url, self._storage_options,
                          [b.key for b in blocks], [b.url for b in blocks], [b.version for b in blocks],
                          [b.offset for b in blocks], [b.length for b in blocks])

    def __getstate__(self):
        if self._endpoint is not None and get_worker_info() is None:
            self._captured_rank = self._rank_world()  # pickled for spawn: resolve in the parent
        state = self.__dict__.copy()
        state["_decoder"] = None
        return state

    # ----------------------------------------------------------------- properties
    @property
    def manifest(self) -> Manifest:
        """The dataset's manifest (starts the dataset if needed)."""
        if self._manifest is None:
            self.start()
        return self._manifest

    @property
    def classes(self) -> list[str]:
        return self.manifest.classes

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration yields (same on every rank)."""
        if int(epoch) < 0:
            raise ConfigError(f"epoch={epoch!r}; it must be >= 0")
        self._epoch = int(epoch)

    def _rank_world(self) -> tuple[int, int]:
        if self._explicit_rank is not None:
            return self._explicit_rank
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return self._captured_rank

    def _shuffle_mode(self) -> str:
        if self.shuffle != "auto":
            return self.shuffle
        return "sample" if self.manifest.num_samples == len(self.manifest.blocks) else "block"

    def __len__(self) -> int:
        """Samples this rank yields per epoch (all workers together)."""
        rank, world = self._rank_world()
        return samples_per_rank(self.manifest.num_samples, world, self.drop_last)

    # ------------------------------------------------------------------ iteration
    def rank_order(self, epoch: int | None = None) -> np.ndarray:
        """int64 sample indices this rank yields in ``epoch`` (default: the current one), in order."""
        rank, world = self._rank_world()
        order = epoch_order(self.manifest.sample_block, seed=self.seed, epoch=self._epoch if epoch is None else epoch,
                            shuffle=self._shuffle_mode(), window_blocks=self.window_blocks)
        return rank_slice(order, rank=rank, world_size=world, drop_last=self.drop_last)

    def _reuse_gap(self) -> int:
        per_block = np.bincount(self.manifest.sample_block)
        return 1 if per_block.max(initial=1) <= 1 else int(self.window_blocks * per_block.max())

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        if self._endpoint is None:
            if get_worker_info() is not None:
                raise ServiceError("TieredDataset(lazy=True) was not started before the DataLoader started its "
                                   "workers; call dataset.start() first")
            self.start()
        return self._iterate()

    def _iterate(self) -> Iterator[tuple[Any, int]]:
        manifest = self._manifest
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        # Workers of one DataLoader iteration share base_seed = seed - id; a fresh iteration gets a new one.
        nonce = (info.seed - info.id) if info is not None else random.getrandbits(48)
        if info is not None and workers > 1 and self.batch_size is None:
            log.warning("TieredDataset without batch_size under %d DataLoader workers: each worker ends the epoch "
                        "with its own partial batch; pass batch_size= for exact batches and len(loader)", workers)
        rank, world = self._rank_world()
        mine = self.rank_order()
        positions = worker_positions(len(mine), worker_id=worker, num_workers=workers, chunk=self.batch_size or 1)
        stream_id = f"{manifest.dataset_id}/s{self.seed}/e{self._epoch}/r{rank}of{world}/{nonce:x}"
        client = self._client
        if not client.call("open_stream", stream_id, worker, workers):
            lookahead = manifest.sample_block[self.rank_order(self._epoch + 1)]
            plan = {"dataset_id": manifest.dataset_id, "epoch": self._epoch, "consume_len": len(mine),
                    "seq": np.concatenate([manifest.sample_block[mine], lookahead]).astype(np.int32),
                    "reuse_gap": self._reuse_gap(),
                    "lineage": f"{manifest.dataset_id}/s{self.seed}/r{rank}of{world}"}
            try:
                client.call("open_stream", stream_id, worker, workers, plan)
            except ServiceError:
                self._register()  # the node cache restarted and forgot the dataset
                client.call("open_stream", stream_id, worker, workers, plan)
        if self._decoder is None:
            self._decoder = manifest.decoder(self.config.manifest.label_column, self.columns)
        reader = BlockReader(client, self._endpoint["hot_dirs"])
        decoded: OrderedDict[int, Any] = OrderedDict()
        keep_decoded = 1 if self._reuse_gap() == 1 else self.window_blocks + 2
        report_every = max(1, min(32, self.config.prefetch.depth_blocks // 4))
        blocks, sample_block, sample_index = manifest.blocks, manifest.sample_block, manifest.sample_index
        try:
            for count, position in enumerate(positions.tolist(), start=1):
                sample_id = int(mine[position])
                block_id = int(sample_block[sample_id])
                samples = decoded.get(block_id)
                if samples is None:
                    raw = reader.read(stream_id, worker, position, blocks[block_id].key)
                    samples = self._decoder.decode(block_id, raw)
                    decoded[block_id] = samples
                    if len(decoded) > keep_decoded:
                        decoded.popitem(last=False)
                sample, label = samples[int(sample_index[sample_id])]
                if self.transform is not None:
                    sample = self.transform(sample)
                yield sample, label
                if count % report_every == 0:
                    client.notify("progress", stream_id, worker, position + 1)
        finally:
            try:
                client.notify("close_consumer", stream_id, worker)
            except ServiceError:
                pass

    # ------------------------------------------------------------------- stats
    def cache_stats(self) -> dict[str, Any]:
        """The node cache's counters, levels and streams (see :meth:`NodeCache.stats`)."""
        self.start()
        return self._client.call("stats")

    def epoch_stats(self, epoch: int) -> dict[str, float]:
        """Summed counters of this node's streams of ``epoch`` for this dataset."""
        self.start()
        totals: dict[str, float] = {}
        for row in self._client.call("stream_stats", self.manifest.dataset_id):
            if row["epoch"] != epoch:
                continue
            for name, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and name not in (
                        "epoch", "cursor", "consume_len"):
                    totals[name] = totals.get(name, 0) + value
        return totals
