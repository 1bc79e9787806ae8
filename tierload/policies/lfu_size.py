"""Size-aware LFU: keeps the blocks that save the most per byte of tier, for mixed block sizes.

Every miss of a block of ``size`` bytes costs one GET and ``size`` bytes of transfer. With a
GET weighed as ``get_cost_bytes`` bytes of transfer (request latency and price), keeping the
block saves ``count * (get_cost_bytes + size)`` per unit of future time and occupies ``size``
bytes, so residents are ranked by the density ``count * (get_cost_bytes + size) / size``:
the frequency-and-size priority of Greedy-Dual-Size-Frequency (L. Cherkasova, "Improving
WWW Proxies Performance with Greedy-Dual-Size-Frequency Caching Policy", HP Labs
HPL-98-69R1, 1998), with aging from the decayed counter instead of GDSF's inflation value.
A newcomer is admitted only if its density (from its count before the access that brought
it, as in :class:`LFUPolicy`) beats every victim's, so equal blocks are kept, not churned.

``get_cost_bytes = 0`` ranks by count alone (plain LFU, byte-optimal); a large value ranks by
count per byte (fewest GETs). With equal block sizes it decides exactly like LFU.
"""

from __future__ import annotations

import math

from tierload.policies.base import Key
from tierload.policies.frequency import DecayingCounter
from tierload.policies.lfu import LFUPolicy

DEFAULT_GET_COST_BYTES = 2**20  # ~30 ms to first byte at ~35 MB/s per S3 stream


class SizeAwareLFUPolicy(LFUPolicy):
    """Evicts the resident with the lowest decayed count times cost per byte.

    Args:
        counter: The access counter (the caller records accesses into it).
        get_cost_bytes: What one GET weighs, in bytes of transfer (>= 0).

    Raises:
        ValueError: ``get_cost_bytes`` is negative.
    """

    name = "lfu-size"

    def __init__(self, counter: DecayingCounter, get_cost_bytes: int = DEFAULT_GET_COST_BYTES) -> None:
        if get_cost_bytes < 0:
            raise ValueError(f"get_cost_bytes={get_cost_bytes}; it must be >= 0")
        super().__init__(counter)
        self.get_cost_bytes = get_cost_bytes
        self._size: dict[Key, int] = {}

    def _weight(self, size: int) -> float:
        """Cost of one miss per byte of tier the block occupies."""
        return (self.get_cost_bytes + size) / max(size, 1)

    def _rank(self, key: Key) -> float:
        return self.counter.score(key) + math.log2(self._weight(self._size[key]))

    def _value(self, key: Key, now: float) -> float:
        return super()._value(key, now) * self._weight(self._size[key])

    def _newcomer_value(self, key: Key, size: int, now: float) -> float:
        return super()._newcomer_value(key, size, now) * self._weight(size)

    def on_insert(self, key: Key, size: int, now: float) -> None:
        self._size[key] = size
        super().on_insert(key, size, now)

    def on_remove(self, key: Key) -> None:
        self._size.pop(key, None)
        super().on_remove(key)
