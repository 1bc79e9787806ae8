"""Replay a trace through a stack of tiers: a hot tier per node, a shared warm tier, cold.

No storage is touched: each tier is a :class:`tierload.policies.tierindex.TierIndex` driving the
same policy classes the node cache and the coordinator use, and the stack moves blocks as
they do:

1. Every access is counted by its node's hot tier and, cluster-wide, by the warm tier
   (node caches report every access to the coordinator).
2. A hot hit ends there. A miss reads the warm tier if it holds the block, else cold
   (one GET per ``cold.max_request_bytes``).
3. The block is offered to the hot tier; blocks it evicts are demoted to the warm tier
   (offered, if warm does not hold them yet).
4. A block read from cold is offered to the warm tier (promotion); blocks the warm tier
   evicts are dropped (cold keeps every block).

Time (the decay clock) is the job's epoch number, as with ``policy.decay.unit: epoch``:
the hot tier of a node is at the highest epoch its streams reached, the warm tier at the
highest any node reached. Not modelled: the RAM level of the hot tier, pins of the
prefetch window, and the block-file header that makes stored blocks a few bytes larger.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, cast

import numpy as np

from tierload.errors import ConfigError
from tierload.policies.base import Policy
from tierload.policies.clairvoyant import NextUseOracle
from tierload.policies.frequency import DecayingCounter
from tierload.policies.registry import make_policy, policy_spec
from tierload.policies.tierindex import TierIndex
from tierload.simulator.oracle import TraceOracle, next_use
from tierload.simulator.stack import SimResult, StackSpec, counts_matter
from tierload.simulator.trace import PROGRESS_EVERY, Progress, Trace


def _clocks(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Decay clock of each access at its hot tier (per node) and at the warm tier (cluster).

    Each is the running maximum of the epochs its accesses came from (a node cache's clock is
    the highest epoch its streams reached; the coordinator's the highest any node reported).
    """
    epoch = np.asarray(trace.epoch, dtype=np.float64)
    if not len(epoch):
        return epoch, epoch
    # Running maximum per node in one pass: sorted by node, each node's epochs are lifted
    # above every earlier node's, so the maximum restarts at each node's first access.
    by_node = np.argsort(trace.node, kind="stable")
    lift = trace.node[by_node] * (float(epoch.max() - epoch.min()) + 1.0)
    hot = np.empty_like(epoch)
    hot[by_node] = np.maximum.accumulate(epoch[by_node] + lift) - lift
    return hot, np.maximum.accumulate(epoch)


def _tier(name: str, capacity_bytes: int, policy_name: str, admit_min_count: float, spec: StackSpec,
          get_cost_bytes: int, oracle: TraceOracle | None) -> tuple[TierIndex, Callable | None, Callable | None]:
    """A tier index, and the two calls that record an access into it (None: nothing to do).

    The calls are what :meth:`TierIndex.record_access` makes (and what the node cache makes
    for each access), bound once because they run for every access.
    """
    counter = DecayingCounter(spec.half_life)
    # A TraceOracle's keys are block indices, the keys this simulator's tiers use.
    policy = make_policy(policy_name, counter=counter, oracle=cast("NextUseOracle | None", oracle),
                         get_cost_bytes=get_cost_bytes)
    on_access = None if type(policy).on_access is Policy.on_access else policy.on_access
    if counts_matter(policy_name, admit_min_count):
        return TierIndex(name, capacity_bytes, policy, counter, admit_min_count), counter.add, on_access
    # Counting would change no decision (see counts_matter) and costs a third of the replay:
    # tell only the policy, and drop the threshold that the count would always have passed.
    return TierIndex(name, capacity_bytes, policy, counter, 0.0), None, on_access


ENGINES = ("auto", "fast", "reference")


