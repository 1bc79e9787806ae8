"""The two counts that steer eviction: how often a block was read, and who needs it next.

:class:`AccessCounts` is the one place an access is counted: it adds the access to the decayed
counts (what admission thresholds and frequency policies read) and tells the policy of every
tier that listens. A node cache counts its consumers' accesses through one; the coordinator
aggregates the nodes' reports through another; a lone :class:`~tierload.policies.tierindex.TierIndex`
(tests, tools) counts through its own.

:class:`PinCounts` is the one owner of pins: a block pinned by a planned access must stay
wherever it is. Every tier index that shares it (the levels of a node's hot tier) only reads it.

Pure bookkeeping, no I/O and no lock: the owner holds its lock around every call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Hashable, Iterator

from tierload.policies.frequency import DecayingCounter

if TYPE_CHECKING:
    from tierload.policies.tierindex import TierIndex


class AccessCounts:
    """Decayed access counts, and the tiers whose policies hear of every access.

    Args:
        counter: The decayed counts (read by admission thresholds and frequency policies).
    """

    def __init__(self, counter: DecayingCounter) -> None:
        self.counter = counter
        self._tiers: list[TierIndex] = []

    def listen(self, tier: TierIndex) -> None:
        """Tell ``tier``'s policy (whichever it runs at the time) of every access from now on."""
        self._tiers.append(tier)

    def record(self, key: Hashable, now: float, amount: float = 1.0) -> None:
        """Count ``amount`` accesses of ``key`` (hits or misses) at ``now`` (decay-clock units)."""
        self.counter.add(key, now, amount)
        for tier in self._tiers:
            tier.policy.on_access(key, now)


class PinCounts:
    """How many planned accesses still need each block; a pinned block is never evicted."""

    def __init__(self) -> None:
        self._counts: dict[Hashable, int] = {}
        # The dict's own __contains__, not a method: policies call it once per eviction candidate.
        self.is_pinned: Callable[[Hashable], bool] = self._counts.__contains__

    def pin(self, key: Hashable) -> None:
        """One more planned access needs ``key``."""
        self._counts[key] = self._counts.get(key, 0) + 1

    def unpin(self, key: Hashable) -> bool:
        """One planned access of ``key`` is over; True when nothing needs ``key`` any more."""
        count = self._counts.get(key, 0)
        if count <= 1:
            self._counts.pop(key, None)
            return True
        self._counts[key] = count - 1
        return False

    def __contains__(self, key: Hashable) -> bool:
        return key in self._counts

    def __len__(self) -> int:
        return len(self._counts)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._counts)
