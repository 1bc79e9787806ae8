"""Whether a tier's capacity can hold a dataset's blocks: checked once, before any block is read.

A block larger than a tier's capacity is never admitted there (reads bypass that tier, case
B13); that is allowed, but it must not happen silently. These checks compare the capacities in
the config with the block sizes in the manifest, so the user hears it at start, not after an
epoch of misses (the hot tier) or after downloading what cannot be kept (``tierload warm``).
"""

from __future__ import annotations

import logging
from typing import Iterable, Sequence

import numpy as np

from tierload.config.models import TierloadConfig
from tierload.data.block_columns import block_lengths, block_url_at
from tierload.data.blocks import Block
from tierload.units import format_bytes

log = logging.getLogger(__name__)

_warned: set[tuple] = set()  # (dataset, capacity, depth) already warned about in this process


def prefetch_window_bytes(lengths: Sequence[int] | np.ndarray, depth_blocks: int, depth_bytes: int) -> int:
    """Bytes the prefetch window may hold at once: the ``depth_blocks`` largest blocks, capped at
    ``depth_bytes`` but never below the largest block (one block is always fetched whole).

    Args:
        lengths: Block sizes in bytes (a sequence, or an int64 array).
        depth_blocks: ``prefetch.depth_blocks`` (0: no prefetching ahead).
        depth_bytes: ``prefetch.depth_bytes``.

    Returns:
        Bytes (int); 0 when nothing is prefetched or there are no blocks.
    """
    sizes = np.asarray(lengths, dtype=np.int64)
    if depth_blocks <= 0 or not len(sizes):
        return 0
    # O(n) selection of the largest: no sort of every block at start-up, no Python int per block
    largest = sizes if depth_blocks >= len(sizes) else np.partition(sizes, len(sizes) - depth_blocks)[-depth_blocks:]
    return max(min(int(largest.sum()), depth_bytes), int(largest.max()))


def hot_fit_problem(config: TierloadConfig, blocks: Sequence[Block]) -> str | None:
    """What the hot tier's capacity cannot hold of ``blocks`` (None when it fits).

    Returns:
        One sentence naming ``hot.capacity_bytes``, the largest block and what would be right:
        either the largest block does not fit (every read of it bypasses the hot tier) or the
        prefetch window of one stream (:mod:`tierload.node.stream_table`) does not.
    """
    if not blocks:
        return None
    capacity = max(config.hot.capacity_bytes, config.hot.ram_capacity_bytes)  # a block lives in one level
    lengths = block_lengths(blocks)  # a view of a mapped manifest's column: no Block per block
    largest_at = int(np.argmax(lengths))
    largest_length, largest_url = int(lengths[largest_at]), block_url_at(blocks, largest_at)
    window = prefetch_window_bytes(lengths, config.prefetch.depth_blocks, config.prefetch.depth_bytes)
    if capacity < largest_length:
        return (f"hot.capacity_bytes is {format_bytes(capacity)}, smaller than the largest block "
                f"({format_bytes(largest_length)}, {largest_url}): blocks that large bypass the hot tier and are "
                f"read from the warm or cold tier every time; set hot.capacity_bytes to at least "
                f"{format_bytes(max(window, largest_length))} (the prefetch window) to cache them")
    if capacity < window:
        return (f"hot.capacity_bytes is {format_bytes(capacity)}, smaller than the prefetch window "
                f"(up to {config.prefetch.depth_blocks} blocks, {format_bytes(window)}; the largest block is "
                f"{format_bytes(largest_length)}; one window per rank reading on the node): blocks fetched ahead do "
                f"not all fit, so some bypass the hot tier and prefetching gains less; set "
                f"hot.capacity_bytes to at least {format_bytes(window)}, or lower prefetch.depth_blocks / "
                "prefetch.depth_bytes")
    return None


def warn_hot_fit_once(config: TierloadConfig, blocks: Sequence[Block], dataset: str) -> None:
    """Log :func:`hot_fit_problem` as a warning, once per dataset and settings in this process."""
    seen = (dataset, config.hot.capacity_bytes, config.hot.ram_capacity_bytes, config.prefetch.depth_blocks,
            config.prefetch.depth_bytes)
    if seen in _warned:
        return
    problem = hot_fit_problem(config, blocks)
    if problem:
        _warned.add(seen)
        log.warning("%s: %s", dataset, problem)


def fitting(blocks: Iterable[Block], capacity_bytes: int) -> tuple[list[Block], list[Block]]:
    """Split ``blocks`` into those no larger than ``capacity_bytes`` and those that can never fit."""
    fit: list[Block] = []
    too_large: list[Block] = []
    for block in blocks:
        (fit if block.length <= capacity_bytes else too_large).append(block)
    return fit, too_large
