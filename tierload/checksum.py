"""Checksums of block bytes: keyed BLAKE3 with the deployment's key, xxh3-64 without one.

A tier frame's checksum is keyed with a secret of the deployment (:mod:`tierload.checksum_key`),
so whoever can write a tier but does not hold the key cannot make a block file that passes:
keyed BLAKE3 is a MAC (https://github.com/BLAKE3-team/BLAKE3-specs, "keyed_hash" mode), which
xxh3 with a secret seed is not. Without a key (tools, tests of the frame itself) the checksum
is xxh3-64 (https://github.com/Cyan4973/xxHash). The first 8 bytes of the BLAKE3 output are
kept, as the frame header holds 64 bits: forging one needs ~2**64 tries, each a call that
fetches the block again.
"""

from __future__ import annotations

import blake3
import xxhash


def checksum(data: bytes | bytearray | memoryview, secret: bytes | None = None) -> int:
    """The checksum of ``data`` as an unsigned 64-bit int.

    Args:
        data: The raw block bytes.
        secret: The deployment's 32-byte key (keyed BLAKE3, first 8 bytes little-endian), or
            None for xxh3-64.
    """
    if secret is None:
        return xxhash.xxh3_64_intdigest(data)
    return int.from_bytes(blake3.blake3(data, key=secret).digest(8), "little")


class IncrementalChecksum:
    """:func:`checksum` of bytes fed in pieces: the same value as one call over their concatenation.

    Both hashes are incremental (BLAKE3's keyed mode and xxh3-64 keep a running state), so a
    block streamed from the cold tier is checksummed without ever being whole in memory.

    Args:
        secret: As for :func:`checksum`.
    """

    def __init__(self, secret: bytes | None = None) -> None:
        self._state: blake3.blake3 | xxhash.xxh3_64 = (xxhash.xxh3_64() if secret is None
                                                      else blake3.blake3(key=secret))

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """Add the next piece of the bytes."""
        self._state.update(data)

    def value(self) -> int:
        """The checksum of every piece so far, as :func:`checksum` returns it."""
        if isinstance(self._state, xxhash.xxh3_64):
            return self._state.intdigest()
        return int.from_bytes(self._state.digest(8), "little")
