"""Decayed access counts in arrays: :class:`tierload.policies.frequency.DecayingCounter`, compiled.

Same state and arithmetic, so the same floats: per index a row of the count as of its latest
access (``value``, column 0; 0.0 means never seen, since a count is >= 1 right after an
access), the time of that access (``then``, 1) and the accesses made at that time (``recent``, 2).
"""

from __future__ import annotations

import math

from tierload.policies.frequency import COUNT_TOLERANCE
from tierload.simulator.fast.jit import inlined, kernel


@inlined
def add(t, idx, now):
    """Record one access of index ``idx`` at ``now`` (``DecayingCounter.add``)."""
    value = t.counts_state[idx, 0]
    if value == 0.0:
        t.counts_state[idx, 0] = 1.0
        t.counts_state[idx, 1] = now
        t.counts_state[idx, 2] = 1.0
        return
    then = t.counts_state[idx, 1]
    if now > then:
        t.counts_state[idx, 0] = value * 2.0 ** (-(now - then) / t.half_life) + 1.0
        t.counts_state[idx, 1] = now
        t.counts_state[idx, 2] = 1.0
    else:
        t.counts_state[idx, 0] = value + 1.0
        t.counts_state[idx, 2] += 1.0


@inlined
def count(t, idx, now):
    """``DecayingCounter.count``."""
    value = t.counts_state[idx, 0]
    if value == 0.0:
        return 0.0
    then = t.counts_state[idx, 1]
    return value * 2.0 ** (-(now - then) / t.half_life) if now > then else value


@inlined
def count_before(t, idx, now):
    """``DecayingCounter.count_before``."""
    value = t.counts_state[idx, 0]
    if value == 0.0:
        return 0.0
    then = t.counts_state[idx, 1]
    return value * 2.0 ** (-(now - then) / t.half_life) if now > then else value - t.counts_state[idx, 2]


@inlined
def score(t, idx):
    """``DecayingCounter.score``."""
    value = t.counts_state[idx, 0]
    if value <= 0.0:
        return -math.inf
    return math.log2(value) + t.counts_state[idx, 1] / t.half_life


@kernel
def at_least(count, other):
    """:func:`tierload.policies.frequency.at_least`."""
    return count >= other - COUNT_TOLERANCE * max(1.0, abs(other))
