"""One pass of one DataLoader worker (or the main process) over a rank's epoch.

:class:`EpochReader` takes what a :class:`tierload.loader.dataset.TieredDataset` knows (manifest,
order, resume point, link to the node cache) for one (epoch, worker), opens the epoch's stream
on the node cache, and yields the worker's samples: blocks read from the hot tier (or through
the node cache), decoded once per shuffle window, moved to the output device, transformed.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Iterator

from tierload.data.layouts.registry import layout_spec
from tierload.data.order import worker_positions
from tierload.errors import ChannelLostError
from tierload.loader.consumer import BlockReader, NodeLink
from tierload.loader.resume import Progress
from tierload.process_memory import map_large_allocations, release_freed_memory

if TYPE_CHECKING:
    from tierload.loader.dataset import TieredDataset
    from tierload.wire.messages import StreamPlan

log = logging.getLogger(__name__)


class EpochReader:
    """The samples one worker of this rank yields in the dataset's current epoch.

    Built in the process that iterates (a DataLoader worker, or the main process); takes the
    dataset's pending resume point, if any, for this iteration.

    Args:
        dataset: A started dataset (its manifest and node-cache link are set).
        info: ``torch.utils.data.get_worker_info()`` of this process (None: the main process).
    """

    def __init__(self, dataset: TieredDataset, info: Any) -> None:
        if info is not None:
            map_large_allocations()  # a worker's per-epoch arrays leave with their epoch
        self.dataset = dataset
        self.info = info
        self.worker: int = info.id if info is not None else 0
        self.workers: int = info.num_workers if info is not None else 1
        self.epoch = dataset.epoch
        key, self.point = dataset._resume.begin(info, self.epoch)
        self.rank, self.world = dataset._rank_world()
        self.mine = dataset.rank_order(self.epoch)
        self.start = self.point.start if self.point is not None else 0
        self.rest = self.mine[self.start:]
        self.chunk = dataset.batch_size or 1
        self.positions = worker_positions(len(self.rest), worker_id=self.worker, num_workers=self.workers,
                                          chunk=self.chunk)
        self.skip = self.point.skip if self.point is not None else 0
        manifest = dataset.manifest
        self.stream_id = (f"{manifest.dataset_id}/s{dataset.seed}/e{self.epoch}/r{self.rank}of{self.world}/"
                          f"{dataset._stream_owner}.{key:x}")

    # ------------------------------------------------------------ the stream
    def _plan(self) -> StreamPlan:
        start = self.point.lower_bound if self.point is not None else 0
        return self.dataset._plan(self.epoch, self.rest, start, self.rank, self.world)

    def _open(self, link: NodeLink) -> None:
        self.dataset._open_stream(link, self.stream_id, self.worker, self.workers, self._plan)
        # The plan (the next epoch's order, the block sequence, its pickled message: ~40 MB at a
        # million samples) is garbage now; the C heap would keep its pages for the whole epoch.
        release_freed_memory()

    def _warn_about_batches(self) -> None:
        dataset = self.dataset
        if self.worker == 0 and dataset.batch_size and len(self.mine) < dataset.batch_size:
            log.warning("rank %d yields %d samples per epoch, fewer than batch_size=%d: a DataLoader with "
                        "drop_last=True yields no batch at all", self.rank, len(self.mine), dataset.batch_size)
        if self.info is not None and self.workers > 1 and dataset.batch_size is None:
            log.warning("TieredDataset without batch_size under %d DataLoader workers: each worker ends the epoch "
                        "with its own partial batch; pass batch_size= for exact batches and len(loader)",
                        self.workers)
        if self.point is not None and self.worker == 0:
            log.info("resuming epoch %d of rank %d at sample %d of %d", self.epoch, self.rank,
                     self.start + (self.point.lower_bound if self.point.worker else 0), len(self.mine))

    # ------------------------------------------------------------- iterating
    def __iter__(self) -> Iterator[tuple[Any, int]]:
        """Yield ``(sample, label)`` for this worker's positions of the epoch, from the resume point on."""
        dataset = self.dataset
        manifest = dataset.manifest
        link = dataset._link
        assert link is not None, "EpochReader needs a started dataset"
        progress = dataset._resume.track(Progress(os.getpid(), self.epoch, self.start, self.positions, self.chunk,
                                                  self.worker, self.workers, self.info is not None, self.skip))
        self._warn_about_batches()
        try:
            self._open(link)
        except ChannelLostError as exc:
            # No node cache answers (e.g. the job whose cache this one joined has ended and this
            # process's keeper is still starting one): read blocks directly; the reader opens the
            # stream on the cache once it is back.
            log.warning("no node cache answers (%s); epoch %d reads blocks directly until one is back", exc,
                        self.epoch)
        decoder = dataset._decoder
        if decoder is None:  # kept on the dataset: built once per process, not once per epoch
            decoder = dataset._decoder = manifest.decoder(dataset.config.manifest.label_column, dataset.columns)
        direct_layout = layout_spec(manifest.layout).supports_direct_read
        device, kvikio = dataset._output.prepare(self.info is not None, direct_layout)
        block_device = device if direct_layout else None  # pinned-copy path: whole blocks to the device
        if device is not None:  # imported once per epoch, not once per block or sample
            from tierload.loader.gpu import block_to_device, sample_to_device
        reader = BlockReader(link, direct=dataset._direct_source, reopen=self._open)
        decoded: OrderedDict[int, Any] = OrderedDict()
        keep_decoded = 1 if dataset._reuse_gap() == 1 else dataset.window_blocks + 2
        report_every = max(1, min(32, dataset.config.prefetch.depth_blocks // 4))
        blocks, sample_block, sample_index = manifest.blocks, manifest.sample_block, manifest.sample_index
        try:
            for index in range(self.skip, len(self.positions)):
                position = int(self.positions[index])
                sample_id = int(self.rest[position])
                block_id = int(sample_block[sample_id])
                samples = decoded.get(block_id)
                if samples is None:
                    block_key = blocks[block_id].key
                    raw: Any = (dataset._output.read_direct(reader.hot_path(block_key), block_key, reader.secret)
                                if kvikio else None)
                    if raw is None:
                        raw = reader.read(self.stream_id, self.worker, position, block_key)
                        if block_device is not None:
                            raw = block_to_device(raw, block_device)
                    else:
                        dataset.consumer_stats["device_direct_reads"] += 1
                    samples = decoder.decode(block_id, raw)
                    decoded[block_id] = samples
                    if len(decoded) > keep_decoded:
                        decoded.popitem(last=False)
                sample, label = samples[int(sample_index[sample_id])]
                if device is not None:
                    sample = sample_to_device(sample, device)
                if dataset.transform is not None:
                    sample = dataset.transform(sample)
                progress.yielded = index + 1
                yield sample, label
                if (index + 1 - self.skip) % report_every == 0:
                    consumed = position + 1
                    link.notify(lambda cache: cache.progress(self.stream_id, self.worker, consumed))  # noqa: B023 - called at once
        finally:
            link.notify(lambda cache: cache.close_consumer(self.stream_id, self.worker))
            dataset.consumer_stats.update(reader.stats)
