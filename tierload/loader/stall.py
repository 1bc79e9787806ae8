"""Data-stall accounting: how long the training loop waited for data, per epoch and rank.

The loop's time splits in two: inside ``next()`` (waiting for the next sample or batch: the
stall) and everywhere else (computing). Measured where the loop receives its data:

* iterating a :class:`~tierload.loader.dataset.TieredDataset` in the main process (directly, or a
  ``DataLoader`` with ``num_workers=0``): the dataset measures itself, per sample;
* a ``DataLoader`` with workers: the samples are made in other processes, so measure where the
  main process receives batches, by wrapping the loader: ``for batch in tierload.watch(loader)``.

Both feed the dataset's :class:`StallMeter`: ``dataset.stall_stats()`` returns its epochs, the
``tierload_stall_seconds``/``tierload_loop_seconds``/``tierload_samples`` metrics carry the same
figures per rank, and one line is logged at the end of each epoch (:func:`summary_line`).

An epoch's clock runs from ``iter()`` to the end of the iteration (exhausted, or closed by a
``break``); time inside ``next()``, including the first one (worker start-up, cold first
fetches), is stall. This is the benchmark's definition (:func:`tierload_tools.bench.loop.run_epochs`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping

from tierload.errors import TierloadError
from tierload.units import format_bytes

if TYPE_CHECKING:
    from tierload.loader.consumer import NodeLink
    from tierload.loader.dataset import TieredDataset

log = logging.getLogger(__name__)


@dataclass
class EpochStall:
    """One epoch of one rank, as the training loop saw it.

    Attributes:
        epoch: The dataset's epoch (or the loader's iteration count when not a TieredDataset).
        samples: Samples received (a batch counts its length).
        batches: Items received from ``next()``.
        seconds: Wall seconds from ``iter()`` to the end of the iteration.
        stall_s: Seconds spent inside ``next()``.
    """

    epoch: int
    samples: int = 0
    batches: int = 0
    seconds: float = 0.0
    stall_s: float = 0.0

    @property
    def stall_fraction(self) -> float:
        """``stall_s / seconds`` (0 for an empty epoch)."""
        return self.stall_s / self.seconds if self.seconds > 0 else 0.0

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    def row(self) -> dict[str, Any]:
        """The epoch as a plain dict, with ``stall_fraction`` and ``samples_per_s``."""
        return {**asdict(self), "stall_fraction": self.stall_fraction, "samples_per_s": self.samples_per_s}


class StallMeter:
    """The epochs one process measured (single consumer: the training loop's thread).

    Args:
        on_epoch_end: Called with each finished :class:`EpochStall`.
        on_progress: Called with the running epoch every ``progress_interval_s`` seconds (checked
            after each item; e.g. to export the metrics during a long epoch).
        progress_interval_s: See ``on_progress``.
        keep: Finished epochs kept for :meth:`stats`.
    """

    def __init__(self, on_epoch_end: Callable[[EpochStall], None] | None = None,
                 on_progress: Callable[[EpochStall], None] | None = None, progress_interval_s: float = 5.0,
                 keep: int = 1000) -> None:
        self.on_epoch_end = on_epoch_end
        self.on_progress = on_progress
        self.progress_interval_s = progress_interval_s
        self.keep = keep
        self.finished: list[EpochStall] = []
        self.current: EpochStall | None = None
        self.watched = 0  # watch() wrappers iterating now: the dataset then does not measure itself too

    def timed(self, iterator: Iterator, epoch: int, count: Callable[[Any], int] | None = None,
              started: float | None = None) -> Iterator:
        """Yield ``iterator``'s items, timing each ``next()``; the epoch ends when it does.

        The running figures are kept in locals (this wraps every sample of a main-process loop)
        and written to :attr:`current` at each progress report and at the end.

        Args:
            iterator: What the loop iterates (already made by ``iter()``).
            epoch: The epoch's number.
            count: Samples in one item (None: one sample per item; :func:`batch_length` for batches).
            started: ``time.perf_counter()`` when ``iter()`` was called (default: now).
        """
        clock = time.perf_counter
        current = self.current = EpochStall(epoch)
        started = clock() if started is None else started
        next_report = started + self.progress_interval_s if self.on_progress is not None else float("inf")
        stall_s, items, samples = 0.0, 0, 0
        try:
            while True:
                asked = clock()
                try:
                    item = next(iterator)
                except StopIteration:
                    stall_s += clock() - asked
                    return
                received = clock()
                stall_s += received - asked
                items += 1
                if count is not None:
                    samples += count(item)
                if received > next_report:
                    next_report = received + self.progress_interval_s
                    current.stall_s, current.batches, current.seconds = stall_s, items, received - started
                    current.samples = samples if count is not None else items
                    self._report(self.on_progress, current)  # type: ignore[arg-type]
                yield item
        finally:
            current.seconds = clock() - started
            current.stall_s, current.batches = stall_s, items
            current.samples = samples if count is not None else items
            close = getattr(iterator, "close", None)
            if close is not None:
                close()  # a generator's own clean-up (e.g. the reader's end of stream) runs now, not at GC
            self._finish(current)

    def _finish(self, epoch: EpochStall) -> None:
        self.current = None
        self.finished.append(epoch)
        del self.finished[:-self.keep]
        if self.on_epoch_end is not None:
            self._report(self.on_epoch_end, epoch)

    @staticmethod
    def _report(report: Callable[[EpochStall], None], epoch: EpochStall) -> None:
        try:
            report(epoch)
        except Exception:  # noqa: BLE001 - reporting must never break the training loop
            log.warning("reporting the stall figures of epoch %d failed", epoch.epoch, exc_info=True)

    def stats(self) -> dict[str, Any]:
        """``{"epochs": [row, ...], "current": row | None, "total": row}`` (rows: :meth:`EpochStall.row`;
        ``current`` is the running epoch as of its last progress report; the total's ``epoch`` is
        the number of epochs)."""
        total = EpochStall(len(self.finished))
        for epoch in self.finished:
            total.samples += epoch.samples
            total.batches += epoch.batches
            total.seconds += epoch.seconds
            total.stall_s += epoch.stall_s
        return {"epochs": [epoch.row() for epoch in self.finished],
                "current": self.current.row() if self.current is not None else None, "total": total.row()}


def batch_length(batch: Any) -> int:
    """Samples in a batch: ``(samples, labels)`` counts its labels; a dict its first sized value;
    a tensor or array its first dimension; anything else 1."""
    if isinstance(batch, (tuple, list)) and batch and hasattr(batch[-1], "__len__"):
        return len(batch[-1])
    if isinstance(batch, Mapping):
        for value in batch.values():
            if hasattr(value, "__len__"):
                return len(value)
        return 1
    shape = getattr(batch, "shape", None)
    return int(shape[0]) if shape else 1


class WatchedLoader:
    """A loader whose iterations are timed where the main process receives batches (see :func:`watch`)."""

    def __init__(self, loader: Iterable, meter: StallMeter, epoch: Callable[[], int]) -> None:
        self.loader = loader
        self.meter = meter
        self._epoch = epoch

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # The wrapped loader's attributes (dataset, batch_size, ...) read through; only iteration is ours.
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator:
        started = time.perf_counter()
        iterator = iter(self.loader)  # DataLoader starts its workers here: loop time, not stall (as the benchmark)
        return self._iterate(iterator, started)

    def _iterate(self, iterator: Iterator, started: float) -> Iterator:
        self.meter.watched += 1
        try:
            yield from self.meter.timed(iterator, self._epoch(), batch_length, started)
        finally:
            self.meter.watched -= 1


def watch(loader: Iterable, dataset: TieredDataset | None = None) -> WatchedLoader:
    """Measure the data stall of a loader's epochs where the main process receives its batches.

    Use it with a ``DataLoader`` whose workers run in other processes (the dataset cannot see
    the loop from there)::

        loader = tierload.watch(DataLoader(dataset, batch_size=64, num_workers=4))
        for epoch in range(epochs):
            dataset.set_epoch(epoch)
            for images, labels in loader:
                ...
        print(dataset.stall_stats())

    Each ``iter()`` of the wrapper is one epoch; len() and the loader's attributes read through.

    Args:
        loader: Any iterable of batches (a ``DataLoader``, ``StatefulDataLoader``, ...).
        dataset: Where the figures go (default: ``loader.dataset`` when it is a ``TieredDataset``;
            then ``dataset.stall_stats()``, the metrics and the end-of-epoch line carry them). For
            another dataset, the wrapper keeps its own meter: ``wrapped.meter.stats()``.

    Returns:
        The wrapped loader.
    """
    from tierload.loader.dataset import TieredDataset

    dataset = dataset if dataset is not None else getattr(loader, "dataset", None)
    if isinstance(dataset, TieredDataset):
        ds = dataset
        return WatchedLoader(loader, ds._stall, lambda: ds.epoch)
    meter = StallMeter()
    return WatchedLoader(loader, meter, lambda: len(meter.finished))


def summary_line(rank: int, epoch: EpochStall, node_epoch: Mapping[str, float] | None) -> str:
    """The end-of-epoch line: samples/s, stall %, hit ratios per tier and S3 bytes.

    Args:
        rank: The training rank.
        epoch: What the loop measured.
        node_epoch: The node cache's summed stream counters of the epoch
            (:meth:`TieredDataset.epoch_stats`; every rank of this node), or None if unknown.
    """
    from tierload.node.stats import hit_ratios

    line = (f"epoch {epoch.epoch} rank {rank}: {epoch.samples:,} samples in {epoch.seconds:.1f} s "
            f"({epoch.samples_per_s:,.0f} samples/s), stall {100 * epoch.stall_fraction:.1f}% "
            f"({epoch.stall_s:.2f} s waiting in next())")
    if node_epoch:
        ratios = hit_ratios(dict(node_epoch))
        line += "; hits " + " ".join(f"{tier} {100 * ratio:.0f}%" for tier, ratio in ratios.items())
        line += (f"; S3 {format_bytes(node_epoch.get('cold_bytes', 0))} in {int(node_epoch.get('cold_gets', 0)):,} "
                 "GETs (this node)")
    return line


# Running totals per (rank, dataset id) of this process, over every meter: two datasets of the
# same data in one process add up instead of each resetting the other's counters.
_TOTALS: dict[tuple[int, str], EpochStall] = {}
# Per (rank, dataset id): the totals a node cache has received from this process (a job without Ray).
_SENT: dict[tuple[int, str], tuple[float, float, int]] = {}


def export_rank(rank: int, dataset_id: str, epoch: EpochStall, finished: bool, link: NodeLink | None = None) -> None:
    """Export a rank's running totals (finished epochs plus ``epoch``) as the stall metrics.

    A process connected to Ray exports them itself (:func:`~tierload.metrics.sinks.default_sink`).
    One without Ray (a job that joined ``tierload serve`` or another job's cache) sends what
    was not sent yet to its node cache over ``link``, and the cache, which runs in Ray, exports
    them with the ``rank`` label; a report that does not arrive is sent with the next one.

    Args:
        rank: The training rank.
        dataset_id: The dataset's id (the ``dataset`` label).
        epoch: The running epoch (``finished=False``: its figures so far) or one that ended.
        finished: Whether ``epoch`` is over (it is then added to the totals).
        link: The dataset's node cache (None: export in this process).
    """
    from tierload.metrics.samples import rank_samples
    from tierload.metrics.sinks import default_sink
    from tierload.ray_presence import ray_connected

    total = _TOTALS.setdefault((rank, dataset_id), EpochStall(0))
    stall_s, seconds = total.stall_s + epoch.stall_s, total.seconds + epoch.seconds
    samples = total.samples + epoch.samples
    if finished:
        total.stall_s, total.seconds, total.samples = stall_s, seconds, samples
    if link is not None and not ray_connected():
        _send_to_node_cache(link, rank, dataset_id, stall_s, seconds, samples)
        return
    default_sink().push(rank_samples(rank, dataset_id, stall_s, seconds, samples), f"rank:{rank}:{dataset_id}")


def _send_to_node_cache(link: NodeLink, rank: int, dataset_id: str, stall_s: float, loop_s: float,
                        samples: int) -> None:
    """Send the node cache the increase of a rank's totals since the last report it received."""
    from tierload.wire.messages import LoopReport

    sent_stall, sent_loop, sent_samples = _SENT.get((rank, dataset_id), (0.0, 0.0, 0))
    report = LoopReport(rank, dataset_id, max(0.0, stall_s - sent_stall), max(0.0, loop_s - sent_loop),
                        max(0, samples - sent_samples))
    if not (report.stall_s or report.loop_s or report.samples):
        return
    try:
        link.call(lambda cache: cache.report_loop(report))
    except (TierloadError, OSError) as exc:  # kept for the next report; the loop never fails for a metric
        log.debug("the node cache did not take rank %d's loop figures (%s); they go with the next report", rank, exc)
        return
    _SENT[(rank, dataset_id)] = (stall_s, loop_s, samples)


def report_epoch(dataset: TieredDataset, epoch: EpochStall) -> None:
    """End of an epoch measured in this process: log :func:`summary_line`, export the metrics."""
    rank = dataset._rank_world()[0]
    if dataset.config.metrics.enabled:
        export_rank(rank, dataset.manifest.dataset_id, epoch, finished=True, link=dataset._link)
    if not log.isEnabledFor(logging.INFO):
        return  # the node's counters cost a call to the node cache: only when the line is shown

    try:
        node_epoch: Mapping[str, float] | None = dataset.epoch_stats(epoch.epoch)
    except (TierloadError, OSError) as exc:
        log.debug("no node counters for epoch %d: %s", epoch.epoch, exc)
        node_epoch = None
    log.info("%s", summary_line(rank, epoch, node_epoch))


def report_progress(dataset: TieredDataset, epoch: EpochStall) -> None:
    """During an epoch: export the rank's stall metrics so far."""
    if dataset.config.metrics.enabled:
        export_rank(dataset._rank_world()[0], dataset.manifest.dataset_id, epoch, finished=False,
                    link=dataset._link)
