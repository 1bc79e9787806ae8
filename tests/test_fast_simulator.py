"""The compiled replay (tierload.simulator.fast) against the reference: the Python policy
classes the actors run. Random traces through every policy pair, sizes, capacities, nodes and
jobs must give the same outcome (hot hit, warm hit, cold read) at every access, and the same
totals; the compiled Belady's MIN must hit exactly where the reference's does."""

from __future__ import annotations

import numpy as np
import pytest

from tierload.errors import ConfigError
from tierload.simulator.belady import min_hit_flags
from tierload.simulator.stack import StackSpec
from tierload.simulator.run import simulate, simulate_reference
from tierload.simulator.trace import DatasetShape, JobSpec, Trace, job_trace

# The compiled engine: compiled beside the tests before these (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("compiled_simulator")

HOT = ("clairvoyant", "keep", "lfu", "lfu-size", "lru")
WARM = (None, "keep", "lfu", "lfu-size", "lru")
TRACES = 240  # random traces replayed through both engines (every hot policy 48 times)


def _random_trace(rng: np.random.Generator) -> Trace:
    """A generated multi-job trace, or a raw random one with fractional clocks."""
    if rng.random() < 0.6:
        shape = DatasetShape.uniform(int(rng.integers(5, 120)), int(rng.integers(50, 400)),
                                     samples_per_block=int(rng.choice([1, 1, 3])),
                                     size_spread=float(rng.choice([0.0, 0.5, 1.5])), seed=int(rng.integers(99)))
        jobs = [JobSpec(shape, epochs=int(rng.integers(1, 5)), seed=j, world_size=int(rng.integers(1, 4)),
                        start=float(rng.choice([0.0, 0.5, 1.0])) * j) for j in range(int(rng.integers(1, 3)))]
        return job_trace(jobs)
    blocks, length = int(rng.integers(3, 60)), int(rng.integers(1, 600))
    sizes = rng.integers(0 if rng.random() < 0.2 else 1, 500, blocks)
    epochs = np.sort(rng.choice([0.0, 0.25, 1.0, 1.5, 2.0, 3.0], length))
    return Trace(rng.integers(0, blocks, length), rng.integers(0, int(rng.integers(1, 4)), length), epochs, sizes)


def _random_spec(rng: np.random.Generator, trace: Trace, hot: str) -> StackSpec:
    data = max(trace.distinct_bytes(), 1)
    warm = WARM[int(rng.integers(len(WARM)))]
    return StackSpec(hot, int(data * rng.choice([0.0, 0.05, 0.2, 0.5, 1.2])), warm,
                     int(data * rng.choice([0.1, 0.4, 0.8])) if warm else 0,
                     hot_admit_min_count=float(rng.choice([1.0, 1.0, 2.0])),
                     warm_admit_min_count=float(rng.choice([1.0, 1.5])),
                     hot_get_cost_bytes=int(rng.choice([0, 100, 2**20])),
                     warm_get_cost_bytes=int(rng.choice([0, 300])), half_life=float(rng.choice([0.5, 4.0])),
                     max_request_bytes=int(rng.choice([64, 2**20])))


