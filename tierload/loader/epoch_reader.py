"""One pass of one DataLoader worker (or the main process) over a rank's epoch.

:class:`EpochReader` is handed one value, an :class:`EpochContext` (what a
:class:`tierload.loader.dataset.TieredDataset` knows of the epoch: manifest, the rank's order,
resume tracker, link to the node cache), opens the epoch's stream on the node cache, and yields
the worker's samples: blocks read from the hot tier (or through the node cache), decoded once
per shuffle window, moved to the output device, transformed.
"""

from __future__ import annotations

import logging
import os
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from tierload.data.block_columns import block_key_at
from tierload.data.layouts.registry import layout_spec
from tierload.data.order import WorkerPositions
from tierload.errors import ChannelLostError
from tierload.loader.consumer import BlockReader, NodeLink
from tierload.loader.resume import Progress, ResumeTracker
from tierload.process_memory import map_large_allocations, release_freed_memory

if TYPE_CHECKING:
    from tierload.data.layouts.base import BlockDecoder
    from tierload.data.manifest import Manifest
    from tierload.loader.consumer import DirectSource
    from tierload.loader.gpu import DeviceOutput
    from tierload.wire.messages import SeededStreamPlan, StreamPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class EpochContext:
    """What one pass over a rank's epoch needs from its dataset, handed over as one value.

    Attributes:
        epoch, rank, world: The epoch, this rank and the world size.
        order: int64 (samples of the rank,): the rank's sample ids for the epoch, in order.
        batch_size: The DataLoader's batch size the dataset was told (None: unknown).
        stream_prefix: The epoch's stream id without the iteration's key (``dataset/seed/epoch/rank/owner``).
        manifest: The dataset's manifest.
        link: The node cache.
        decoder: Cuts samples out of a block's raw bytes.
        output: Where samples go (host, or a device).
        transform: Applied to each sample, or None.
        keep_decoded: Decoded blocks kept at once (the shuffle window's reach).
        report_every: Samples between two progress reports to the node cache.
        resume: The dataset's resume tracker (the pending resume point, this pass's progress).
        plan: ``plan(rest, start_sample, start)``: what creates the stream for ``rest``, the rank's
            order from ``start_sample`` on, consumed from position ``start`` (a :class:`StreamPlan`,
            or its seeds for the node cache to derive it).
        open_stream: ``open_stream(link, stream_id, worker, workers, plan)`` joins the epoch's stream.
        direct_source: Builds the reader used while the node cache is unreachable.
        consumer_stats: The dataset's consumer counters; this pass's are added at its end.
        source_of_block: int (blocks,): a mixture's source of each block, or None (one dataset):
            a mixture yields ``(sample, label, source)``.
    """

    epoch: int
    rank: int
    world: int
    order: np.ndarray
    batch_size: int | None
    stream_prefix: str
    manifest: Manifest
    link: NodeLink
    decoder: BlockDecoder
    output: DeviceOutput
    transform: Callable[[Any], Any] | None
    keep_decoded: int
    report_every: int
    resume: ResumeTracker
    plan: Callable[[np.ndarray, int, int], StreamPlan | SeededStreamPlan]
    open_stream: Callable[[NodeLink, str, int, int, Callable[[], StreamPlan | SeededStreamPlan]], None]
    direct_source: Callable[[], DirectSource]
    consumer_stats: Counter
    source_of_block: np.ndarray | None = None


