"""Elastic resumption: what is left of an epoch after segments run at other world sizes.

A job runs an epoch in *segments*: from a start (or a restart) to a checkpoint, at one world
size. Under DDP the ranks step in lockstep, so one number says how far a segment got: the
samples each rank consumed of its own slice. The chain of segments ``[(world_size, consumed),
...]`` with the epoch's global order therefore says exactly which samples are left, whichever
rank saved the state.

The rule, applied once per segment, is a pure function of (global order, chain, drop_last):

1. A segment's order is split into contiguous, equal rank slices
   (:func:`tierload.data.order.rank_slice`: padded by repeating the order's first samples, or
   trimmed with ``drop_last``).
2. Rank ``r`` consumed the first ``consumed`` positions of its slice. What is left of the
   segment is its order with those positions removed, in order: the tail of each rank's slice,
   rank after rank, then what ``drop_last`` trimmed (it was never yielded, so it is still due).
   Padding repeats samples already in the order, so it never leaves anything behind.
3. That remainder is the next segment's order.

Every position of the global order is thus yielded at most once over the whole chain, and with
``drop_last=False`` exactly once (plus each segment's padding, fewer than its world size). Each
rank of a new segment gets a contiguous run of the remainder, which is made of contiguous runs
of the original order, so the block locality the contiguous split gives (S3 bytes per epoch do
not grow with the world size) survives a resume.

The functions take the global order as an int64 array of sample ids, whatever made it (one
source's shuffle, a mixture's interleaving): nothing here knows where the ids point.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from tierload.data.order import samples_per_rank
from tierload.errors import ConfigError


@dataclass(frozen=True)
class Segment:
    """A part of an epoch run at one world size.

    Attributes:
        world_size: Ranks that ran it (>= 1).
        consumed: Samples each rank consumed of its slice (>= 0, at most the slice's length).
    """

    world_size: int
    consumed: int


def as_chain(pairs: Iterable[Sequence[int]]) -> tuple[Segment, ...]:
    """``[[world_size, consumed], ...]`` (as a state stores it) as segments.

    Raises:
        ConfigError: A pair is not two integers, a world size below 1 or a negative count.
    """
    chain = []
    for pair in pairs:
        try:
            world, consumed = (int(value) for value in pair)
        except (TypeError, ValueError):
            raise ConfigError(f"segment {pair!r} of the state's chain is not [world_size, consumed]") from None
        if world < 1 or consumed < 0:
            raise ConfigError(f"segment [world_size={world}, consumed={consumed}]: need world_size >= 1 and "
                              "consumed >= 0")
        chain.append(Segment(world, consumed))
    return tuple(chain)


def _consumed_positions(length: int, segment: Segment, drop_last: bool) -> np.ndarray:
    """bool (length,): the positions of a segment's order that its ranks consumed."""
    per_rank = samples_per_rank(length, segment.world_size, drop_last)
    if segment.consumed > per_rank:
        raise ConfigError(f"segment [world_size={segment.world_size}, consumed={segment.consumed}]: a rank "
                          f"had only {per_rank} samples of the {length} left to consume")
    positions = np.arange(length, dtype=np.int64)
    if per_rank == 0:
        return np.zeros(length, dtype=bool)
    rank = positions // per_rank
    return (rank < segment.world_size) & (positions - rank * per_rank < segment.consumed)


def remaining_count(count: int, chain: Sequence[Segment], drop_last: bool) -> int:
    """How many samples of a ``count``-sample order are left after ``chain`` (no array built).

    Raises:
        ConfigError: A segment consumed more than its ranks had.
    """
    for segment in chain:
        per_rank = samples_per_rank(count, segment.world_size, drop_last)
        if segment.consumed > per_rank:
            raise ConfigError(f"segment [world_size={segment.world_size}, consumed={segment.consumed}]: a rank "
                              f"had only {per_rank} samples of the {count} left to consume")
        # Rank r's slice holds real samples at positions r*p .. min((r+1)*p, count); padding beyond.
        firsts = np.arange(segment.world_size, dtype=np.int64) * per_rank
        count -= int(np.clip(count - firsts, 0, segment.consumed).sum())
    return count


def remaining_order(order: np.ndarray, chain: Sequence[Segment], drop_last: bool) -> np.ndarray:
    """What is left of an epoch's global order after the segments of ``chain``, in order.

    Args:
        order: int64 (num_samples,): the epoch's global order of sample ids.
        chain: The segments run so far, oldest first (empty: the whole order).
        drop_last: The dataset's ``drop_last`` (it decides the slices' length).

    Returns:
        int64 (remaining,): the next segment's order (``order`` itself for an empty chain).

    Raises:
        ConfigError: A segment consumed more than its ranks had.
    """
    for segment in chain:
        order = order[~_consumed_positions(len(order), segment, drop_last)]
    return order


def segment_rank_count(count: int, chain: Sequence[Segment], world_size: int, drop_last: bool) -> int:
    """Samples each rank yields in the segment after ``chain`` at ``world_size`` ranks."""
    return samples_per_rank(remaining_count(count, chain, drop_last), world_size, drop_last)
