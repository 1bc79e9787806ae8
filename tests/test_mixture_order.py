"""The mixture's order as pure arithmetic (tierload.data.mixture): counts, passes, weight 0, curriculum, splits."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tierload.data.mixture import Mixture, split_counts
from tierload.data.order import rank_slice, worker_positions
from tierload.errors import ConfigError


def _mixture(sizes, weights, *, per_block=(1,), shuffles=None, **kwargs) -> Mixture:
    blocks = []
    for index, size in enumerate(sizes):
        spb = per_block[index % len(per_block)]
        blocks.append(np.arange(size, dtype=np.int64) // spb)
    return Mixture(tuple(blocks), tuple(int(b.max()) + 1 for b in blocks), tuple(weights),
                   tuple(shuffles or ["sample"] * len(sizes)), **kwargs)


def test_split_counts_is_exact_and_follows_the_weights():
    assert split_counts(100, [0.7, 0.3]).tolist() == [70, 30]
    assert split_counts(10, [1, 1, 2]).tolist() == [3, 2, 5]  # 2.5, 2.5, 5: the tie goes to source 0
    assert split_counts(7, [1, 0, 1]).tolist() == [4, 0, 3]
    for total in range(0, 50):
        assert split_counts(total, [0.2, 0.5, 0.3]).sum() == total


@pytest.mark.parametrize("sizes, weights", [((60, 25), (0.7, 0.3)), ((40, 17, 9), (1, 1, 2))])
def test_every_pass_of_every_source_is_exactly_once(sizes, weights):
    mix = _mixture(sizes, weights, per_block=(1, 4), shuffles=["sample", "block", "sample"][:len(sizes)])
    per_epoch = mix.samples_per_epoch()
    assert per_epoch == sum(sizes)
    counts = mix.counts(0)
    streams: list[list[int]] = [[] for _ in sizes]
    for epoch in range(5):
        order = mix.epoch_order(seed=3, epoch=epoch)
        assert order.dtype == np.int64 and len(order) == per_epoch
        source = mix.source_of(order)
        assert np.bincount(source, minlength=len(sizes)).tolist() == counts.tolist()
        for s in range(len(sizes)):
            streams[s].extend((order[source == s] - mix.sample_offsets[s]).tolist())
    for s, size in enumerate(sizes):
        stream = streams[s]
        for start in range(0, len(stream) - size + 1, size):  # each whole pass: a permutation of the source
            assert sorted(stream[start:start + size]) == list(range(size))
        tail = stream[len(stream) // size * size:]
        assert len(set(tail)) == len(tail)  # the pass in progress repeats nothing


def test_the_order_is_a_pure_function_and_differs_by_seed_and_epoch():
    a, b = _mixture((30, 20), (0.7, 0.3)), _mixture((30, 20), (0.7, 0.3))
    assert np.array_equal(a.epoch_order(1, 2), b.epoch_order(1, 2))
    assert not np.array_equal(a.epoch_order(1, 2), a.epoch_order(1, 3))
    assert not np.array_equal(a.epoch_order(1, 2), a.epoch_order(2, 2))


def test_a_small_source_wraps_into_its_next_pass_with_a_new_shuffle():
    mix = _mixture((100, 10), (0.5, 0.5))  # source 1 gives 55 samples an epoch: 5.5 passes
    order = mix.epoch_order(seed=0, epoch=0)
    small = order[mix.source_of(order) == 1] - 100
    assert len(small) == 55
    passes = [small[i:i + 10].tolist() for i in range(0, 50, 10)]
    assert all(sorted(p) == list(range(10)) for p in passes)
    assert len({tuple(p) for p in passes}) > 1  # each pass its own shuffle
    nxt = mix.epoch_order(seed=0, epoch=1)
    continued = (nxt[mix.source_of(nxt) == 1] - 100)[:5]
    assert sorted(small[50:].tolist() + continued.tolist()) == list(range(10))  # the pass carries on


def test_weight_zero_takes_nothing_and_shrinks_the_default_epoch():
    mix = _mixture((30, 50, 20), (1, 0, 1))
    assert mix.samples_per_epoch() == 50
    order = mix.epoch_order(seed=0, epoch=0)
    assert Counter(mix.source_of(order).tolist()) == {0: 25, 2: 25}
    assert _mixture((30, 50), (1, 0), epoch_samples=40).counts(0).tolist() == [40, 0]


def test_curriculum_steps_keep_each_sources_passes_continuous():
    mix = _mixture((40, 40), (0.5, 0.5), curriculum=((2, (0.75, 0.25)),))
    assert mix.counts(1).tolist() == [40, 40] and mix.counts(2).tolist() == [60, 20]
    assert mix.stream_starts(4).tolist() == [2 * 40 + 2 * 60, 2 * 40 + 2 * 20]
    stream0 = np.concatenate([o[mix.source_of(o) == 0] for o in (mix.epoch_order(5, e) for e in range(4))])
    assert len(stream0) == 200
    for start in range(0, 200, 40):
        assert sorted(stream0[start:start + 40].tolist()) == list(range(40))


def test_every_rank_and_worker_together_yield_the_epoch_once():
    mix = _mixture((37, 11), (0.7, 0.3))
    order = mix.epoch_order(seed=9, epoch=0)
    for world, workers, chunk in ((2, 2, 4), (3, 2, 5)):
        seen: list[int] = []
        for rank in range(world):
            mine = rank_slice(order, rank=rank, world_size=world, drop_last=True)
            for worker in range(workers):
                seen.extend(mine[worker_positions(len(mine), worker_id=worker, num_workers=workers,
                                                  chunk=chunk)].tolist())
        assert Counter(seen) == Counter(order[:len(order) // world * world].tolist())


def test_reuse_gap_stretches_with_a_small_share():
    mix = _mixture((400, 400), (0.9, 0.1), per_block=(1, 10), shuffles=["sample", "block"])
    assert mix.reuse_gap() >= 8 * 10 * 10  # window 8 x 10 samples a block, a tenth of the positions


@pytest.mark.parametrize("weights", [(1,), (1, -1), (0, 0), (1, float("nan"))])
def test_bad_weights_are_refused_by_name(weights):
    with pytest.raises(ConfigError, match="weight"):
        _mixture((5, 5), weights)


def test_a_bad_curriculum_is_refused():
    with pytest.raises(ConfigError, match="curriculum"):
        _mixture((5, 5), (1, 1), curriculum=((3, (1, 1)), (2, (1, 2))))
