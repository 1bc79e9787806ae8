"""A stream's plan derived from its seeds (:class:`~tierload.wire.messages.SeededStreamPlan`) over a
dataset's sample -> block column, as the training process would have built it."""

from __future__ import annotations

import numpy as np

from tierload.data.order import block_sequence, compact_index_dtype, epoch_order, rank_slice, reuse_gap
from tierload.errors import MessageError
from tierload.wire.messages import SeededStreamPlan, StreamPlan


def expanded_plan(seeded: SeededStreamPlan, sample_block: np.ndarray) -> StreamPlan:
    """The :class:`StreamPlan` ``seeded`` stands for: the same computation as
    :meth:`tierload.loader.dataset.TieredDataset.rank_order` and its plan.

    Args:
        seeded: The rank's seeds.
        sample_block: int (num_samples,): block of each sample (the mapped manifest's column
            whose digest ``seeded.samples`` names).

    Raises:
        MessageError: ``start_sample`` is outside the rank's order, or the settings are not an
            order this release computes (an unknown shuffle, a bad rank).
    """
    def rank_order(epoch: int) -> np.ndarray:
        order = epoch_order(sample_block, seed=seeded.seed, epoch=epoch, shuffle=seeded.shuffle,
                            window_blocks=seeded.window_blocks, dtype=compact_index_dtype(len(sample_block)))
        return rank_slice(order, rank=seeded.rank, world_size=seeded.world, drop_last=seeded.drop_last)

    try:
        mine = rank_order(seeded.epoch)
        if not 0 <= seeded.start_sample <= len(mine):
            raise MessageError(f"SeededStreamPlan.start_sample={seeded.start_sample} outside 0..{len(mine)} "
                               "(the rank's samples this epoch)")
        rest = mine[seeded.start_sample:]
        seq = block_sequence(sample_block, rest, rank_order(seeded.epoch + 1))
    except ValueError as exc:
        raise MessageError(f"SeededStreamPlan of dataset {seeded.dataset_id}: {exc}") from None
    return StreamPlan(dataset_id=seeded.dataset_id, epoch=seeded.epoch, seq=seq, consume_len=len(rest),
                      reuse_gap=reuse_gap(sample_block, seeded.window_blocks), start=seeded.start,
                      lineage=seeded.lineage, identity=seeded.identity)
