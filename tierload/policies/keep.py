"""Keep what you admitted: fill the tier, then never evict for a newcomer.

Under uniform random access (a shuffled epoch) to a dataset larger than the tier, every
block is equally likely next, so swapping residents gains nothing and costs a write; a
static cache holds its hit ratio at capacity/dataset where LRU falls below it (Mohan et
al., "Analyzing and Mitigating Data Stalls in DNN Training", VLDB 2021).
"""

from __future__ import annotations

from tierload.policies.base import Policy


class KeepPolicy(Policy):
    """Admits while there is room; refuses once full."""

    name = "keep"

    def victims(self, key, size, need_bytes, resident, is_pinned, now):
        return None
