"""Checksums of block bytes: keyed BLAKE3 with the deployment's key, xxh3-64 without one.

A tier frame's checksum is keyed with a secret of the deployment (:mod:`tierload.frames.checksum_key`),
so whoever can write a tier but does not hold the key cannot make a block file that passes:
keyed BLAKE3 is a MAC (https://github.com/BLAKE3-team/BLAKE3-specs, "keyed_hash" mode), which
xxh3 with a secret seed is not. Without a key (tools, tests of the frame itself) the checksum
is xxh3-64 (https://github.com/Cyan4973/xxHash). The first 8 bytes of the BLAKE3 output are
kept, as the frame header holds 64 bits: forging one needs ~2**64 tries, each a call that
fetches the block again.

Cost: one core hashes ~5 GB/s with keyed BLAKE3 and ~60 GB/s with xxh3 (AVX-512, measured by
``benchmarks/checksum_cost.py``). Blocks of :data:`THREADED_FROM_BYTES` or more are hashed on
several cores (BLAKE3's tree mode: the same digest) where the process may use at least
:data:`THREADED_FROM_CORES` of them; on 2 busy cores the threads only waited for each other
(8 MiB: 1.8-3.5 ms on one thread, 3.5-4.3 ms threaded). The blake3 package runs those threads in
Rayon's global pool, which does not survive ``fork``: a process forked after its parent started
that pool (a DataLoader worker whose parent read blocks) would wait forever on threads it does
not have, so such a process hashes on one core. ``RAYON_NUM_THREADS`` caps the pool's size.
"""

from __future__ import annotations

import os

import blake3
import xxhash

# Below ~4 MiB the threaded hash was no faster here (BLAKE3's Rust docs put the break-even of
# update_rayon at ~128 KiB on an idle x86-64 machine).
THREADED_FROM_BYTES = 4 << 20
THREADED_FROM_CORES = 4

_pool_pid: int | None = None  # the process that started the blake3 package's thread pool


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads_for(size: int) -> int:
    """``max_threads`` for hashing ``size`` bytes: 1, or ``blake3.AUTO`` (all usable cores) for a
    large block in a process with cores to spare, unless the pool belongs to its parent process."""
    global _pool_pid
    if size < THREADED_FROM_BYTES or _usable_cores() < THREADED_FROM_CORES:
        return 1
    pid = os.getpid()
    if _pool_pid is None:
        _pool_pid = pid
    return blake3.blake3.AUTO if _pool_pid == pid else 1


def checksum(data: bytes | bytearray | memoryview, secret: bytes | None = None) -> int:
    """The checksum of ``data`` as an unsigned 64-bit int.

    Args:
        data: The raw block bytes (any contiguous buffer; hashed in place, never copied).
        secret: The deployment's 32-byte key (keyed BLAKE3, first 8 bytes little-endian), or
            None for xxh3-64.
    """
    if secret is None:
        return xxhash.xxh3_64_intdigest(data)
    threads = threads_for(memoryview(data).nbytes)
    return int.from_bytes(blake3.blake3(data, key=secret, max_threads=threads).digest(8), "little")


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
