"""Run arithmetic over a planned block sequence: pure numpy, shared by the node cache and the simulator.

A *run* is one access of a block: consecutive (or nearly consecutive, within ``reuse_gap``
positions) samples of the same block are served by one fetch. For one-sample-per-object
layouts every position is its own run; for row-group blocks under block-aware shuffle a run
covers the block's rows inside its shuffle window.
"""

from __future__ import annotations

import numpy as np

NEVER = np.iinfo(np.int64).max


def plan_runs(seq: np.ndarray, reuse_gap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Group positions into runs.

    Args:
        seq: int array (positions,): block index needed at each position.
        reuse_gap: A block needed again at most this many positions later continues its run
            (1: only consecutive positions share a run).

    Returns:
        ``(run_start, run_block, run_last, pos_run)``: start position, block and last position
        of each run (runs sorted by start), and the run index of every position.
    """
    count = len(seq)
    if count == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    positions = np.arange(count, dtype=np.int64)
    order = np.lexsort((positions, seq))
    blocks_sorted = seq[order]
    same_block = np.r_[False, blocks_sorted[1:] == blocks_sorted[:-1]]
    gap = np.r_[NEVER, np.diff(order)]
    new_run = ~(same_block & (gap <= reuse_gap))
    # Forward-fill, along the sorted order, the position where the current run started.
    start_sorted = order[np.maximum.accumulate(np.where(new_run, np.arange(count), 0))]
    start_of_pos = np.empty(count, dtype=np.int64)
    start_of_pos[order] = start_sorted
    run_start = np.flatnonzero(start_of_pos == positions)
    pos_run = np.searchsorted(run_start, start_of_pos)
    run_last = np.zeros(len(run_start), dtype=np.int64)
    np.maximum.at(run_last, pos_run, positions)
    return run_start, seq[run_start].astype(np.int64), run_last, pos_run


def next_run_of_same_block(run_block: np.ndarray) -> np.ndarray:
    """For each run, the index of the next run of the same block (``NEVER`` if none)."""
    count = len(run_block)
    runs = np.arange(count, dtype=np.int64)
    order = np.lexsort((runs, run_block))
    nxt = np.full(count, NEVER, dtype=np.int64)
    same = run_block[order][1:] == run_block[order][:-1]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def counted_runs(this_epoch: np.ndarray, next_epoch: np.ndarray, reuse_gap: int) -> tuple[np.ndarray, np.ndarray]:
    """The runs one rank's node cache stream counts as accesses in one epoch.

    The stream's plan is this epoch's block sequence followed by the next epoch's as
    look-ahead; a run that starts inside this epoch is counted here even if it straddles the
    boundary. This is the trace the hot-hit counter counts and the simulator replays.

    Args:
        this_epoch: int array (positions,): block index of each sample the rank reads this epoch.
        next_epoch: int array: the same for the next epoch (the look-ahead).
        reuse_gap: As :func:`plan_runs`.

    Returns:
        ``(run_block, run_start)``: int64 block and first position of each counted run, in order.
    """
    seq = np.concatenate([np.asarray(this_epoch, dtype=np.int64), np.asarray(next_epoch, dtype=np.int64)])
    run_start, run_block, _, _ = plan_runs(seq, reuse_gap)
    counted = run_start < len(this_epoch)
    return run_block[counted], run_start[counted]
