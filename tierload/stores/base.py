"""The interface every tier backend implements: a flat namespace of block files.

Capacity and residency are not the store's business: :class:`tierload.policies.tierindex.TierIndex`
accounts for them, so policies stay free of I/O. Stores only move bytes, atomically.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path


class BlockStore(ABC):
    """A directory-like place that holds block files under their keys.

    Writes are atomic: a reader sees either no file or the complete file, never a partial one.
    Implementations must pickle cleanly (clients are created lazily per process).
    """

    url: str

    @property
    def local_path(self) -> Path | None:
        """The directory on this machine that holds the blocks, if the store is local."""
        return None

    @abstractmethod
    def read(self, key: str) -> bytes:
        """Return the whole stored file of ``key``.

        Raises:
            KeyError: No block is stored under ``key``.
            BackendError: The backend failed.
        """

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Return bytes ``[start, end)`` of the stored file of ``key`` (default: read all, slice)."""
        return self.read(key)[start:end]

    @abstractmethod
    def write(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` atomically (temporary name, then rename into place)."""

    def size(self, key: str) -> int:
        """Bytes of the stored file of ``key`` (default: read it).

        Raises:
            KeyError: No block is stored under ``key``.
        """
        return len(self.read(key))

    @abstractmethod
    def delete(self, key: str) -> bool:
        """Remove ``key``; return whether it was there.

        Raises:
            BackendError: The file is there but cannot be removed (e.g. a read-only file system).
        """

    @abstractmethod
    def contains(self, key: str) -> bool:
        """Whether a complete file is stored under ``key``."""

    @abstractmethod
    def scan(self) -> dict[str, int]:
        """Sweep temporary leftovers of dead writers and return ``{key: stored_size_bytes}``."""
