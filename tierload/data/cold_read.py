"""A block's bytes from the cold tier: its byte range, or a pack's members read concurrently.

Every cold read of a block goes through here, whoever reads it (the node cache's fetch loop, a
consumer reading directly while its node cache is away, ``tierload warm``); the reads themselves
(versioned, retried, hundreds in flight) are :class:`tierload.stores.cold.source.ColdSource`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierload.data.blocks import Block
    from tierload.stores.cold.source import ColdSource


def cold_requests(block: Block) -> list[tuple[str, str, int, int]]:
    """The ``(url, version, offset, length)`` ranges that make up ``block``: its byte range, or
    each of a pack's members (a whole object, or a byte range of one), in pack order."""
    members = block.members
    if members is None:
        return [(block.url, block.version, block.offset, block.length)]
    return members.requests()


def read_cold(source: ColdSource, block: Block, tally: dict | None = None) -> bytes:
    """The raw bytes of ``block`` from the cold tier: one ranged read, or a pack's members concurrently.

    Raises:
        SourceChangedError: The object (or a pack member) changed since the manifest was built.
        SourceNotFoundError, EndpointUnreachableError, BackendError, TransientBackendError.
    """
    parts = source.read_ranges(cold_requests(block), tally=tally)
    return parts[0] if len(parts) == 1 else b"".join(parts)


async def read_cold_async(source: ColdSource, block: Block, tally: dict | None = None) -> bytes:
    """:func:`read_cold` awaitable from any event loop (the node cache's fetch loop).

    Raises:
        As :func:`read_cold`.
    """
    parts = await source.read_ranges_async(cold_requests(block), tally=tally)
    return parts[0] if len(parts) == 1 else b"".join(parts)
