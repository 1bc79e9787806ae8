"""The compiled simulator: policies' bookkeeping on integer block ids in arrays, stepped by numba.

:func:`tierload.simulator.run.simulate` and :func:`tierload.simulator.belady.min_hits`
select it on their own; the Python policy classes stay the reference it is tested against.

Compiled functions are cached next to their modules (``cache=True``). Numba re-checks a cached
function against its own file only: after editing a module here, delete this folder's
``__pycache__/*.nbi`` and ``*.nbc``, or callers in other modules keep the old code.
"""

from tierload.simulator.fast.belady import min_hits_fast
from tierload.simulator.fast.simulate import simulate_fast, supports

__all__ = ["min_hits_fast", "simulate_fast", "supports", "warm_up"]


def warm_up() -> None:
    """Compile the replay and MIN now (or load them from the cache): a few seconds once, so
    that timings and progress bars that follow measure replays only."""
    import numpy as np

    from tierload.simulator.run import StackSpec
    from tierload.simulator.trace import Trace

    for block_dtype, epoch_dtype in ((np.int64, np.float64), (np.int32, np.float32)):
        trace = Trace(np.array([0, 1, 0], block_dtype), np.zeros(3, block_dtype), np.zeros(3, epoch_dtype),
                      np.array([1, 1], np.int64))
        simulate_fast(trace, StackSpec("clairvoyant", 1, "lfu", 1))
        min_hits_fast(trace.block, trace.block_bytes, 1, trace.node)