def simulate(trace: Trace, spec: StackSpec, progress: Progress | None = None, *, engine: str = "auto",
             outcome: np.ndarray | None = None) -> SimResult:
    """Replay ``trace`` through the tiers of ``spec``.

    Args:
        trace: The accesses.
        spec: Tiers, capacities and policies.
        progress: Called now and then, and at the end, with the accesses replayed so far and
            the trace's length.
        engine: ``"reference"``: the Python policy classes the actors run (:func:`simulate_reference`);
            ``"fast"``: the compiled replay (:mod:`tierload.simulator.fast`), the same decision
            at every access; ``"auto"``: fast when it knows the stack's policies.
        outcome: int8 (accesses,), filled with where each access was served: 0 hot, 1 warm, 2 cold.

    Returns:
        Counts of hits, cold traffic, promotions and demotions.

    Raises:
        ConfigError: Unknown policy name or engine, or a capacity below zero.
    """
    if engine not in ENGINES:
        raise ConfigError(f"unknown simulator engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if engine != "reference":
        from tierload.simulator.fast.simulate import simulate_fast, supports

        if engine == "fast" or supports(spec):
            return simulate_fast(trace, spec, progress, outcome)
    return simulate_reference(trace, spec, progress, outcome)


def simulate_reference(trace: Trace, spec: StackSpec, progress: Progress | None = None,  # noqa: C901 - the hot loop, written out
                       outcome: np.ndarray | None = None) -> SimResult:
    """:func:`simulate` through the Python policy classes and :class:`TierIndex` the actors run.

    Raises:
        ConfigError: Unknown policy name, or a capacity below zero.
    """
    # C901: the replay loop is written out on purpose (see the comments in it): every call or
    # branch moved out of it runs once per access, and the loop is the simulator's speed.
    if spec.hot_capacity_bytes < 0 or spec.warm_capacity_bytes < 0:
        raise ConfigError("tier capacities must be >= 0 bytes")
    num_nodes = max(trace.num_nodes, 1)
    clairvoyant = policy_spec(spec.hot_policy).needs_order
    oracles = [TraceOracle(trace.num_blocks) for _ in range(num_nodes)]
    hot_tiers: list[TierIndex] = []
    hot_count: list[Any] = []  # each None or a bound call, decided for every node alike
    hot_tell: list[Any] = []
    for node in range(num_nodes):
        index, count, tell = _tier(f"hot-{node}", spec.hot_capacity_bytes, spec.hot_policy,
                                   spec.hot_admit_min_count, spec, spec.hot_get_cost_bytes, oracles[node])
        hot_tiers.append(index)
        hot_count.append(count)
        hot_tell.append(tell)
    hot_counts, hot_tells = hot_count[0] is not None, hot_tell[0] is not None
    warm: TierIndex | None = None
    warm_count: Callable | None = None
    warm_tell: Callable | None = None
    if spec.warm_policy is not None:
        warm, warm_count, warm_tell = _tier("warm", spec.warm_capacity_bytes, spec.warm_policy,
                                            spec.warm_admit_min_count, spec, spec.warm_get_cost_bytes, None)

    sizes = trace.block_bytes.tolist()
    gets = [max(1, -(-size // spec.max_request_bytes)) for size in sizes]
    hot_clock, warm_clock = _clocks(trace)
    nexts = next_use(trace.block, trace.node) if clairvoyant else np.zeros(0, dtype=np.int64)
    length = len(trace)
    has_warm = warm is not None
    warm_resident = warm.resident if warm is not None else {}
    hot_hits = warm_hits = cold_misses = cold_bytes = cold_gets = 0
    hot_promotions = hot_demotions = warm_promotions = warm_demotions = 0
    served: list[int] | None = None if outcome is None else []  # where each access was served (0 hot, 1 warm, 2 cold)

    # Offering a block to the warm tier (as a node's warm sync proposes it) is written out at
    # its two call sites below: it runs for most hot misses, and a call would cost a tenth of
    # the replay.
    warm_reserve: Any = warm.reserve if warm is not None else None  # called only when has_warm
    warm_commit: Any = warm.commit if warm is not None else None
    # The oracles' next-use lists, written directly: what TraceOracle.advance does, without a
    # call per access (heap-mode clairvoyant reads only next uses, never the position).
    next_at = [oracle.next_at for oracle in oracles]

    started, cpu_started = time.perf_counter(), time.process_time()
    for done in range(0, length, PROGRESS_EVERY):
        if progress is not None:
            progress(done, length)
        # Python lists of one chunk at a time: whole-trace lists of ints and floats would take
        # ~250 bytes per access (2.5 GB for 10M), and the loop reads them no faster.
        chunk = slice(done, done + PROGRESS_EVERY)
        accesses = zip(trace.block[chunk].tolist(),
                       trace.node[chunk].tolist(), hot_clock[chunk].tolist(), warm_clock[chunk].tolist(),
                       nexts[chunk].tolist() if clairvoyant else itertools.repeat(None), strict=False)
        for block, node, now, warm_now, upcoming in accesses:
            if clairvoyant:
                next_at[node][block] = upcoming
            if hot_counts:
                hot_count[node](block, now)
            if hot_tells:
                hot_tell[node](block, now)
            if has_warm:
                if warm_count is not None:
                    warm_count(block, warm_now)
                if warm_tell is not None:
                    warm_tell(block, warm_now)
            hot = hot_tiers[node]
            if block in hot.resident:
                hot_hits += 1
                if served is not None:
                    served.append(0)
                continue
            size = sizes[block]
            from_cold = block not in warm_resident
            if from_cold:
                cold_misses += 1
                cold_bytes += size
                cold_gets += gets[block]
            else:
                warm_hits += 1
            if served is not None:
                served.append(2 if from_cold else 1)
            admission = hot.reserve(block, size, now)
            if admission.admitted:
                hot.commit(block, now)
                hot_promotions += 1
                if admission.victims:
                    hot_demotions += len(admission.victims)
                    if has_warm:  # demoted blocks first, then the fresh one: the order a node proposes them
                        for victim in admission.victims:
                            if victim not in warm_resident:
                                offered = warm_reserve(victim, sizes[victim], warm_now)
                                if offered.admitted:
                                    warm_commit(victim, warm_now)
                                    warm_promotions += 1
                                    warm_demotions += len(offered.victims)
            if from_cold and has_warm:
                offered = warm_reserve(block, size, warm_now)
                if offered.admitted:
                    warm_commit(block, warm_now)
                    warm_promotions += 1
                    warm_demotions += len(offered.victims)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    if progress is not None:
        progress(length, length)
    if outcome is not None and served is not None:
        outcome[:] = served
    return SimResult(spec.hot_policy, spec.warm_policy, length, hot_hits, warm_hits, cold_misses, cold_bytes,
                     cold_gets, hot_promotions, hot_demotions, warm_promotions, warm_demotions, seconds, cpu_seconds)
