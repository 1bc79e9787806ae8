"""The pure arithmetic of elastic resumption (tierload.data.elastic): no Ray, no S3, no files.

A job is simulated rank by rank and worker by worker with the same functions the dataset uses
(rank_slice, worker_positions, remaining_order): over many (world sizes, workers, counts,
consumed, drop_last) combinations, every sample of the epoch is yielded exactly once across the
segments (plus each segment's padding), and a rank's share of a resumed segment stays a few
contiguous runs of the original order (block locality).
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from tierload.data.elastic import Segment, as_chain, remaining_count, remaining_order, segment_rank_count
from tierload.data.order import epoch_order, rank_slice, samples_per_rank, worker_positions
from tierload.errors import ConfigError


def run_segment(order: np.ndarray, world: int, workers: int, chunk: int, consumed: int | None,
                drop_last: bool) -> list[int]:
    """Sample ids the ranks yield in a segment, each rank stopping after ``consumed`` (None: the end).

    Every rank's workers take chunks in turn (worker_positions), and the loader yields the chunks in
    order: the first ``consumed`` of the rank's yields are the first positions of its slice."""
    out = []
    for rank in range(world):
        mine = rank_slice(order, rank=rank, world_size=world, drop_last=drop_last)
        streams = [worker_positions(len(mine), worker_id=w, num_workers=workers, chunk=chunk) for w in range(workers)]
        merged = np.sort(np.concatenate(streams)) if streams else np.zeros(0, np.int64)
        assert merged.tolist() == list(range(len(mine)))  # the workers together yield the rank's slice, once
        take = len(mine) if consumed is None else consumed
        out.extend(int(i) for i in mine[merged[:take]])
    return out


@pytest.mark.parametrize("drop_last", [False, True])
def test_every_sample_once_over_many_elastic_chains(drop_last):
    """(N, W) -> (M, W') [-> (K, W'')]: the union of what every segment yielded is the epoch, once each;
    the only repeats are the padding (fewer than each segment's world size); with drop_last the only
    samples missing are fewer than the last segment's world size."""
    checked = 0
    for count, n, m, k in itertools.product([1, 7, 23, 100], [1, 2, 3, 8], [1, 2, 4, 5], [1, 3]):
        order = epoch_order(np.arange(count) // 4, seed=count + n, epoch=1, shuffle="block", window_blocks=2)
        for frac1, frac2 in [(0.0, 0.5), (0.3, 0.0), (0.5, 0.7), (1.0, 0.2)]:
            workers = (1 + (count % 3), 1 + (n % 2), 2)
            chain: list[Segment] = []
            seen: Counter = Counter()
            for world, frac, w in ((n, frac1, workers[0]), (m, frac2, workers[1])):
                rest = remaining_order(order, chain, drop_last)
                per_rank = samples_per_rank(len(rest), world, drop_last)
                consumed = int(per_rank * frac)
                seen.update(run_segment(rest, world, w, 2, consumed, drop_last))
                chain.append(Segment(world, consumed))
                assert segment_rank_count(count, chain[:-1], world, drop_last) == per_rank
            rest = remaining_order(order, chain, drop_last)
            assert len(rest) == remaining_count(count, chain, drop_last)
            seen.update(run_segment(rest, k, workers[2], 3, None, drop_last))
            repeats = sum(v - 1 for v in seen.values())
            if drop_last:
                assert repeats == 0
                assert count - len(seen) < k  # only the last split's remainder is dropped
            else:
                assert set(seen) == set(range(count))
                assert repeats < n + m + k  # padding only, fewer than each segment's ranks
            checked += 1
    assert checked == 4 * 4 * 4 * 2 * 4


def test_what_is_left_is_each_ranks_tail_in_order():
    order = np.arange(10, dtype=np.int64) * 10  # rank slices [0..40], [50..90] at world 2
    rest = remaining_order(order, [Segment(2, 3)], drop_last=False)
    assert rest.tolist() == [30, 40, 80, 90]
    # then 4 ranks take one each; 3 ranks pad by repeating the first
    assert [rank_slice(rest, rank=r, world_size=3, drop_last=False).tolist() for r in range(3)] == [[30, 40], [80, 90],
                                                                                                    [30, 40]]
    assert remaining_order(order, [], drop_last=False) is order


def test_padding_and_trimming_leave_nothing_behind_or_keep_the_trimmed_tail():
    order = np.arange(5, dtype=np.int64)
    # world 2, no drop_last: slices [0 1 2] [3 4 0]; each consumed 3: all done (the pad repeated 0)
    assert remaining_order(order, [Segment(2, 3)], drop_last=False).tolist() == []
    assert remaining_count(5, [Segment(2, 3)], drop_last=False) == 0
    # drop_last: slices [0 1] [2 3], 4 trimmed; one each consumed: 1, 3 and the trimmed 4 are left
    assert remaining_order(order, [Segment(2, 1)], drop_last=True).tolist() == [1, 3, 4]
    assert remaining_count(5, [Segment(2, 1)], drop_last=True) == 3


def test_a_rank_of_a_resumed_segment_reads_few_contiguous_runs():
    """Locality: after (8 ranks, 40%) a new rank of 3 reads at most ceil(8/3)+1 contiguous runs of
    the original order, never a strided scatter."""
    order = np.arange(10_000, dtype=np.int64)
    rest = remaining_order(order, [Segment(8, 500)], drop_last=False)
    for rank in range(3):
        mine = rank_slice(rest, rank=rank, world_size=3, drop_last=False)
        runs = 1 + int(np.count_nonzero(np.diff(mine) != 1))
        assert runs <= 4


def test_bad_chains_are_refused_with_the_value():
    with pytest.raises(ConfigError, match="only 5 samples"):
        remaining_order(np.arange(10), [Segment(2, 6)], drop_last=False)
    with pytest.raises(ConfigError, match="only 5 samples"):
        remaining_count(10, [Segment(2, 6)], drop_last=False)
    with pytest.raises(ConfigError, match="world_size=0"):
        as_chain([[0, 1]])
    with pytest.raises(ConfigError, match="not \\[world_size, consumed\\]"):
        as_chain([["a"]])
    assert as_chain([[2, 3], (4, 0)]) == (Segment(2, 3), Segment(4, 0))


def test_the_simulators_elastic_trace_of_one_segment_is_the_jobs_epoch():
    """tierload.simulator.elastic_trace: one segment is job_trace's epoch (same accesses, nodes, order);
    a resized epoch reads every block, with only a few more accesses (windows cut by the new boundaries)."""
    from tierload.simulator.elastic_trace import elastic_epoch_trace
    from tierload.simulator.trace import DatasetShape, JobSpec, job_trace

    shape = DatasetShape.uniform(200, 1024, samples_per_block=8)
    one = elastic_epoch_trace(shape, [(4, 1.0)], seed=5, shuffle="block", window_blocks=4)
    job = job_trace(JobSpec(shape, epochs=1, seed=5, world_size=4, shuffle="block", window_blocks=4))
    assert np.array_equal(one.block, job.block) and np.array_equal(one.node, job.node)
    resized = elastic_epoch_trace(shape, [(4, 0.5), (3, 1.0)], seed=5, shuffle="block", window_blocks=4)
    assert set(resized.block.tolist()) == set(range(200))
    assert len(resized) - len(one) <= 2 * 4 * 4 + 3 * 4  # a few cut windows per rank boundary, not x world
    with pytest.raises(ConfigError, match="fraction"):
        elastic_epoch_trace(shape, [(4, 1.5), (2, 1.0)])
