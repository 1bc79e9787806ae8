"""The trace of one epoch that a job runs in segments at different world sizes (elastic resumption).

Each segment is ``(world_size, fraction)``: its ranks consume that fraction of their slice, then
the job is checkpointed and restarted at the next segment's world size; the last segment runs
to the end of the epoch. The orders are exactly the dataset's (:mod:`tierload.data.elastic`):
each segment's ranks take contiguous slices of what the segments before them left. Rank ``r``
runs on node ``r`` in every segment (a restart finds the same machines and their hot tiers),
so the trace shows what a resize costs the cold tier: blocks whose samples a resize moved to
another node. With one segment it is the epoch of :func:`tierload.simulator.trace.job_trace`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tierload.data.elastic import Segment, remaining_order
from tierload.data.order import epoch_order, rank_slice, samples_per_rank
from tierload.data.runs import counted_runs
from tierload.errors import ConfigError
from tierload.simulator.trace import DatasetShape, Trace


def elastic_epoch_trace(shape: DatasetShape, segments: Sequence[tuple[int, float]], *, seed: int = 0,
                        epoch: int = 0, shuffle: str = "auto", window_blocks: int = 8,
                        drop_last: bool = False) -> Trace:
    """The block accesses of one epoch run in ``segments``, ranks interleaved by progress.

    Args:
        shape: The dataset.
        segments: ``[(world_size, fraction), ...]``: each segment's ranks consume ``fraction``
            (0..1) of their slice; the last segment's fraction is ignored (it finishes the epoch).
        seed, epoch, shuffle, window_blocks, drop_last: As the dataset's.

    Returns:
        A trace whose node is the rank, and whose decay clock is ``epoch`` throughout.

    Raises:
        ConfigError: No segment, a world size below 1 or a fraction outside [0, 1].
    """
    if not segments:
        raise ConfigError("an elastic epoch needs at least one segment (world_size, fraction)")
    mode = shape.shuffle_mode(shuffle)
    order = epoch_order(shape.sample_block, seed=seed, epoch=epoch, shuffle=mode, window_blocks=window_blocks)
    following = epoch_order(shape.sample_block, seed=seed, epoch=epoch + 1, shuffle=mode, window_blocks=window_blocks)
    gap = shape.reuse_gap(window_blocks)
    chain: list[Segment] = []
    parts: dict[str, list[np.ndarray]] = {"block": [], "node": [], "time": []}
    for index, (world, fraction) in enumerate(segments):
        if world < 1 or not 0.0 <= fraction <= 1.0:
            raise ConfigError(f"segment ({world}, {fraction}): need world_size >= 1 and 0 <= fraction <= 1")
        rest = remaining_order(order, chain, drop_last)
        per_rank = samples_per_rank(len(rest), world, drop_last)
        last = index == len(segments) - 1
        consumed = per_rank if last else int(per_rank * fraction)
        for rank in range(world):
            mine = rank_slice(rest, rank=rank, world_size=world, drop_last=drop_last)
            ahead = (rank_slice(following, rank=rank, world_size=world, drop_last=drop_last) if last
                     else mine[consumed:])
            run_block, run_start = counted_runs(shape.sample_block[mine[:consumed]], shape.sample_block[ahead], gap)
            parts["block"].append(run_block)
            parts["node"].append(np.full(len(run_block), rank, dtype=np.int64))
            parts["time"].append(index + run_start / max(consumed, 1))
        chain.append(Segment(world, consumed))
    block, node, time = (np.concatenate(parts[name]) for name in ("block", "node", "time"))
    by_time = np.lexsort((node, time))  # ranks progress together; on ties, one run each in turn
    return Trace(block[by_time].astype(np.int64), node[by_time], np.full(len(block), float(epoch)),
                 shape.block_bytes)
