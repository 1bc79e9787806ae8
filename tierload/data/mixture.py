"""A weighted mixture of sources as one dataset: one global sample-id space, one epoch order.

Pure arithmetic (no Ray, no I/O), shared by :class:`tierload.loader.dataset.TieredDataset` over
several sources and by the simulator (``tierload policy simulate --mix``).

Semantics (the user-facing rules, also in ``docs/mixtures.md``):

1. **Ids.** Source ``s``'s local sample ``i`` has the global id ``sample_offsets[s] + i``; its
   local block ``b`` is global block ``block_offsets[s] + b``. The mixture is one block list (the
   sources' lists concatenated), so the node cache plans, prefetches and evicts the mixed order
   as one stream, with one hot and warm budget.
2. **Samples per epoch.** ``epoch_samples`` (default: the sizes of the sources with a positive
   weight, summed). Source ``s`` gets ``n_s`` of them: ``epoch_samples * w_s / sum(w)`` rounded
   by the largest-remainder rule (ties to the lower source index), so the counts sum exactly to
   ``epoch_samples`` and do not change from epoch to epoch while the weights do not.
3. **Passes.** Each source is read as an endless stream of passes; pass ``p`` is the source's
   own epoch order (:func:`tierload.data.order.epoch_order` with the source's seed
   :func:`source_seed` and ``epoch=p``). Epoch ``e`` takes the source's stream positions
   ``start_s(e) .. start_s(e) + n_s - 1``, where ``start_s(e)`` is the sum of ``n_s`` over
   the epochs before ``e``. A source smaller than its share wraps into its next pass (a new
   shuffle) inside the epoch; a larger one continues its pass in the next epoch. Within each
   pass every sample of the source comes exactly once.
4. **Interleaving.** Which position of the epoch comes from which source is a seeded shuffle of
   ``n_0`` zeros, ``n_1`` ones, ... (seed and epoch), so every stretch of the epoch holds the
   sources near their weights; each source's samples appear in its stream order.
5. **Weight 0.** The source contributes nothing (its blocks are registered, never read); its
   stream does not advance.
6. **Curriculum.** ``curriculum`` is a step schedule ``((from_epoch, weights), ...)``: the
   weights of epoch ``e`` are those of the last step with ``from_epoch <= e`` (the sources'
   weights before the first step). ``start_s(e)`` sums each epoch's own ``n_s``, so a change
   of weights keeps every source's passes continuous. Changing weights *without* declaring the
   step recomputes ``start_s`` as if the new weights had always held: the order is still a pure
   function, but the pass at the change may repeat or skip samples.

Everything is a pure function of (seed, epoch, weights and curriculum, source sizes and block
layout, shuffle modes), so every rank, DataLoader worker and simulator computes the same order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import xxhash

from tierload.data.order import SHUFFLE_MODES, epoch_order, reuse_gap
from tierload.errors import ConfigError

_INTERLEAVE_STREAM = 0x313C


def check_weights(weights: Sequence[float], count: int, where: str = "weights") -> tuple[float, ...]:
    """``weights`` as floats, checked: one per source, finite, >= 0, at least one > 0.

    Raises:
        ConfigError: A missing, extra, negative or non-finite weight, or all of them 0.
    """
    try:
        values = tuple(float(w) for w in weights)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}={list(weights)!r}; weights must be numbers") from None
    if len(values) != count:
        raise ConfigError(f"{where} has {len(values)} weight(s) for {count} source(s); give one per source")
    if any(not math.isfinite(w) or w < 0 for w in values) or not any(w > 0 for w in values):
        raise ConfigError(f"{where}={list(values)!r}; weights must be finite, >= 0, and at least one > 0")
    return values


def split_counts(total: int, weights: Sequence[float]) -> np.ndarray:
    """``total`` split in proportion to ``weights`` by the largest-remainder (Hamilton) rule.

    Args:
        total: Samples to split (>= 0).
        weights: One weight per source (checked by :func:`check_weights`).

    Returns:
        int64 (sources,): counts that sum to ``total``; ties of remainders go to the lower index.
    """
    share = np.asarray(weights, dtype=np.float64)
    quota = share / share.sum() * total
    counts = np.floor(quota).astype(np.int64)
    left = int(total - counts.sum())
    if left > 0:
        by_remainder = np.argsort(-(quota - counts), kind="stable")
        counts[by_remainder[:left]] += 1
    return counts


def source_seed(seed: int, source: int) -> int:
    """The shuffle seed of source ``source``'s passes: a 32-bit hash of (seed, source)."""
    return xxhash.xxh32_intdigest(f"{int(seed)}/{int(source)}".encode())


