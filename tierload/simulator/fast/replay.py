"""The compiled replay loop: :func:`tierload.simulator.run.simulate`'s steps on integer arrays.

Per access, in the reference's order: the clocks move on, the hot tier of the access's node
and the warm tier count it and tell their policies, a hot hit ends it; a miss reads warm or
cold, offers the block to the hot tier, offers the hot tier's victims to warm (demotion) and
a block read from cold to warm (promotion).
"""

from __future__ import annotations

from tierload.simulator.fast import tier
from tierload.simulator.fast.jit import inlined, kernel

# Indices of the totals array.
HOT_HITS, WARM_HITS, COLD_MISSES, COLD_BYTES, COLD_GETS = 0, 1, 2, 3, 4
HOT_PROMOTIONS, HOT_DEMOTIONS, WARM_PROMOTIONS, WARM_DEMOTIONS = 5, 6, 7, 8
TOTALS = 9
HOT, WARM, COLD = 0, 1, 2  # per-access outcomes


@inlined
def _offer_warm(warm, key, now, never, sizes, block, totals):
    """Offer ``key`` to the warm tier (a node's warm sync proposing it)."""
    chosen = tier.admit(warm, 0, key, now, never, never, sizes, block)
    if chosen >= 0:
        totals[WARM_PROMOTIONS] += 1
        totals[WARM_DEMOTIONS] += chosen


@inlined
def _miss(hot, warm, has_warm, node, key, now, warm_now, upcoming, never, sizes, gets, block, totals):
    """Serve a hot miss; returns where it was served from."""
    from_cold = not has_warm or warm.resident[key] == 0
    if from_cold:
        totals[COLD_MISSES] += 1
        totals[COLD_BYTES] += sizes[key]
        totals[COLD_GETS] += gets[key]
    else:
        totals[WARM_HITS] += 1
    chosen = tier.admit(hot, node, key, now, upcoming, never, sizes, block)
    if chosen >= 0:
        totals[HOT_PROMOTIONS] += 1
        totals[HOT_DEMOTIONS] += chosen
        if has_warm:  # demoted blocks first, then the fresh one: the order a node proposes them
            for at in range(chosen):
                victim = hot.victims[at]
                if warm.resident[victim] == 0:
                    _offer_warm(warm, victim, warm_now, never, sizes, block, totals)
    if from_cold and has_warm:
        _offer_warm(warm, key, warm_now, never, sizes, block, totals)
    return COLD if from_cold else WARM


@kernel
def replay(block, node, epoch, nexts, sizes, gets, hot, warm, has_warm, clocks, span, never, totals,
           outcome, start, stop):
    """Replay accesses ``start .. stop - 1``; the state carries over between calls.

    Args:
        block, node: int32 (accesses,): the trace's columns.
        epoch: float64 (stop - start,): the trace's epochs of these accesses only.
        nexts: int64: next use of each access's block by its node (only read by clairvoyant;
            may be shorter otherwise).
        sizes, gets: int64 (blocks,): bytes and cold GETs of each block.
        hot, warm: The tiers (warm unused when ``has_warm`` is False).
        clocks: float64 (nodes + 1,): running maxima of ``epoch + node lift`` per node, then
            the warm tier's clock (``-inf`` before the first access).
        span: The node lift's unit (as ``tierload.simulator.run._clocks`` computes it).
        never: The ``NEVER`` next use.
        totals: int64 (TOTALS,): counts, added to.
        outcome: int8: where each access was served (HOT, WARM, COLD), or an empty array.
    """
    record = len(outcome) > 0
    warm_at = len(clocks) - 1
    clairvoyant = hot.policy == tier.CLAIRVOYANT
    for i in range(start, stop):
        key, n, e = block[i], node[i], float(epoch[i - start])
        lift = n * span
        if e + lift > clocks[n]:
            clocks[n] = e + lift
        now = clocks[n] - lift
        if e > clocks[warm_at]:
            clocks[warm_at] = e
        warm_now = clocks[warm_at]
        upcoming = nexts[i] if clairvoyant else never
        tier.on_access(hot, n, key, i, now, upcoming, never)
        if has_warm:
            tier.on_access(warm, 0, key, i, warm_now, never, never)
        if hot.resident[n * hot.nblocks + key]:
            totals[HOT_HITS] += 1
            served = HOT
        else:
            served = _miss(hot, warm, has_warm, n, key, now, warm_now, upcoming, never, sizes, gets, block,
                           totals)
        if record:
            outcome[i] = served
