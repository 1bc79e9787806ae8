"""The compile setting of every function of the replay's inner loop.

``_nrt=False``: no reference counting. The tier state is a tuple of ~25 arrays; with numba's
runtime on, every call that passes it increfs and decrefs each array (~130 ns a call,
measured), which made the replay 4x slower. These functions only read and write arrays
they are given, never allocate, so they need no runtime. ``cache=True``: compiled once
per machine (~30 s), then loaded.
"""

from __future__ import annotations

from numba import njit

kernel = njit(cache=True, _nrt=False)  # type: ignore[call-overload]  # _nrt is not in numba's stubs

# Every function that takes a whole tier, inlined into its caller at numba's level: a call that
# is not inlined passes each array of the tier's tuple as separate arguments (~150 words), which
# cost more than the work inside (8-epoch ImageNet, default stack: 8.8 s -> 4.2 s of replay).
# The price: the first compile takes ~2 CPU-minutes instead of ~30 s (then cached). Small
# helpers that take one array or a heap (:mod:`.heap`, :mod:`.bitset`) stay ordinary calls.
inlined = njit(cache=True, _nrt=False, inline="always")  # type: ignore[call-overload]
