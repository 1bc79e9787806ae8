"""Belady's MIN per epoch of a benchmark run, from the simulator's implementation."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tierload.simulator.belady import min_hit_flags


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
