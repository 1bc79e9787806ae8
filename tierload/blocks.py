"""Blocks: the unit tiers store, move and count."""

from __future__ import annotations

from dataclasses import dataclass

from tierload.keys import block_key


@dataclass(frozen=True, slots=True)
class Block:
    """A whole object, or a byte range of one, as stored in the tiers.

    Attributes:
        key: Safe, stable tier key (see :mod:`tierload.keys`).
        url: Source object URL in the cold tier.
        version: The source object's ETag (or ``mtime-size``) when the manifest was built.
        offset: First byte of the block in the object.
        length: Size of the block in bytes (0 for an empty object).
    """

    key: str
    url: str
    version: str
    offset: int
    length: int

    @classmethod
    def of(cls, url: str, version: str, offset: int, length: int) -> "Block":
        """Build a block and derive its key from (url, version, byte range)."""
        return cls(block_key(url, version, offset, length), url, version, offset, length)