class EpochReader:
    """The samples one worker of this rank yields in the dataset's current epoch.

    Built in the process that iterates (a DataLoader worker, or the main process); takes the
    dataset's pending resume point, if any, for this iteration.

    Args:
        context: The epoch, as the dataset hands it over.
        info: ``torch.utils.data.get_worker_info()`` of this process (None: the main process).
    """

    def __init__(self, context: EpochContext, info: Any) -> None:
        if info is not None:
            map_large_allocations()  # a worker's per-epoch arrays leave with their epoch
        self.context = context
        self.info = info
        self.worker: int = info.id if info is not None else 0
        self.workers: int = info.num_workers if info is not None else 1
        self.epoch = context.epoch
        key, self.point = context.resume.begin(info, self.epoch)
        self.rank, self.world = context.rank, context.world
        self.mine = context.order
        self.start = self.point.start if self.point is not None else 0
        self.rest = self.mine[self.start:]
        self.chunk = context.batch_size or 1
        self.positions = WorkerPositions(len(self.rest), worker_id=self.worker, num_workers=self.workers,
                                          chunk=self.chunk)
        self.skip = self.point.skip if self.point is not None else 0
        self.stream_id = f"{context.stream_prefix}.{key:x}"

    # ------------------------------------------------------------ the stream
    def _plan(self) -> StreamPlan | SeededStreamPlan:
        start = self.point.lower_bound if self.point is not None else 0
        return self.context.plan(self.rest, self.start, start)

    def _open(self, link: NodeLink) -> None:
        self.context.open_stream(link, self.stream_id, self.worker, self.workers, self._plan)
        # A plan sent itself (the next epoch's order, the block sequence, its pickled message: ~40 MB
        # at a million samples) is garbage now; the C heap would keep its pages for the whole epoch.
        release_freed_memory()

    def _warn_about_batches(self) -> None:
        batch_size = self.context.batch_size
        if self.worker == 0 and batch_size and len(self.mine) < batch_size:
            log.warning("rank %d yields %d samples per epoch, fewer than batch_size=%d: a DataLoader with "
                        "drop_last=True yields no batch at all", self.rank, len(self.mine), batch_size)
        if self.info is not None and self.workers > 1 and batch_size is None:
            log.warning("TieredDataset without batch_size under %d DataLoader workers: each worker ends the epoch "
                        "with its own partial batch; pass batch_size= for exact batches and len(loader)",
                        self.workers)
        if self.point is not None and self.worker == 0:
            log.info("resuming epoch %d of rank %d at sample %d of %d", self.epoch, self.rank,
                     self.start + (self.point.lower_bound if self.point.worker else 0), len(self.mine))

    # ------------------------------------------------------------- iterating
    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        """Yield ``(sample, label)`` (a mixture's ``(sample, label, source)``) for this worker's
        positions of the epoch, from the resume point on."""
        context = self.context
        manifest, link, decoder = context.manifest, context.link, context.decoder
        progress = context.resume.track(Progress(os.getpid(), self.epoch, self.start, self.positions, self.chunk,
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
        direct_layout = layout_spec(manifest.layout).supports_direct_read
        device, kvikio = context.output.prepare(self.info is not None, direct_layout)
        block_device = device if direct_layout else None  # pinned-copy path: whole blocks to the device
        if device is not None:  # imported once per epoch, not once per block or sample
            from tierload.loader.gpu import block_to_device, sample_to_device
        reader = BlockReader(link, direct=context.direct_source, reopen=self._open)
        decoded: OrderedDict[int, Any] = OrderedDict()
        keep_decoded, report_every, transform = context.keep_decoded, context.report_every, context.transform
        blocks, sample_block, sample_index = manifest.blocks, manifest.sample_block, manifest.sample_index
        source_of_block = context.source_of_block
        try:
            for index in range(self.skip, len(self.positions)):
                position = int(self.positions[index])
                sample_id = int(self.rest[position])
                block_id = int(sample_block[sample_id])
                samples = decoded.get(block_id)
                if samples is None:
                    block_key = block_key_at(blocks, block_id)  # no Block made from a mapped manifest
                    raw: Any = (context.output.read_direct(reader.hot_path(block_key), block_key, reader.secret)
                                if kvikio else None)
                    if raw is None:
                        raw = reader.read(self.stream_id, self.worker, position, block_key)
                        if block_device is not None:
                            raw = block_to_device(raw, block_device)
                    else:
                        context.consumer_stats["device_direct_reads"] += 1
                    samples = decoder.decode(block_id, raw)
                    decoded[block_id] = samples
                    if len(decoded) > keep_decoded:
                        decoded.popitem(last=False)
                sample, label = samples[int(sample_index[sample_id])]
                if device is not None:
                    sample = sample_to_device(sample, device)
                if transform is not None:
                    sample = transform(sample)
                progress.yielded = index + 1
                if source_of_block is None:
                    yield sample, label
                else:
                    yield sample, label, int(source_of_block[block_id])
                if (index + 1 - self.skip) % report_every == 0:
                    consumed = position + 1
                    link.notify(lambda cache: cache.progress(self.stream_id, self.worker, consumed,  # noqa: B023 - called at once
                                                             link.identity))
        finally:
            link.notify(lambda cache: cache.close_consumer(self.stream_id, self.worker, link.identity))
            context.consumer_stats.update(reader.stats)
