"""Giving freed memory back to the system: the manifest build's temporaries, a worker's epochs.

Used by the listing and manifest steps (hundreds of MB of temporaries at a million keys) and
by :class:`tierload.loader.epoch_reader.EpochReader` in DataLoader workers.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

__all__ = ["map_large_allocations", "release_freed_memory"]


def release_freed_memory() -> None:
    """Give the memory Arrow's allocator and the C heap keep after frees back to the system.

    Arrow's default pool (mimalloc) keeps freed pages for reuse; the listing and manifest
    steps free hundreds of MB of columns and temporaries at a million keys that nothing in
    the process allocates again, so they would stay in its RSS for good. NumPy's arrays come
    from the C heap (glibc's malloc): once an array of a few MB is freed, glibc raises its
    mmap threshold to that size (its dynamic threshold, see ``mallopt(3)``), so the manifest
    build's later temporaries of that size are carved from the heap, and the heap keeps their
    pages after they are freed (58 MB at 1.28 M keys, measured with ``mallinfo2``).
    ``malloc_trim(0)`` returns every free page of the heap; elsewhere than glibc it is skipped.
    A process that never loaded pyarrow (a training process over a mapped manifest) has no
    Arrow pool, and this does not load pyarrow to find one.
    """
    arrow = sys.modules.get("pyarrow")
    if arrow is not None:
        arrow.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


M_MMAP_THRESHOLD = -3  # mallopt's parameter number, from glibc's <malloc.h>
LARGE_ALLOCATION_BYTES = 1 << 20


@functools.lru_cache(maxsize=1)
def map_large_allocations() -> bool:
    """Make this process's C heap give every allocation of 1 MiB or more its own mapping, so
    freeing it returns its pages to the system at once. Called once per process; whether it took.

    glibc raises its mmap threshold to the size of the largest mapped block freed so far (its
    dynamic threshold, ``mallopt(3)``); a DataLoader worker forked from a process that built a
    manifest inherits a threshold of tens of MB, so each epoch's order and position arrays (8-16
    MB at 2 M samples) come from the heap and their pages stay in the worker after the epoch
    (measured: +46 MB after each epoch against +23 MB with this set, 2 M samples). Setting the
    threshold fixes it and turns the dynamic adjustment off. Elsewhere than glibc it does nothing.
    """
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, LARGE_ALLOCATION_BYTES))


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None (another C library, or no ``libc.so.6``)."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
