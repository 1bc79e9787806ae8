"""Blocks: the unit tiers store, move and count."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tierload.stores.keys import block_key

if TYPE_CHECKING:
    from tierload.data.packs import PackMembers


@dataclass(frozen=True, slots=True)
class Block:
    """A whole object, a byte range of one, or a pack of small objects, as stored in the tiers.

    Attributes:
        key: Safe, stable tier key (see :mod:`tierload.stores.keys`).
        url: Source object URL in the cold tier.
        version: The source object's ETag (or ``mtime-size``) when the manifest was built.
        offset: First byte of the block in the object.
        length: Size of the block in bytes (0 for an empty object).
        members: The objects of a pack (see :mod:`tierload.data.packs`), or None for a plain block.
            A pack's ``url`` is its first member's, its ``version`` a digest of all members'.
    """

    key: str
    url: str
    version: str
    offset: int
    length: int
    members: PackMembers | None = None

    @classmethod
    def of(cls, url: str, version: str, offset: int, length: int) -> "Block":
        """Build a block and derive its key from (url, version, byte range)."""
        return cls(block_key(url, version, offset, length), url, version, offset, length)

    @classmethod
    def pack(cls, members: PackMembers, digest: str | None = None) -> "Block":
        """The block of a pack of small objects (key and version derive from every member).

        Args:
            members: The pack's objects.
            digest: ``members.digest()`` when already known (planners compute many at once).
        """
        digest = members.digest() if digest is None else digest
        return cls(block_key(members.first_url, digest, 0, members.total_bytes), members.first_url, digest, 0,
                   members.total_bytes, members)
