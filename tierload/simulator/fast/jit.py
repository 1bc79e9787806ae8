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