@dataclass(frozen=True, eq=False)
class Mixture:
    """Sources with weights as one dataset (see the module docstring for the rules).

    Attributes:
        sample_blocks: Per source, int array (samples,): local block index of each sample.
        num_blocks: Per source, its block count (a block may hold no sample).
        weights: Per source, its weight (>= 0, at least one > 0).
        shuffles: Per source, its resolved shuffle mode (``"sample"``, ``"block"``, ``"none"``).
        window_blocks: Blocks per shuffle window of the block-aware sources.
        epoch_samples: Samples per epoch (None: the sizes of positively weighted sources, summed).
        curriculum: ``((from_epoch, weights), ...)`` steps, from_epoch increasing.

    Raises:
        ConfigError: Mismatched lengths, bad weights, an empty source or a bad curriculum.
    """

    sample_blocks: tuple[np.ndarray, ...]
    num_blocks: tuple[int, ...]
    weights: tuple[float, ...]
    shuffles: tuple[str, ...]
    window_blocks: int = 8
    epoch_samples: int | None = None
    curriculum: tuple[tuple[int, tuple[float, ...]], ...] = ()
    sizes: np.ndarray = field(init=False)
    sample_offsets: np.ndarray = field(init=False)
    block_offsets: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        count = len(self.sample_blocks)
        if count < 1 or len(self.num_blocks) != count or len(self.shuffles) != count:
            raise ConfigError(f"a mixture needs one block count and shuffle per source; got {count} source(s), "
                              f"{len(self.num_blocks)} block counts, {len(self.shuffles)} shuffles")
        object.__setattr__(self, "weights", check_weights(self.weights, count))
        bad = [mode for mode in self.shuffles if mode not in SHUFFLE_MODES]
        if bad:
            raise ConfigError(f"shuffles={list(self.shuffles)!r}; each must be one of {', '.join(SHUFFLE_MODES)}")
        sizes = np.array([len(blocks) for blocks in self.sample_blocks], dtype=np.int64)
        if (sizes == 0).any():
            raise ConfigError(f"source(s) {np.flatnonzero(sizes == 0).tolist()} hold no samples; a mixture "
                              "needs every source non-empty")
        if self.epoch_samples is not None and int(self.epoch_samples) < 1:
            raise ConfigError(f"epoch_samples={self.epoch_samples!r}; it must be >= 1 or None")
        steps = [(int(start), check_weights(weights, count, f"curriculum[{start}]"))
                 for start, weights in self.curriculum]
        if any(start < 0 for start, _ in steps) or any(a[0] >= b[0] for a, b in zip(steps, steps[1:], strict=False)):
            raise ConfigError(f"curriculum epochs {[start for start, _ in steps]}; they must be >= 0 and increasing")
        object.__setattr__(self, "curriculum", tuple(steps))
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "sample_offsets", np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
        object.__setattr__(self, "block_offsets",
                           np.concatenate([[0], np.cumsum(np.asarray(self.num_blocks, np.int64))]).astype(np.int64))

    # ------------------------------------------------------------------ shape
    @property
    def num_sources(self) -> int:
        return len(self.sample_blocks)

    @property
    def num_samples(self) -> int:
        """Samples of all sources together (the global id space)."""
        return int(self.sample_offsets[-1])

    def sample_block(self) -> np.ndarray:
        """int64 (num_samples,): global block index of each global sample id."""
        offsets = self.block_offsets[:-1].tolist()
        return np.concatenate([np.asarray(blocks, np.int64) + offset
                               for blocks, offset in zip(self.sample_blocks, offsets, strict=True)])

    def source_of(self, sample_ids: np.ndarray) -> np.ndarray:
        """int64: the source of each global sample id."""
        return np.searchsorted(self.sample_offsets, sample_ids, side="right").astype(np.int64) - 1

    def source_of_block(self) -> np.ndarray:
        """int16 (blocks,): the source of each global block."""
        return np.repeat(np.arange(self.num_sources, dtype=np.int16), np.asarray(self.num_blocks, np.int64))

    # ------------------------------------------------------------ the schedule
    def weights_at(self, epoch: int) -> tuple[float, ...]:
        """The weights in force in ``epoch`` (the curriculum's last step at or before it)."""
        weights = self.weights
        for start, step in self.curriculum:
            if start > epoch:
                break
            weights = step
        return weights

    def samples_per_epoch(self, epoch: int = 0) -> int:
        """Samples in ``epoch``: ``epoch_samples``, or the positively weighted sources' sizes summed."""
        if self.epoch_samples is not None:
            return int(self.epoch_samples)
        weights = np.asarray(self.weights_at(epoch))
        return int(self.sizes[weights > 0].sum())

    def counts(self, epoch: int) -> np.ndarray:
        """int64 (sources,): samples each source gives ``epoch`` (rule 2)."""
        return split_counts(self.samples_per_epoch(epoch), self.weights_at(epoch))

    def stream_starts(self, epoch: int) -> np.ndarray:
        """int64 (sources,): each source's stream position at the start of ``epoch`` (rule 3)."""
        starts = np.zeros(self.num_sources, np.int64)
        bounds = [0, *(start for start, _ in self.curriculum if 0 < start < epoch), epoch]
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            if hi > lo:
                starts += (hi - lo) * self.counts(lo)
        return starts

    # -------------------------------------------------------------- the order
    def pass_order(self, source: int, seed: int, pass_index: int) -> np.ndarray:
        """int64 (size of source,): local sample ids of the source's pass ``pass_index``."""
        return epoch_order(self.sample_blocks[source], seed=source_seed(seed, source), epoch=pass_index,
                           shuffle=self.shuffles[source], window_blocks=self.window_blocks)

    def interleave(self, seed: int, epoch: int) -> np.ndarray:
        """int16 (samples per epoch,): the source of each position of ``epoch`` (rule 4)."""
        labels = np.repeat(np.arange(self.num_sources, dtype=np.int16), self.counts(epoch))
        np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch) & 0xFFFFFFFF, _INTERLEAVE_STREAM]).shuffle(labels)
        return labels

    def epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        """The mixed order of one epoch, as global sample ids (rules 2-5).

        Returns:
            int64 (samples per epoch,): global sample ids; a source smaller than its share
            appears in more than one of its passes, each pass exactly once.
        """
        labels = self.interleave(seed, epoch)
        counts, starts = self.counts(epoch), self.stream_starts(epoch)
        order = np.empty(len(labels), np.int64)
        for source in np.flatnonzero(counts).tolist():
            size = int(self.sizes[source])
            stream = starts[source] + np.arange(counts[source], dtype=np.int64)
            ids = np.empty(len(stream), np.int64)
            passes = stream // size
            for pass_index in np.unique(passes).tolist():
                here = passes == pass_index
                ids[here] = self.pass_order(source, seed, pass_index)[stream[here] % size]
            order[labels == source] = ids + self.sample_offsets[source]
        return order

    def reuse_gap(self, epoch: int = 0) -> int:
        """Positions within which two reads of a block are one access (the sources' gaps, stretched
        by the interleave: a source with a ``1/k`` share spreads its window over ``k`` times the positions)."""
        counts = self.counts(epoch)
        total = max(int(counts.sum()), 1)
        gap = 1
        for source in np.flatnonzero(counts).tolist():
            own = reuse_gap(np.asarray(self.sample_blocks[source]), self.window_blocks)
            if own > 1:  # the interleave is random: a quarter more room than the mean stretch
                gap = max(gap, math.ceil(own * total / int(counts[source]) * 1.25))
        return gap
