"""The compiled replay behind :func:`tierload.simulator.run.simulate`: same decisions, 3-8x faster.

Every policy and the warm tier are reimplemented on integer block ids in arrays
(:mod:`.tier`, :mod:`.lfu`, :mod:`.clairvoyant`, :mod:`.lru`) and stepped by a numba loop
(:mod:`.replay`). The Python policy classes the actors run stay the reference:
``tests/test_fast_simulator.py`` replays random traces through both and requires the same
outcome at every access.
"""

from __future__ import annotations

import time

import numpy as np

from tierload.errors import ConfigError
from tierload.simulator.fast import replay as kernel
from tierload.simulator.fast.belady_kernel import NEVER
from tierload.simulator.fast.columns import as_epochs, as_ids
from tierload.simulator.fast.nextuse import next_use
from tierload.simulator.fast.tier import CLAIRVOYANT, POLICY_CODES, new_tier
from tierload.simulator.stack import SimResult, StackSpec, counts_matter
from tierload.simulator.trace import Progress, Trace

CHUNK = 1 << 20  # accesses per compiled call (between progress reports)


def supports(spec: StackSpec) -> bool:
    """Whether the compiled replay knows the stack's policies (else the reference runs)."""
    warm_ok = spec.warm_policy is None or (spec.warm_policy in POLICY_CODES and spec.warm_policy != "clairvoyant")
    return spec.hot_policy in POLICY_CODES and warm_ok


def _tier(policy: str, slots: int, capacity_bytes: int, admit_min_count: float, get_cost_bytes: int,
          spec: StackSpec, sizes: np.ndarray, positions: int = 0):
    counts = counts_matter(policy, admit_min_count)
    # As the reference: a threshold that counting would always pass is dropped with the counting.
    return new_tier(policy, slots, capacity_bytes, sizes, counts=counts,
                    admit_min_count=admit_min_count if counts else 0.0, half_life=spec.half_life,
                    get_cost_bytes=get_cost_bytes, positions=positions)


def simulate_fast(trace: Trace, spec: StackSpec, progress: Progress | None = None,
                  outcome: np.ndarray | None = None) -> SimResult:
    """Replay ``trace`` through ``spec`` (see :func:`tierload.simulator.run.simulate`).

    Args:
        trace: The accesses (block, node: int32 or int64; epoch: float32 or float64). Compiled
            for int32 ids and float64 epochs only (:mod:`.columns`): other dtypes are converted.
        spec: Tiers, capacities and policies.
        progress: Called every :data:`CHUNK` accesses and at the end with (done, total).
        outcome: int8 (accesses,), filled with where each access was served: 0 hot, 1 warm, 2 cold.

    Returns:
        The counts; ``cpu_seconds`` includes the next-use pass clairvoyant needs.

    Raises:
        ConfigError: A policy the compiled replay does not know, a capacity below zero, or a
            block or node id of 2**31 or more.
    """
    if not supports(spec):
        raise ConfigError(f"the compiled replay has no policy pair hot={spec.hot_policy!r}, "
                          f"warm={spec.warm_policy!r}; use engine='reference'")
    if spec.hot_capacity_bytes < 0 or spec.warm_capacity_bytes < 0:
        raise ConfigError("tier capacities must be >= 0 bytes")
    started, cpu_started = time.perf_counter(), time.process_time()
    length, num_nodes = len(trace), max(trace.num_nodes, 1)
    block, node = as_ids(trace.block, "block"), as_ids(trace.node, "node")
    sizes = np.ascontiguousarray(trace.block_bytes, dtype=np.int64)
    gets = np.maximum(1, -(-sizes // spec.max_request_bytes))
    hot = _tier(spec.hot_policy, num_nodes, spec.hot_capacity_bytes, spec.hot_admit_min_count,
                spec.hot_get_cost_bytes, spec, sizes, length)
    has_warm = spec.warm_policy is not None
    warm = _tier(spec.warm_policy or "keep", 1, spec.warm_capacity_bytes if has_warm else 0,
                 spec.warm_admit_min_count, spec.warm_get_cost_bytes, spec, sizes if has_warm else sizes[:1])
    nexts = (next_use(block, node, len(sizes)) if hot.policy == CLAIRVOYANT
             else np.zeros(1, np.int64))
    epoch = trace.epoch
    span = float(float(epoch.max()) - float(epoch.min())) + 1.0 if length else 1.0
    clocks = np.full(num_nodes + 1, -np.inf)
    totals = np.zeros(kernel.TOTALS, np.int64)
    record = np.empty(0, np.int8) if outcome is None else outcome
    for done in range(0, length, CHUNK):
        if progress is not None:
            progress(done, length)
        stop = min(done + CHUNK, length)
        kernel.replay(block, node, as_epochs(epoch[done:stop]), nexts, sizes, gets, hot, warm, has_warm, clocks,
                      span, NEVER, totals, record, done, stop)
    if progress is not None:
        progress(length, length)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    counts = [int(count) for count in totals]
    return SimResult(spec.hot_policy, spec.warm_policy, length, hot_hits=counts[kernel.HOT_HITS],
                     warm_hits=counts[kernel.WARM_HITS], cold_misses=counts[kernel.COLD_MISSES],
                     cold_bytes=counts[kernel.COLD_BYTES], cold_gets=counts[kernel.COLD_GETS],
                     hot_promotions=counts[kernel.HOT_PROMOTIONS], hot_demotions=counts[kernel.HOT_DEMOTIONS],
                     warm_promotions=counts[kernel.WARM_PROMOTIONS], warm_demotions=counts[kernel.WARM_DEMOTIONS],
                     seconds=seconds, cpu_seconds=cpu_seconds)
