"""The one dtype set the compiled simulator is compiled for; its entry points convert to it.

Numba compiles (and caches) one specialisation per argument-type set: without this, traces
from :func:`tierload.simulator.trace.job_trace` (int64, float64) and from
:func:`tierload.simulator.fast.tracegen.fast_job_trace` (int32, float32) compiled every
function twice (the simulator tests and a CLI sweep on a cold cache: 133 s of CPU, once: 67 s).

Block and node ids are int32, as ``fast_job_trace`` makes them (its 14 bytes an access). Epochs
are float64: recorded traces carry any number as their clock, which float32 would round, so the
replay converts them a chunk at a time (:data:`tierload.simulator.fast.simulate.CHUNK` accesses)
rather than doubling a whole float32 column.
"""

from __future__ import annotations

import numpy as np

from tierload.errors import ConfigError

ID_DTYPE = np.int32
EPOCH_DTYPE = np.float64


def as_ids(values: np.ndarray, what: str) -> np.ndarray:
    """``values`` as C-contiguous int32 (the array itself if it is one already).

    Args:
        values: int array (accesses,) of block or node ids, all >= 0.
        what: Their name, for the error.

    Raises:
        ConfigError: An id of 2**31 or more (int32 cannot hold it).
    """
    if values.dtype != ID_DTYPE and len(values) and int(values.max()) >= 2**31:
        raise ConfigError(f"{what} id {int(values.max())} is 2**31 or more: the compiled simulator numbers "
                          f"{what}s in int32; use engine='reference'")
    return np.ascontiguousarray(values, dtype=ID_DTYPE)


def as_epochs(values: np.ndarray) -> np.ndarray:
    """``values`` (a trace's epoch column or a chunk of it) as C-contiguous float64."""
    return np.ascontiguousarray(values, dtype=EPOCH_DTYPE)
