"""The eviction/admission policy interface. Pure: no I/O, no Ray, no clocks of its own.

A :class:`tierload.policies.tierindex.TierIndex` owns residency and capacity and asks its policy two
things: which residents to evict so a new block fits (or whether to refuse the new block),
and it tells the policy every access, insert and removal. The simulator drives the same
classes with a recorded or computed trace.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Hashable, Mapping

Key = Hashable


class Policy(ABC):
    """Chooses victims for one tier."""

    name: str = ""

    def on_access(self, key: Key, now: float) -> None:  # noqa: B027 - an optional hook
        """``key`` was read (hit or miss) at time ``now``."""

    def on_insert(self, key: Key, size: int, now: float) -> None:  # noqa: B027 - an optional hook
        """``key`` became resident."""

    def on_remove(self, key: Key) -> None:  # noqa: B027 - an optional hook
        """``key`` left the tier (evicted, invalidated or found corrupt)."""

    @abstractmethod
    def victims(self, key: Key, size: int, need_bytes: int, resident: Mapping[Key, int],
                is_pinned: Callable[[Key], bool], now: float) -> list[Key] | None:
        """Residents to evict so that ``need_bytes`` more bytes are free for ``key``.

        Args:
            key: The block asking to be admitted.
            size: Its size in bytes.
            need_bytes: Bytes that must be freed (> 0).
            resident: ``{key: size_bytes}`` of blocks in the tier.
            is_pinned: True for residents that must not be evicted now.
            now: Current time in the counter's unit.

        Returns:
            The victims (their sizes sum to at least ``need_bytes``), or ``None`` to refuse
            admission of ``key`` (it is served once and not kept).
        """


def take_until(candidates, need_bytes: int, resident: Mapping[Key, int],
               is_pinned: Callable[[Key], bool]) -> list[Key] | None:
    """First unpinned candidates whose sizes reach ``need_bytes``; None if they cannot."""
    chosen, freed = [], 0
    for candidate in candidates:
        if is_pinned(candidate):
            continue
        chosen.append(candidate)
        freed += resident[candidate]
        if freed >= need_bytes:
            return chosen
    return None
