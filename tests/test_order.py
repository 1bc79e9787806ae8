"""The epoch order and its split over ranks and workers (pure functions)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tierload.data.order import WorkerPositions, epoch_order, rank_slice, samples_per_rank, worker_positions


def split_all(count, world, workers, chunk, drop_last, shuffle="sample", sample_block=None):
    sample_block = np.arange(count) if sample_block is None else sample_block
    order = epoch_order(sample_block, seed=7, epoch=3, shuffle=shuffle)
    seen = []
    for rank in range(world):
        mine = rank_slice(order, rank=rank, world_size=world, drop_last=drop_last)
        per_worker = [mine[worker_positions(len(mine), worker_id=w, num_workers=workers, chunk=chunk)]
                      for w in range(workers)]
        seen.append(per_worker)
    return order, seen


@pytest.mark.parametrize("count", [100, 101, 7, 1000])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("workers", [1, 2, 3, 7])
def test_every_sample_exactly_once_or_documented_padding(count, world, workers):
    for drop_last in (False, True):
        order, seen = split_all(count, world, workers, chunk=4, drop_last=drop_last)
        flat = np.concatenate([w for rank in seen for w in rank])
        counts = Counter(flat.tolist())
        per_rank = samples_per_rank(count, world, drop_last)
        assert all(sum(len(w) for w in rank) == per_rank for rank in seen)  # equal length per rank (B03)
        if drop_last:
            assert set(counts.values()) <= {1} and len(counts) == per_rank * world
        else:
            assert set(counts) == set(range(count))
            assert sum(counts.values()) - count == per_rank * world - count  # only the padding repeats


def test_workers_take_whole_batches_in_turn_so_the_loader_sees_the_rank_order():
    order = np.arange(103)
    chunk, workers = 4, 3
    parts = [worker_positions(103, worker_id=w, num_workers=workers, chunk=chunk) for w in range(workers)]
    # DataLoader round-robin: batch b comes from worker b % workers.
    batches = [[] for _ in range(-(-103 // chunk))]
    for w, positions in enumerate(parts):
        for i, position in enumerate(positions):
            batches[(i // chunk) * workers + w].append(order[position])
    assert [x for batch in batches for x in batch] == list(range(103))
    partial = [len(b) for b in batches if len(b) != chunk]
    assert partial == [103 % chunk]  # exactly one partial batch, at the end


def test_shuffle_depends_on_seed_and_epoch_and_is_reproducible():
    blocks = np.arange(50)
    a = epoch_order(blocks, seed=1, epoch=0)
    assert np.array_equal(a, epoch_order(blocks, seed=1, epoch=0))
    assert not np.array_equal(a, epoch_order(blocks, seed=1, epoch=1))
    assert not np.array_equal(a, epoch_order(blocks, seed=2, epoch=0))
    assert sorted(a.tolist()) == list(range(50))


def test_block_aware_shuffle_keeps_samples_within_windows():
    sample_block = np.repeat(np.arange(20), 10)  # 20 blocks of 10 samples
    order = epoch_order(sample_block, seed=0, epoch=0, shuffle="block", window_blocks=4)
    assert sorted(order.tolist()) == list(range(200))
    for start in range(0, 200, 40):
        assert len(set(sample_block[order[start:start + 40]].tolist())) == 4  # one window = 4 blocks


def test_bad_split_arguments_are_rejected():
    with pytest.raises(ValueError):
        rank_slice(np.arange(4), rank=2, world_size=2, drop_last=False)
    with pytest.raises(ValueError):
        worker_positions(10, worker_id=0, num_workers=1, chunk=0)
    with pytest.raises(ValueError, match="shuffle"):
        epoch_order(np.arange(3), seed=0, epoch=0, shuffle="random")


def test_worker_positions_computed_when_indexed_are_the_arrays_positions():
    for count in (0, 1, 5, 7, 64, 100, 101, 1000):
        for workers in (1, 2, 3, 7):
            for chunk in (1, 3, 4, 256):
                for worker in range(workers):
                    held = worker_positions(count, worker_id=worker, num_workers=workers, chunk=chunk)
                    computed = WorkerPositions(count, worker_id=worker, num_workers=workers, chunk=chunk)
                    assert len(computed) == len(held)
                    assert [computed[i] for i in range(len(computed))] == held.tolist()
                    assert computed[1:4] == held[1:4].tolist()
                    if len(held):
                        assert computed[-1] == int(held[-1])
                    with pytest.raises(IndexError, match=f"position index {len(held)} outside"):
                        computed[len(held)]
    with pytest.raises(ValueError, match="worker_id=2, num_workers=2"):
        WorkerPositions(10, worker_id=2, num_workers=2, chunk=1)
    with pytest.raises(ValueError, match="chunk=0"):
        WorkerPositions(10, worker_id=0, num_workers=1, chunk=0)
