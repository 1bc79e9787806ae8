"""Belady's MIN per epoch of a benchmark run, from the simulator's implementation.

MIN is computed on the same accesses the node cache's hot-hit counter counts (one per counted
run of :func:`tierload.data.runs.counted_runs`, as the simulator's traces), not one per sample:
consecutive samples of one block are one access. When every block has the same size MIN is the
optimum and ``hot hit <= MIN`` holds over the run; with blocks of different sizes Belady's rule
is a reference, not a bound (the optimum is NP-hard there: Chrobak et al., "Caching Is Hard --
Even in the Fault Model", Algorithmica 63, 2012), and a policy may beat it by a few accesses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tierload.data.block_columns import block_lengths
from tierload.data.runs import counted_runs
from tierload.frames.blockfile import HEADER_SIZE
from tierload.simulator.belady import min_hit_flags, min_is_exact


@dataclass(frozen=True)
class MinReference:
    """Belady's MIN per epoch of a run.

    Attributes:
        ratios: MIN's hit ratio in each epoch (hits / accesses, 0..1).
        exact: True when every block the run touches has the same size: MIN is then the
            optimum, an upper bound of any policy's hits over the run.
    """

    ratios: list[float]
    exact: bool


def min_hit_ratios(epochs: Sequence[np.ndarray], sizes: Sequence[int] | np.ndarray,
                   capacity_bytes: int) -> list[float]:
    """MIN's hit ratio in each epoch of the concatenated trace ``epochs`` (one block-id array per epoch)."""
    hits = min_hit_flags(np.concatenate(epochs), np.asarray(sizes), capacity_bytes)
    ratios, start = [], 0
    for epoch in epochs:
        part = hits[start:start + len(epoch)]
        ratios.append(float(part.mean()) if len(part) else 0.0)
        start += len(epoch)
    return ratios


def access_trace(sample_block: np.ndarray, orders: Sequence[np.ndarray], reuse_gap: int) -> list[np.ndarray]:
    """The block accesses one rank's node cache stream counts in each epoch.

    Args:
        sample_block: int array (samples,): block index of each sample (the manifest's).
        orders: The rank's sample order in epochs ``0..E`` (``E + 1`` arrays: the last is only
            the look-ahead of epoch ``E - 1``, as the live plan carries it).
        reuse_gap: The dataset's run grouping (:func:`tierload.data.order.reuse_gap`).

    Returns:
        ``E`` int64 arrays (accesses,): the block of each counted access, per epoch.
    """
    blocks = [np.asarray(sample_block)[order] for order in orders]
    return [counted_runs(this, ahead, reuse_gap)[0] for this, ahead in zip(blocks[:-1], blocks[1:], strict=True)]


def dataset_min_hit_ratios(dataset: Any, epochs: int, capacity_bytes: int) -> MinReference:
    """MIN's hit ratio in each of ``epochs`` epochs of a TieredDataset's rank, at ``capacity_bytes``,
    and whether it is the optimum (blocks of one size).

    Over the accesses its node cache stream counts (:func:`access_trace`), with blocks at their
    stored size (payload + header), as the hot tier holds them and a recorded trace gives them.

    Args:
        dataset: A :class:`tierload.loader.dataset.TieredDataset` (its manifest, seed, shuffle and rank).
        epochs: Epochs from 0.
        capacity_bytes: The hot tier's capacity.
    """
    manifest = dataset.manifest
    orders = [dataset.rank_order(epoch) for epoch in range(epochs + 1)]
    # The dataset's own run grouping: a mixture's stretches its sources' windows over the interleave.
    trace = access_trace(manifest.sample_block, orders, dataset._reuse_gap())
    sizes = block_lengths(manifest.blocks) + HEADER_SIZE
    exact = min_is_exact(np.concatenate(trace), sizes)
    return MinReference(min_hit_ratios(trace, sizes, capacity_bytes), exact)
