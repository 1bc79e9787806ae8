"""Decayed access counts in arrays: :class:`tierload.policies.frequency.DecayingCounter`, compiled.

Same state and arithmetic, so the same floats: per index a count as of its latest access
(``value``; 0.0 means never seen, since a count is >= 1 right after an access), the time of
that access (``then``) and the accesses made at that time (``recent``).
"""

from __future__ import annotations

import math

from tierload.policies.frequency import COUNT_TOLERANCE
from tierload.simulator.fast.jit import kernel


@kernel
def add(t, idx, now):
    """Record one access of index ``idx`` at ``now`` (``DecayingCounter.add``)."""
    value = t.cval[idx]
    if value == 0.0:
        t.cval[idx] = 1.0
        t.cthen[idx] = now
        t.crecent[idx] = 1.0
        return
    then = t.cthen[idx]
    if now > then:
        t.cval[idx] = value * 2.0 ** (-(now - then) / t.half_life) + 1.0
        t.cthen[idx] = now
        t.crecent[idx] = 1.0
    else:
        t.cval[idx] = value + 1.0
        t.crecent[idx] += 1.0


@kernel
def count(t, idx, now):
    """``DecayingCounter.count``."""
    value = t.cval[idx]
    if value == 0.0:
        return 0.0
    then = t.cthen[idx]
    return value * 2.0 ** (-(now - then) / t.half_life) if now > then else value


@kernel
def count_before(t, idx, now):
    """``DecayingCounter.count_before``."""
    value = t.cval[idx]
    if value == 0.0:
        return 0.0
    then = t.cthen[idx]
    return value * 2.0 ** (-(now - then) / t.half_life) if now > then else value - t.crecent[idx]


@kernel
def score(t, idx):
    """``DecayingCounter.score``."""
    value = t.cval[idx]
    if value <= 0.0:
        return -math.inf
    return math.log2(value) + t.cthen[idx] / t.half_life


@kernel
def at_least(count, other):
    """:func:`tierload.policies.frequency.at_least`."""
    return count >= other - COUNT_TOLERANCE * max(1.0, abs(other))
