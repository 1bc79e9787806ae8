"""Fair sharing of one hot tier by jobs of different speeds (issue 13, item 2).

The node cache's own parts, without I/O: its :class:`PlanOracle` over real :class:`Stream`
plans, the clairvoyant policy and a :class:`TierIndex`, driven the way the node cache drives
them (a block is accessed when its stream schedules it, and admitted on a miss). A fast job
(ten accesses to the slow job's one) streams a dataset eight times the slow job's through a
cache that holds a fifth of both; the slow job's working set fits its share (24 of 25
blocks). The live two-process runs are in tests/test_joining.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from tierload.node.oracle import PlanOracle, protected_horizon
from tierload.node.stream import Stream
from tierload.policies.counts import AccessCounts
from tierload.policies.frequency import DecayingCounter
from tierload.policies.registry import make_policy
from tierload.policies.tierindex import TierIndex

CAPACITY = 50  # blocks of one byte each
SLOW_BLOCKS, FAST_BLOCKS, EPOCHS = 24, 200, 4


def _stream(name: str, num_blocks: int, seed: int) -> Stream:
    rng = np.random.default_rng(seed)
    seq = np.concatenate([rng.permutation(num_blocks) for _ in range(EPOCHS)]).astype(np.int32)
    return Stream(name, name, 0, seq, len(seq), 1, num_blocks)


def _locate(keys: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``{job: (rows, block indexes)}`` of keys named ``<job>-<block index>``, as the catalog's ``locate``."""
    found: dict[str, tuple[list[int], list[int]]] = {}
    for row, key in enumerate(keys):
        name, index = key.rsplit("-", 1)
        rows, indexes = found.setdefault(name, ([], []))
        rows.append(row)
        indexes.append(int(index))
    return {name: (np.array(rows, np.int64), np.array(indexes, np.int64)) for name, (rows, indexes) in found.items()}


def _hit_ratios(jobs: dict[str, tuple[int, int]], shares: bool, policy: str = "clairvoyant") -> dict[str, float]:
    """Replay ``{job: (blocks, accesses per round)}``; each job's hot hit ratio after its first epoch."""
    streams = {name: _stream(name, blocks, seed) for seed, (name, (blocks, _)) in enumerate(jobs.items())}
    oracle = PlanOracle(_locate, {name: [stream] for name, stream in streams.items()},
                        lambda name: np.ones(jobs[name][0], dtype=np.int64), CAPACITY if shares else 0)
    counter = DecayingCounter(4.0)
    index = TierIndex("hot", CAPACITY, make_policy(policy, counter=counter, oracle=oracle), AccessCounts(counter))
    hits = dict.fromkeys(jobs, 0)
    counted = dict.fromkeys(jobs, 0)
    while any(s.next_run < s.num_runs for s in streams.values()):
        for name, stream in streams.items():
            for _ in range(jobs[name][1]):
                if stream.next_run >= stream.num_runs:
                    break
                run = stream.next_run
                key = f"{name}-{stream.run_block[run]}"
                stream.mark_scheduled(run)  # the stream moves on: the block's next use is its following one
                index.record_access(key, 0.0)
                first_epoch = stream.run_start[run] < jobs[name][0]
                counted[name] += not first_epoch
                if key in index:
                    hits[name] += not first_epoch
                elif index.reserve(key, 1, 0.0).admitted:
                    index.commit(key, 0.0)
                assert index.used_bytes <= CAPACITY
    return {name: hits[name] / counted[name] for name in jobs}


def test_a_slow_job_whose_working_set_fits_its_share_keeps_its_hit_ratio_beside_a_fast_one():
    jobs = {"slow": (SLOW_BLOCKS, 1), "fast": (FAST_BLOCKS, 10)}
    alone = _hit_ratios({"slow": jobs["slow"]}, shares=True)["slow"]
    together = _hit_ratios(jobs, shares=True)
    assert alone == pytest.approx(1.0)
    assert together["slow"] >= 0.9 * alone
    assert together["slow"] == pytest.approx(1.0)  # its whole working set is protected
    # Clairvoyance alone (no shares) already favours the slow job (distances count each job's
    # own accesses) but gives up a little; recency (LRU) lets the fast job flush it.
    unshared = _hit_ratios(jobs, shares=False)
    lru = _hit_ratios(jobs, shares=True, policy="lru")
    assert unshared["slow"] <= together["slow"]
    assert lru["slow"] < 0.9 * alone
    print(f"slow job hit ratio: alone {alone:.3f}, beside a 10x faster job {together['slow']:.3f} (no shares "
          f"{unshared['slow']:.3f}, LRU {lru['slow']:.3f}); fast job {together['fast']:.3f} "
          f"(no shares {unshared['fast']:.3f}, LRU {lru['fast']:.3f})")


def test_a_streams_share_is_its_next_distinct_blocks_that_fit():
    stream = Stream("s", "d", 0, np.array([3, 1, 3, 2, 0, 1], dtype=np.int32), 6, 1, 4)
    sizes = np.array([10, 10, 10, 10], dtype=np.int64)
    horizon, fits = protected_horizon(stream, sizes, 25)  # blocks 3 and 1; block 2 (run 3) does not fit
    assert (horizon, fits) == (3, 2)
    assert sorted(np.flatnonzero(stream.next_use < horizon).tolist()) == [1, 3]
    stream.mark_scheduled(0)  # block 3 is next needed at run 2
    horizon, fits = protected_horizon(stream, sizes, 30)
    assert (horizon, fits) == (4, 3)
    assert sorted(np.flatnonzero(stream.next_use < horizon).tolist()) == [1, 2, 3]
    assert protected_horizon(stream, sizes, 1000) == (stream.num_runs, 4)  # the whole rest fits
