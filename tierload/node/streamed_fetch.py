"""A large block streamed from the cold tier into a file, a request at a time, never whole in memory.

A plain block longer than one request (``cold.max_request_bytes``) is read as the same
requests :meth:`~tierload.stores.cold.source.ColdSource.read_ranges` would send, but in order and at
most :data:`CHUNKS_IN_FLIGHT` at a time; each chunk is hashed (:class:`~tierload.frames.checksum.IncrementalChecksum`)
and appended to a temporary file behind a reserved header, which is written last, once the
checksum is known. So a node cache holds a few chunks of a 10 GiB video, not the video.

Every chunk is a read of its own through the cold source: ``If-Match`` on the version the
manifest recorded (a changed object fails the whole block), its length checked, retried on
its own budget (:mod:`tierload.stores.cold.retry`). The caller owns the temporary file: it renames
it into place when this returns, and removes it when this raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from tierload.data.blocks import Block
from tierload.frames.blockfile import HEADER_SIZE, raw_frame_header
from tierload.frames.checksum import IncrementalChecksum
from tierload.stores.cold.async_reads import split_range
from tierload.stores.cold.source import ColdSource
from tierload.stores.dir_trust import open_new_file

# One chunk arriving while the one before it is hashed and written: the network and the disk
# overlap, and memory holds two requests' bytes (2 x cold.max_request_bytes) per streamed block.
CHUNKS_IN_FLIGHT = 2

Blocking = Callable[..., Awaitable[Any]]
"""``await blocking(function, *args)``: ``function(*args)`` on a thread that may block."""


def streams(block: Block, max_request_bytes: int) -> bool:
    """Whether ``block`` is fetched by :func:`stream_block_to_file`: a plain block (no pack)
    longer than one cold request."""
    return block.members is None and block.length > max_request_bytes


def frame_size(block: Block) -> int:
    """Bytes of the raw frame a streamed block is stored as (header + payload)."""
    return HEADER_SIZE + block.length


def _append(handle: BinaryIO, digest: IncrementalChecksum, data: bytes) -> None:
    digest.update(data)
    handle.write(data)


def _write_header(handle: BinaryIO, header: bytes) -> None:
    handle.flush()
    handle.seek(0)
    handle.write(header)
    handle.flush()


async def stream_block_to_file(source: ColdSource, block: Block, path: Path, secret: bytes | None,
                               tally: dict, blocking: Blocking, *, shared: bool = False) -> int:
    """Write ``block``'s raw frame to ``path``, reading the cold tier a request at a time.

    Args:
        source: The block's cold source.
        block: A plain block (:func:`streams`).
        path: The temporary file to create (truncated if it exists).
        secret: The deployment's checksum key (None: unkeyed xxh3-64).
        tally: ``cold_gets``, ``cold_bytes`` and the retry counters are increased as by a read.
        blocking: Runs the file writes and the hashing off the event loop.
        shared: The hot tier is shared on purpose (the file is created with the umask, not 0600).

    Returns:
        The checksum of the block's bytes (as :func:`tierload.frames.checksum.checksum` of them all).

    Raises:
        SourceChangedError, SourceNotFoundError, BackendError, TransientBackendError: a chunk's
            read failed for good; ``path`` may then hold part of the frame.
        OSError: The file could not be written (full, read-only).
    """
    digest = IncrementalChecksum(secret)
    parts = split_range(block.offset, block.length, source.config.max_request_bytes)
    handle = await blocking(partial(open_new_file, path, shared=shared))
    pending: list[asyncio.Future] = []
    try:
        await blocking(handle.write, bytes(HEADER_SIZE))  # the header's place, written last
        for start, end in parts:
            pending.append(asyncio.ensure_future(source.read_async(block.url, block.version, start, end - start,
                                                                   tally)))
            if len(pending) == CHUNKS_IN_FLIGHT:
                await blocking(_append, handle, digest, await pending.pop(0))
        while pending:
            await blocking(_append, handle, digest, await pending.pop(0))
        await blocking(_write_header, handle, raw_frame_header(block.key, block.length, digest.value()))
    finally:
        for future in pending:
            future.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await blocking(handle.close)
    return digest.value()
