"""Residency and capacity of one tier, and the pins it honours: the one place a block's state changes.

A block in a tier is in one of three states, and these are the only legal transitions::

    ABSENT --reserve--> RESERVED --commit--> RESIDENT --remove--> ABSENT
                        RESERVED --abort---> ABSENT

Bytes are reserved before a write starts, so concurrent writers never push the tier past
its capacity. Victims chosen by the policy are removed from the index first; the caller
deletes their files. Not thread-safe: the owner (a node cache or the coordinator) holds
its lock around every call. No I/O here, so the simulator drives the same class.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Hashable, Sequence

from tierload.policies.base import Policy
from tierload.policies.counts import AccessCounts, PinCounts
from tierload.policies.frequency import DecayingCounter


class Residency(enum.Enum):
    ABSENT = "absent"
    RESERVED = "reserved"
    RESIDENT = "resident"


@dataclass(frozen=True, slots=True)
class Admission:
    """Outcome of :meth:`TierIndex.reserve`.

    Attributes:
        admitted: Whether space was reserved for the block.
        victims: Blocks removed from the index to make room (their files must be deleted).
        reason: Why admission was refused (empty when admitted).
    """

    admitted: bool
    victims: Sequence
    reason: str = ""


# Refusals carry no per-call data, so reserve() returns these instead of building new ones: a
# tier that is full of equally useful blocks refuses most offers, millions per simulated trace.
_PRESENT = Admission(False, (), "already present")
_TOO_LARGE = Admission(False, (), "block exceeds the tier's capacity")
_TOO_RARE = Admission(False, (), "access count below admit_min_count")
_NO_VICTIMS = Admission(False, (), "the policy refused admission")
_ADMITTED_NO_VICTIMS = Admission(True, ())


class TierIndex:
    """Which blocks a tier holds, how many bytes they use, and which may not be evicted.

    Args:
        name: Tier name (for stats and errors).
        capacity_bytes: Never exceeded by resident + reserved bytes.
        policy: Chooses victims (see :mod:`tierload.policies`).
        accesses: Where accesses are counted; this tier's policy hears of each one, and the
            admission threshold reads its decayed counts. A bare :class:`DecayingCounter`
            (a tier on its own: the simulator, tests) is counted through an
            :class:`AccessCounts` of its own.
        admit_min_count: Accesses a block needs before it may be admitted.
        pins: Pin counts, owned by the caller and shared between the levels of one node's hot
            tier (a pinned block is needed by a planned access and must stay wherever it is);
            read here, never changed.
    """

    def __init__(self, name: str, capacity_bytes: int, policy: Policy, accesses: AccessCounts | DecayingCounter,
                 admit_min_count: float = 1.0, pins: PinCounts | None = None) -> None:
        if isinstance(accesses, DecayingCounter):
            accesses = AccessCounts(accesses)
        self.name = name
        self.capacity_bytes = capacity_bytes
        self.policy = policy
        self.accesses = accesses
        self.counter = accesses.counter
        self.admit_min_count = admit_min_count
        self.resident: dict[Hashable, int] = {}
        self.reserved: dict[Hashable, int] = {}
        self.pins = PinCounts() if pins is None else pins
        self.used_bytes = 0
        self.evictions = 0
        self.refusals = 0
        self.admissions = 0
        accesses.listen(self)

    def state(self, key: Hashable) -> Residency:
        if key in self.resident:
            return Residency.RESIDENT
        if key in self.reserved:
            return Residency.RESERVED
        return Residency.ABSENT

    def __contains__(self, key: Hashable) -> bool:
        return key in self.resident

    def record_access(self, key: Hashable, now: float) -> None:
        """Count one access of ``key`` (hit or miss) where accesses are counted (see ``accesses``)."""
        self.accesses.record(key, now)

    def reserve(self, key: Hashable, size: int, now: float) -> Admission:
        """Try to make room for ``key`` (``size`` bytes): ABSENT -> RESERVED.

        Returns:
            The admission decision; on success the victims are already out of the index.
        """
        if key in self.resident or key in self.reserved:
            return _PRESENT
        if size > self.capacity_bytes:
            self.refusals += 1
            return _TOO_LARGE
        if self.admit_min_count > 0 and self.counter.at_last_access(key) < self.admit_min_count:
            self.refusals += 1
            return _TOO_RARE
        need = self.used_bytes + size - self.capacity_bytes
        admission = _ADMITTED_NO_VICTIMS
        if need > 0:
            chosen = self.policy.victims(key, size, need, self.resident, self.pins.is_pinned, now)
            if chosen is None:
                self.refusals += 1
                return _NO_VICTIMS
            for victim in chosen:
                self.remove(victim)
            self.evictions += len(chosen)
            admission = Admission(True, chosen)
        self.reserved[key] = size
        self.used_bytes += size
        return admission

    def commit(self, key: Hashable, now: float) -> None:
        """RESERVED -> RESIDENT (the block's file is complete)."""
        size = self.reserved.pop(key)
        self.resident[key] = size
        self.admissions += 1
        self.policy.on_insert(key, size, now)

    def abort(self, key: Hashable) -> None:
        """RESERVED -> ABSENT (the write failed)."""
        size = self.reserved.pop(key, None)
        if size is not None:
            self.used_bytes -= size

    def add_existing(self, key: Hashable, size: int, now: float) -> bool:
        """Register a block found on disk at start-up, if it fits; ABSENT -> RESIDENT."""
        if key in self.resident or self.used_bytes + size > self.capacity_bytes:
            return False
        self.resident[key] = size
        self.used_bytes += size
        self.policy.on_insert(key, size, now)
        return True

    def readmit(self, key: Hashable, size: int, now: float) -> None:
        """ABSENT -> RESIDENT for a victim whose file could not be deleted (a read-only directory):
        the index keeps saying what is on disk, even beyond capacity until the next eviction."""
        if key in self.resident:
            return
        self.resident[key] = size
        self.used_bytes += size
        self.policy.on_insert(key, size, now)

    def resize(self, capacity_bytes: int) -> None:
        """Set the capacity (e.g. lowered to what a full file system holds); nothing is evicted
        now: the next admission makes room for itself under the new capacity."""
        self.capacity_bytes = max(0, capacity_bytes)

    def remove(self, key: Hashable) -> bool:
        """RESIDENT -> ABSENT. Returns whether the block was resident."""
        size = self.resident.pop(key, None)
        if size is None:
            return False
        self.used_bytes -= size
        self.policy.on_remove(key)
        return True

    def replace_policy(self, policy: Policy, admit_min_count: float, now: float) -> None:
        """Switch to another policy without moving a byte: residents are handed to the new policy,
        which decides from the next admission on."""
        for key, size in self.resident.items():
            policy.on_insert(key, size, now)
        self.policy = policy
        self.admit_min_count = admit_min_count

    def stats(self) -> dict:
        return {"tier": self.name, "capacity_bytes": self.capacity_bytes, "used_bytes": self.used_bytes,
                "blocks": len(self.resident), "reserved_blocks": len(self.reserved),
                "pinned_blocks": len(self.pins), "evictions": self.evictions, "refusals": self.refusals,
                "admissions": self.admissions,
                "policy": self.policy.name}