@pytest.mark.parametrize("hot", HOT)
def test_every_access_has_the_same_outcome_in_both_engines(hot):
    rng = np.random.default_rng([HOT.index(hot), 15])
    for case in range(TRACES // len(HOT)):
        trace = _random_trace(rng)
        spec = _random_spec(rng, trace, hot)
        fast_out, reference_out = np.full(len(trace), 9, np.int8), np.full(len(trace), 9, np.int8)
        fast = simulate(trace, spec, engine="fast", outcome=fast_out)
        reference = simulate_reference(trace, spec, outcome=reference_out)
        first = np.flatnonzero(fast_out != reference_out)
        assert not len(first), (case, spec, int(first[0]), fast_out[first[0]], reference_out[first[0]])
        skip = {"seconds", "cpu_seconds", "accesses_per_s"}
        assert {k: v for k, v in fast.to_dict().items() if k not in skip} == \
            {k: v for k, v in reference.to_dict().items() if k not in skip}, (case, spec)


def test_min_hits_at_the_same_accesses_in_both_engines():
    rng = np.random.default_rng(7)
    for case in range(60):
        trace = _random_trace(rng)
        capacity = int(max(trace.distinct_bytes(), 1) * rng.choice([0.0, 0.1, 0.3, 0.7]))
        fast = min_hit_flags(trace.block, trace.block_bytes, capacity, trace.node, engine="fast")
        reference = min_hit_flags(trace.block, trace.block_bytes, capacity, trace.node, engine="reference")
        assert np.array_equal(fast, reference), case


def test_auto_picks_the_compiled_replay_and_compact_columns_replay_alike():
    trace = job_trace(JobSpec(DatasetShape.uniform(200, 100, size_spread=1.0), epochs=3, world_size=2))
    narrow = Trace(trace.block.astype(np.int32), trace.node.astype(np.int32), trace.epoch.astype(np.float32),
                   trace.block_bytes, trace.job.astype(np.int32))
    spec = StackSpec("clairvoyant", 4000, "lfu", 8000)
    auto, wide = simulate(narrow, spec), simulate_reference(trace, spec)
    assert (auto.hot_hits, auto.warm_hits, auto.cold_bytes) == (wide.hot_hits, wide.warm_hits, wide.cold_bytes)
    with pytest.raises(ConfigError, match="engine"):
        simulate(trace, spec, engine="numba")
    with pytest.raises(ConfigError, match="compiled replay"):
        simulate(trace, StackSpec("lru", 10, "clairvoyant", 10), engine="fast")


def test_an_edited_module_drops_the_compiled_cache_of_every_module(tmp_path):
    # Numba checks a cached function against its own file only; a function inlined from an
    # edited module would stay old in its callers' caches. Any edit drops them all.
    from tierload.simulator.fast import CACHE_STAMP, _drop_stale_cache

    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "tier.py").write_text("A = 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()

    def cached() -> list[str]:
        for name in ("replay.replay-1.py311.nbi", "replay.replay-1.py311.1.nbc"):
            (cache / name).write_bytes(b"x")
        return sorted(path.name for path in cache.iterdir() if path.name != CACHE_STAMP)

    assert cached() and _drop_stale_cache(tmp_path)  # no stamp: a cache of unknown sources
    assert [path.name for path in cache.iterdir()] == [CACHE_STAMP]
    assert cached() and not _drop_stale_cache(tmp_path)  # the same sources: kept
    assert cached() == ["replay.replay-1.py311.1.nbc", "replay.replay-1.py311.nbi"]
    (tmp_path / "__init__.py").write_text("# no compiled functions here\n")
    assert not _drop_stale_cache(tmp_path)
    (tmp_path / "tier.py").write_text("A = 2\n")
    assert _drop_stale_cache(tmp_path) and [path.name for path in cache.iterdir()] == [CACHE_STAMP]


def test_both_trace_dtypes_run_through_one_compiled_specialisation():
    # job_trace makes int64/float64 columns, fast_job_trace int32/float32; compiling both
    # doubled numba's cold-cache compile time. The entry points convert to one dtype set.
    from tierload.simulator.fast import belady_kernel, nextuse, replay

    wide = Trace(np.array([0, 1, 0, 2, 1]), np.array([0, 1, 0, 1, 1]), np.array([0.0, 0.25, 0.5, 1.0, 1.5]),
                 np.array([1, 1, 1]))
    narrow = Trace(wide.block.astype(np.int32), wide.node.astype(np.int32), wide.epoch.astype(np.float32),
                   wide.block_bytes)
    spec = StackSpec("clairvoyant", 1, "lfu", 1)
    first, second = (simulate(trace, spec, engine="fast") for trace in (wide, narrow))
    assert (first.hot_hits, first.warm_hits, first.cold_misses) == (second.hot_hits, second.warm_hits,
                                                                    second.cold_misses)
    first_flags, second_flags = (min_hit_flags(t.block, t.block_bytes, 1, t.node) for t in (wide, narrow))
    assert first_flags.tolist() == second_flags.tolist()
    for dispatcher in (replay.replay, belady_kernel.min_hits_one_tier, nextuse._next_use):
        assert len(dispatcher.signatures) == 1, dispatcher.signatures


def test_ids_beyond_int32_are_refused_by_the_compiled_engine():
    trace = Trace(np.array([2**31]), np.zeros(1, np.int64), np.zeros(1), np.ones(1, np.int64))
    with pytest.raises(ConfigError, match="2\\*\\*31"):
        simulate(trace, StackSpec("lru", 1, None, 0), engine="fast")
